"""Waiting for replicas (Redis ``WAIT``) after the writes that hand an event on.

Redis replicates asynchronously: a write the master acknowledged may not have reached any
replica when a failover promotes one, and is then lost. Losing most writes only repeats work
(a lost acknowledgement redelivers a message; a lost done marker lets the idempotency gate
send once more, with the same webhook-id). Three writes are different: after them the caller
lets go of the event (``send_webhook`` returns, the worker acknowledges the message), so
losing one loses the event. After each of those Hookline waits until
``HOOKLINE_REDIS_WAIT_REPLICAS`` replicas have it, at most ``HOOKLINE_REDIS_WAIT_TIMEOUT``:

- publishing a delivery (``hookline.broker.SentinelChannel._put``);
- parking a retry in the schedule (``RetrySchedule.park``);
- writing a dead letter (``DeadLetterQueue.add``).

``WAIT`` counts the writes of the connection it is sent on, and a pooled client may send it
on another one; so a small write (the fence key) goes first on the same connection, in one
round trip: its replication offset is past every write that finished before it.
A replica missing after the timeout is logged (``redis.replicas_behind``, at most every
10 s per process) and the caller goes on: the write stands on the master; for refusing
writes while replicas are missing, Redis's own ``min-replicas-to-write`` is the tool.
"""

from __future__ import annotations

import logging
import threading
from time import monotonic
from typing import Any

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.store.keys import REPLICATION_FENCE_KEY

#: Seconds between two ``redis.replicas_behind`` lines of one process.
WARN_EVERY = 10.0

_warned = [-WARN_EVERY]
_warned_lock = threading.Lock()


def wait_command() -> tuple[str, int, int] | None:
    """``("WAIT", replicas, timeout ms)`` as configured, or None for no wait: for a pipeline
    that already holds the writes on its one connection."""
    config = settings()
    if config.redis_wait_replicas <= 0:
        return None
    return "WAIT", config.redis_wait_replicas, max(1, round(config.redis_wait_timeout * 1000))


def wait_for_replicas(client: Any) -> int | None:
    """Wait until the configured number of replicas has every write ``client``'s Redis
    finished so far; returns how many replicas acknowledged, or None when no wait is
    configured. Redis errors are raised as they come; replicas missing are not an error."""
    command = wait_command()
    if command is None:
        return None
    _, wanted, _ = command
    pipe = client.pipeline(transaction=False)
    pipe.set(REPLICATION_FENCE_KEY, wanted)
    pipe.execute_command(*command)
    acknowledged = int(pipe.execute()[-1])
    if acknowledged < wanted:
        replicas_behind(acknowledged, wanted)
    return acknowledged


def replicas_behind(acknowledged: int, wanted: int) -> None:
    """Log that a write reached fewer replicas than asked for (rate-limited)."""
    now = monotonic()
    with _warned_lock:
        if now - _warned[0] < WARN_EVERY:
            return
        _warned[0] = now
    log_event("redis.replicas_behind", level=logging.WARNING, acknowledged=acknowledged,
              wanted=wanted, timeout=settings().redis_wait_timeout)
