"""Waiting for replicas (Redis ``WAIT``) after the writes that hand an event on.

Redis replicates asynchronously: a write the master acknowledged may not have reached any
replica when a failover promotes one, and is then lost. Losing most writes only repeats work
(a lost acknowledgement redelivers a message; a lost done marker lets the idempotency gate
send once more, with the same webhook-id). Three writes are different: after them the caller
lets go of the event (``send_webhook`` returns, the worker acknowledges the message), so
losing one loses the event. After each of those Hookline waits until
``HOOKLINE_REDIS_WAIT_REPLICAS`` replicas have it, at most ``HOOKLINE_REDIS_WAIT_TIMEOUT``
(with Sentinel by default ``all``: every replica the Sentinels see up, as any of them may be
promoted; waiting for fewer, a write the demoted master took after the promotion can be
acknowledged by a replica that is then resynchronised from the new master, and is lost):

- publishing a delivery (``hookline.transport.sentinel.SentinelChannel._put``);
- parking a retry in the schedule (``RetrySchedule.park``), and releasing it to a broker
  that is not Hookline's Redis (``RetrySchedule.release_due``, before it is unparked);
- writing a dead letter (``DeadLetterQueue.add``).

Fewer replicas in time fails the write as Redis being unreachable would
(:class:`ReplicasBehind`, a ``redis.ConnectionError``): the publish is retried and then
raised to the caller, the retry's message is not acknowledged (it is delivered again), the
dead letter is spooled to disk. So the event is never let go of while only the master has
it; the price is a duplicate (same webhook-id, stopped by the idempotency gate where its
marker survived) when the write did survive.

``WAIT`` counts the writes of the connection it is sent on, and a pooled client may send it
on another one; so a small write (the fence key) goes first on the same connection, in one
round trip: its replication offset is past every write that finished before it.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from time import monotonic
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.sentinel import SentinelConnectionPool

from hookline.core.config import ALL_REPLICAS, settings
from hookline.core.logs import log_event
from hookline.store.keys import REPLICATION_FENCE_KEY
from hookline.store.sentinel import FOLLOW_EVERY, moved_within

#: Per Sentinel pool: when its replicas were last counted, and how many were up.
_replicas_seen: weakref.WeakKeyDictionary[SentinelConnectionPool, tuple[float, int]] = (
    weakref.WeakKeyDictionary())


class ReplicasBehind(redis.ConnectionError):
    """A write reached fewer replicas than ``HOOKLINE_REDIS_WAIT_REPLICAS`` within
    ``HOOKLINE_REDIS_WAIT_TIMEOUT``: handled as Redis being unreachable."""


class MasterMoved(ReplicasBehind):
    """A write went to a master the Sentinels no longer name (a failover not yet followed):
    it may be lost, so it is handled as one that reached too few replicas."""


def wait_command(client: Any) -> tuple[str, int, int] | None:
    """``("WAIT", replicas, timeout ms)`` for a write through ``client``, or None for no wait
    (for a pipeline that already holds the writes on its one connection)."""
    config = settings()
    wanted = config.redis_wait_replicas
    up = replicas_up(client)  # behind Sentinel, also whether the master moved (MasterMoved)
    if wanted == ALL_REPLICAS:
        wanted = up
    if wanted <= 0:
        return None
    return "WAIT", wanted, max(1, round(config.redis_wait_timeout * 1000))


def replicas_up(client: Any) -> int:
    """How many replicas the Sentinels see up for ``client``'s master (asked at most every
    :data:`~hookline.store.sentinel.FOLLOW_EVERY` seconds): any of them may be promoted, so a
    write that must survive a failover waits for all of them. 0 for a client not managed by
    Sentinel.

    The count is of the master the Sentinels name *now*, so it is asked together with where
    that master is: when the pool's connections are on another one (a failover the pool has
    not followed yet), :class:`MasterMoved` is raised. Without that, a demoted master still
    answering a second after the promotion took writes that a count of the new master's
    replicas let go of: 0 replicas up (the others still resynchronising) meant no wait, or a
    replica not yet reconfigured acknowledged them, and all were lost when Sentinel turned
    the demoted master into a replica (the quick Sentinel soak lost 1,100-1,300 events so,
    2 runs of 2 on 2026-12-04). While the count is the old one, the promoted replica is one
    of those waited for, and it has left the demoted master: the wait fails."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return 0
    now = monotonic()
    known = _replicas_seen.get(pool)
    if known is None or now - known[0] >= FOLLOW_EVERY:
        writing_to = pool.master_address
        try:
            master = pool.get_master_address()  # closes idle connections when it moved
            count = len(pool.sentinel_manager.discover_slaves(pool.service_name))
        except redis.RedisError:
            master, count = writing_to, known[1] if known is not None else 0
        known = _replicas_seen[pool] = (now, count)
        if writing_to is not None and master is not None and tuple(master) != tuple(
                writing_to):
            raise MasterMoved(f"the Redis master moved from {writing_to[0]}:{writing_to[1]} "
                              f"to {master[0]}:{master[1]} before the write was confirmed")
    return known[1]


def wait_for_replicas(client: Any) -> int | None:
    """Wait until the configured number of replicas has every write ``client``'s Redis
    finished so far; returns how many acknowledged, or None when no wait is configured.
    Raises :class:`ReplicasBehind` when too few did in time, Redis errors as they come."""
    if isinstance(client, RedisCluster):
        return None  # WAIT is per node: a cluster's shards would each need their own fence
    command = wait_command(client)
    if command is None:
        _not_moved(client)
        return None
    _, wanted, _ = command
    pipe = client.pipeline(transaction=False)
    pipe.set(REPLICATION_FENCE_KEY, wanted)
    pipe.execute_command(*command)
    acknowledged = int(pipe.execute()[-1])
    if acknowledged < wanted:
        timeout = settings().redis_wait_timeout
        rediscover(client)
        log_event("redis.replicas_behind", level=logging.WARNING, acknowledged=acknowledged,
                  wanted=wanted, timeout=timeout)
        raise ReplicasBehind(
            f"a write reached {acknowledged} of {wanted} replicas within {timeout:g}s "
            "(HOOKLINE_REDIS_WAIT_REPLICAS, HOOKLINE_REDIS_WAIT_TIMEOUT)")
    _not_moved(client)
    return acknowledged


def _not_moved(client: Any) -> None:
    """Raise :class:`MasterMoved` when ``client``'s Sentinel pool found its master moved a
    moment ago: the write may have gone to the demoted master on a connection taken before
    the pool asked, and the fence and WAIT to the new one (another thread's connection, or
    the fence's own, can be the one that asks). The quick Sentinel soak lost about 570
    events so in a run where the count of replicas was checked alone. The moment: a
    :data:`FOLLOW_EVERY` the pool may go without asking, the WAIT's own timeout, a second's
    margin; what is refused then is written again by its caller (the same event id)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None and moved_within(
            pool, FOLLOW_EVERY + settings().redis_wait_timeout + 1.0):
        raise MasterMoved("the Redis master moved a moment ago: the write may have gone to "
                          "the demoted one, and is not confirmed")


def rediscover(client: Any) -> None:
    """Ask the Sentinels again where the master is, when ``client`` is a Sentinel-managed
    one: a master demoted by a failover keeps accepting writes (without replicas) until
    Sentinel reconfigures it, about 10 s later, and redis-py asks only when it connects.
    When the address changed, the idle connections to the old one are closed, so the write
    that fails here is retried on the new master."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool):
        with contextlib.suppress(redis.RedisError):  # none answers: the next connection asks
            pool.get_master_address()
