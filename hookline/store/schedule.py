"""The durable retry schedule: retries wait in Redis, not in worker memory.

Celery's countdown on the Redis broker keeps every waiting retry unacknowledged inside a worker
(about 12 KB each) and delivers one twice if its countdown outlasts the visibility timeout.
Instead, a retry is *parked*: its ready-to-push broker message goes into a sorted set scored by
its due time (Redis server time), and the current message is acknowledged only once the park
is written. A :class:`Releaser` moves due retries, earliest first and in bounded batches, onto
the ``hookline.retry`` queue in one atomic script, so any number of releasers can run. The
message is built by the transport (``hookline.transport.envelope``) and handed in as text; the
schedule only reads it back (``hookline.core.envelope``).

Keys share the ``{schedule}`` hash tag: one Redis Cluster slot, like rq's registries. With
``HOOKLINE_STATE_SHARDS`` above 1 (a Redis Cluster) the schedule is that many such sets of keys
(``keys.schedule_shards``), a retry in its endpoint's shard; every script runs on one shard,
and releasing, stats and listings walk them all. The total cap is enforced per shard, as each
shard's share (``ceil(schedule_max / shards)``); the per-endpoint cap exactly (an endpoint's
retries are all in one shard).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterable, Iterator
from typing import Any

import redis

from hookline.core.config import settings
from hookline.store import connection as store
from hookline.store.connection import ring
from hookline.store.keys import (  # noqa: F401 (the one-shard names, re-exported)
    COUNTS_KEY,
    DUE_KEY,
    MESSAGES_KEY,
    META_KEY,
    RELEASING_KEY,
    SCHEDULE_KEYS,
    WAKE_KEY,
    ScheduleKeys,
    breaker_key,
    doorbell_key,
    endpoint_shard,
    glob_escaped,
    schedule_endpoint_key,
    schedule_shards,
)
from hookline.store.lua import CONFIRM, DEFER_CLAIMED, HOLD, PARK, RELEASE, UNPARK, schedule
from hookline.store.replication import wait_for_replicas
from hookline.store.scheduled import (
    PAGE,
    ScheduledRetry,
    ScheduleStats,
    pages,
    scheduled_retry,
)

#: Seconds a releaser that claimed retries for a separate broker has to push them.
CLAIM_LEASE = 30.0
#: Seconds a held-back retry waits while its endpoint's half-open probe is out, before the
#: releaser looks again (the probe usually answers well within it).
PROBE_WAIT = 2.0
#: After losing every retry it read to another releaser, release_due reads the next batch
#: down the due set, up to this many batches deep, then from the head again.
STALE_READS = 5


def retry_endpoint(retry_id: str) -> str:
    """The endpoint id of a retry id (``<endpoint id>/<event id>``; an endpoint id has no
    ``/``)."""
    return retry_id.split("/", 1)[0]


def index_key(retry_id: str) -> str:
    """The per-endpoint index set a retry id is kept in, with one shard
    (``keys.schedule_endpoint_key``)."""
    return schedule_endpoint_key(retry_endpoint(retry_id))


class ScheduleFull(Exception):
    """The total or per-endpoint cap on scheduled retries is reached."""

    def __init__(self, which: str, count: int, shards: int = 1) -> None:
        where = "in all" if which == "total" else "for this endpoint"
        if which == "total" and shards > 1:
            where = f"in this endpoint's shard (1 of {shards}, each holding its share)"
        super().__init__(f"the retry schedule is full: {count} retries scheduled {where}")
        self.which = which


class RetrySchedule:
    """Park, release, inspect and drop scheduled retries.

    ``shards`` (default ``HOOKLINE_STATE_SHARDS``): how many sets of schedule keys the retries
    are split over; ``max_total`` is enforced as each shard's share of it."""

    def __init__(self, redis_client: Any = None, *, max_total: int | None = None,
                 max_per_endpoint: int | None = None, shards: int | None = None) -> None:
        self.redis: Any = redis_client or store.client()
        self.max_total = max_total or settings().schedule_max
        self.max_per_endpoint = max_per_endpoint or settings().schedule_max_per_endpoint
        self.shards: tuple[ScheduleKeys, ...] = schedule_shards(shards or settings().state_shards)
        #: The total cap each shard enforces.
        self.max_per_shard = math.ceil(self.max_total / len(self.shards))
        self._park = PARK.register(self.redis)
        self._release = RELEASE.register(self.redis)
        self._unpark = UNPARK.register(self.redis)
        self._confirm = CONFIRM.register(self.redis)
        self._woken = itertools.cycle(range(len(self.shards)))
        self._claim_start = itertools.cycle(range(len(self.shards)))
        self._hold = HOLD.register(self.redis)
        self._defer_claimed = DEFER_CLAIMED.register(self.redis)

    def shard_of(self, endpoint_id: str) -> ScheduleKeys:
        """The keys of the shard holding ``endpoint_id``'s retries."""
        return self.shards[endpoint_shard(endpoint_id, len(self.shards))]

    def park(self, *, endpoint_id: str, event_id: str, countdown: float, message: str,
             last_status: int | None = None, last_error: str = "") -> float:
        """Schedule ``message`` to be released in ``countdown`` seconds; returns the due time
        (Unix seconds). Raises :class:`ScheduleFull` at a cap."""
        meta = json.dumps({"endpoint_id": endpoint_id, "event_id": event_id,
                           "last_status": last_status, "last_error": last_error})
        shard = self.shard_of(endpoint_id)
        reply = self._park(
            **schedule(shard), wake=shard.wake, index=shard.by_endpoint(endpoint_id),
            retry_id=f"{endpoint_id}/{event_id}", countdown_ms=max(0, round(countdown * 1000)),
            message=message, meta_json=meta, endpoint_id=endpoint_id, max_total=self.max_per_shard,
            max_per_endpoint=self.max_per_endpoint)
        if reply[0] == "full":
            raise ScheduleFull(reply[1], int(reply[2]), len(self.shards))
        wait_for_replicas(self.redis)  # see hookline/store/replication.py
        return int(reply[1]) / 1000.0

    def release_due(self, *, batch: int = 500, queue: str = "hookline.retry",
                    broker: Any = None, queue_limit: int | None = None
                    ) -> tuple[int, float | None]:
        """Release up to ``batch`` due retries, earliest first within each shard.

        ``broker`` is None when the broker is this Redis: the script pushes the messages itself,
        atomically (up to ``batch`` per shard: each call checks the retry queue's length
        against its limit itself). Otherwise the script claims them and they are pushed to
        ``broker`` here and confirmed, ``batch`` in all over the shards (the caller sized it
        to the room in the retry queue), starting from a different shard each call; a releaser
        dying in between leaves them claimed until the lease ends, then another releases them
        again (the idempotency gate stops a second send).
        Returns (released, seconds until the next retry is due or None when none is left).
        """
        released, wait = 0, None
        start = next(self._claim_start) if broker is not None else 0
        for shard in self.shards[start:] + self.shards[:start]:
            if broker is None:
                count, next_wait = self._push_due(shard, batch, queue, queue_limit)
            elif released < batch or not batch:  # no room: still read when the next is due
                count, next_wait = self._claim_due(shard, batch - released, queue, broker)
            else:
                count, next_wait = 0, 0.0  # this shard was not looked at: look again soon
            released += count
            if next_wait is not None and (wait is None or next_wait < wait):
                wait = next_wait
        return released, wait

    def _push_due(self, shard: ScheduleKeys, batch: int, queue: str,
                  queue_limit: int | None) -> tuple[int, float | None]:
        """release_due for a broker on this Redis: one shard's due retries pushed by the
        script itself."""
        limit = queue_limit or settings().retry_queue_limit
        # The script takes every key through KEYS, so the candidates' endpoint index keys
        # are read first: the earliest ``batch`` retries (the script releases those still
        # there and due, and reports the ones another releaser took meanwhile).
        # Losing every candidate to another releaser means that one made progress, so
        # reading again always ends; after a loss the next read starts further down the
        # due set, so two releasers in step take different retries instead of the same.
        offset = 0
        while True:
            candidates = [_text(c) for c in
                          self.redis.zrange(shard.due, offset, offset + batch - 1)]
            if not candidates and offset:
                offset = 0
                continue
            if not candidates:
                return 0, None  # nothing scheduled: an idle releaser runs no script
            reply = self._release(
                **schedule(shard), release_to=queue, doorbell=doorbell_key(queue),
                indexes=[shard.by_endpoint(retry_endpoint(c)) for c in candidates],
                most=batch, limit=limit, mode="push", candidates=candidates)
            if int(reply[0]) or not int(reply[3]):
                break  # released some, or nothing taken by another releaser: done
            offset = (offset + batch) % (STALE_READS * batch)
        return _released(reply)

    def _claim_due(self, shard: ScheduleKeys, batch: int, queue: str,
                   broker: Any) -> tuple[int, float | None]:
        """release_due for a broker elsewhere: one shard's due retries claimed, pushed to
        ``broker`` and confirmed (confirm.lua: one parked again meanwhile stays)."""
        reply = self._release(**schedule(shard), release_to=shard.releasing, indexes=[],
                              most=batch, limit=round(CLAIM_LEASE * 1000), mode="claim",
                              candidates=[])
        ids = [_text(retry_id) for retry_id in reply[3::2]]
        if ids:
            self._push_claimed(broker, queue, ids, reply[4::2], due=shard.due,
                               releasing=shard.releasing)
        return _released(reply)

    def _push_claimed(self, broker: Any, queue: str, ids: list[str], messages: list[Any],
                      *, due: str = DUE_KEY, releasing: str = RELEASING_KEY) -> None:
        """Publish claimed retries onto ``queue``, then confirm them (confirm.lua). ``broker``
        is a Redis client (its list, and the doorbell) or anything with
        ``publish_released(queue, messages)`` that publishes them in order and returns how
        many it published (``hookline.transport.rabbitmq``: RabbitMQ through Celery's
        producer). The ones published before a failure (the exception's ``published``) are
        confirmed before it is raised; the rest stay claimed until the lease ends, then are
        released again."""
        ids, messages = self._hold_back(ids, messages, due=due, releasing=releasing)
        if not ids:
            return
        publish = getattr(broker, "publish_released", None)
        if publish is None:
            pipe = broker.pipeline(transaction=False)
            for message in messages:
                if message:
                    pipe.lpush(queue, message)
            ring(pipe, queue, len(messages))
            pipe.execute()
            wait_for_replicas(broker)  # before confirming: see hookline/store/replication.py
            self.confirm_claimed(ids)
            return
        try:
            published = int(publish(queue, [_text(m) if m else "" for m in messages]))
        except Exception as exc:
            self.confirm_claimed(ids[:int(getattr(exc, "published", 0))])
            raise
        self.confirm_claimed(ids[:published])

    def _hold_back(self, ids: list[str], messages: list[Any], *, due: str = DUE_KEY,
                   releasing: str = RELEASING_KEY) -> tuple[list[str], list[Any]]:
        """Claimed retries whose endpoint is held go back to the due set, due when it may
        take them, instead of travelling through the broker to a worker that would only park
        them again: an open breaker's or a Retry-After's backlog stays here until the hold
        ends, and when a breaker's cool-down ends only one retry goes out (the probe), the
        rest waiting for its outcome. One round trip (hold.lua per endpoint, pipelined).
        Returns the retries to publish, in order."""
        endpoints = list(dict.fromkeys(retry_endpoint(retry_id) for retry_id in ids))
        if isinstance(self.redis, redis.cluster.RedisCluster):
            # redis-py's cluster pipeline refuses scripts: one call per endpoint.
            replies = [self._hold(breaker=breaker_key(endpoint_id)) for endpoint_id in endpoints]
        else:
            pipe = self.redis.pipeline(transaction=False)
            for endpoint_id in endpoints:
                self._hold(pipe, breaker=breaker_key(endpoint_id))
            replies = pipe.execute()
        holds = dict(zip(endpoints, replies, strict=True))
        kept: list[tuple[str, Any]] = []
        delays: list[Any] = []
        probing: set[str] = set()
        for retry_id, message in zip(ids, messages, strict=True):
            endpoint_id = retry_endpoint(retry_id)
            why, wait_ms, probe = holds[endpoint_id]
            why, wait = _text(why), int(wait_ms) / 1000.0
            if not why and _text(probe) == "1":
                if endpoint_id not in probing:
                    probing.add(endpoint_id)  # the first one is the probe
                    kept.append((retry_id, message))
                    continue
                why, wait = "breaker_probe", PROBE_WAIT
            if not why:
                kept.append((retry_id, message))
                continue
            delay = wait + random.uniform(0.1, min(1.0 + wait / 10, 5.0))
            if why == "paused":
                delay = wait  # no jitter: resume restores their order (piece_held.lua)
            elif why == "breaker_probe":
                delay = min(wait, PROBE_WAIT) + random.uniform(0.1, 1.0)
            delays += [retry_id, round(delay * 1000)]
        if delays:
            self._defer_claimed(due=due, releasing=releasing, delays=delays)
        return [retry_id for retry_id, _ in kept], [message for _, message in kept]

    def wait_for_wake(self, timeout: float) -> None:
        """Block until a retry due sooner than all others is parked, or ``timeout`` passes.
        With several shards this watches one shard's wake list per call, in turn (a blocking
        pop cannot span a cluster's slots): a retry parked due sooner in another shard is
        released at most ``timeout`` late. The block lasts at most half of
        ``HOOKLINE_REDIS_TIMEOUT``: the client waits no longer than that for the answer."""
        if timeout <= 0:
            return
        shard = self.shards[next(self._woken)]
        block = min(timeout, settings().redis_timeout / 2)
        self.redis.blpop([shard.wake], timeout=max(0.01, block))

    def stats(self) -> ScheduleStats:
        total, oldest = 0, None
        by_endpoint: dict[str, int] = {}
        for shard in self.shards:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zcard(shard.due)
            pipe.hgetall(shard.counts)
            pipe.zrange(shard.due, 0, 0, withscores=True)
            count, counts, head = pipe.execute()
            total += int(count)
            by_endpoint.update((ep, int(n)) for ep, n in counts.items() if int(n) > 0)
            if head and (oldest is None or head[0][1] / 1000.0 < oldest):
                oldest = head[0][1] / 1000.0
        now = store.redis_time(self.redis)
        return ScheduleStats(
            total=total,
            by_endpoint=by_endpoint,
            oldest_due=oldest,
            lag=max(0.0, now - oldest) if oldest is not None else 0.0,
        )

    def count(self, endpoint_id: str) -> int:
        """How many retries of ``endpoint_id`` are scheduled (park.lua's count)."""
        return int(self.redis.hget(self.shard_of(endpoint_id).counts, endpoint_id) or 0)

    def scheduled(self, endpoint_id: str | None = None) -> Iterator[ScheduledRetry]:
        """Scheduled retries (of one endpoint), in no particular order.

        One endpoint's are read from its index set (``keys.schedule_endpoint_key``), not by a
        scan of the whole schedule; a page of ids at a time, each page's meta, messages and due
        times in one round trip."""
        if endpoint_id is not None:
            self._complete_index(endpoint_id)
            shard = self.shard_of(endpoint_id)
            yield from self._read(shard, self.redis.sscan_iter(shard.by_endpoint(endpoint_id),
                                                               count=PAGE))
            return
        for shard in self.shards:
            yield from self._read(shard, (retry_id for retry_id, _ in
                                          self.redis.hscan_iter(shard.meta, count=PAGE)))

    def _read(self, shard: ScheduleKeys, ids: Iterable[str]) -> Iterator[ScheduledRetry]:
        for page in pages(iter(ids)):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(shard.meta, page)
            pipe.hmget(shard.messages, page)
            pipe.zmscore(shard.due, page)
            metas, messages, dues = pipe.execute()
            for retry_id, meta_text, message, due in zip(page, metas, messages, dues,
                                                         strict=True):
                if meta_text is None or message is None:
                    continue  # left the schedule since the id was read
                yield scheduled_retry(retry_id, meta_text, message, due)

    def _complete_index(self, endpoint_id: str) -> None:
        """Retries parked before the per-endpoint index existed are counted but not indexed:
        when the index holds fewer ids than the endpoint's count, add the endpoint's ids found
        by one scan of the schedule (once; after that the index is complete)."""
        shard = self.shard_of(endpoint_id)
        index = shard.by_endpoint(endpoint_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(shard.counts, endpoint_id)
        pipe.scard(index)
        count, indexed = pipe.execute()
        if int(count or 0) <= int(indexed):
            return
        prefix = f"{endpoint_id}/"
        ids = [_text(retry_id) for retry_id, _ in
               self.redis.hscan_iter(shard.meta, match=f"{glob_escaped(prefix)}*", count=PAGE)]
        for start in range(0, len(ids), PAGE):
            self.redis.sadd(index, *ids[start:start + PAGE])

    def make_due(self, endpoint_id: str, *, parked_after: int, shift: int, now: int,
                 spacing: int = 0, due_before: int | None = None) -> int:
        """Bring back the endpoint's retries due at or after ``parked_after`` (ms of Redis
        time; and before ``due_before`` when given): resume's step for the deliveries a pause
        parked (due a pause-park after they were parked), and a secrets repair's. With no
        ``spacing`` each is brought forward by ``shift`` ms, to the moment it was parked: in
        the past, in the order they came in. With ``spacing`` (ms: the endpoint's rate
        interval) they are due from ``now`` one every ``spacing`` ms, in that order, so the
        rate limit takes each in turn instead of deferring a burst (which could let a later
        one overtake an earlier one). A retry released or dropped meanwhile is left alone
        (ZADD XX). Returns how many were brought back."""
        self._complete_index(endpoint_id)
        shard = self.shard_of(endpoint_id)
        held: list[tuple[int, str]] = []
        until = math.inf if due_before is None else due_before
        for page in pages(iter(self.redis.sscan_iter(shard.by_endpoint(endpoint_id),
                                                      count=PAGE))):
            dues = self.redis.zmscore(shard.due, page)
            held += [(int(due), retry_id) for retry_id, due in zip(page, dues, strict=True)
                     if due is not None and parked_after <= due < until]
        held.sort()
        for start in range(0, len(held), PAGE):
            self.redis.zadd(shard.due, {
                retry_id: (now + (start + i) * spacing) if spacing else due - shift
                for i, (due, retry_id) in enumerate(held[start:start + PAGE])}, xx=True)
        if held:
            # Due before everything else now: wake a sleeping releaser (as park.lua does).
            pipe = self.redis.pipeline(transaction=False)
            pipe.lpush(shard.wake, now)
            pipe.ltrim(shard.wake, 0, 15)
            pipe.execute()
        return len(held)

    def unpark(self, retry_ids: list[str]) -> int:
        """Take retries out of the schedule (one script call per shard); returns how many
        were still there."""
        return self._per_shard(self._unpark, retry_ids)

    def confirm_claimed(self, retry_ids: list[str]) -> int:
        """Take claimed retries, pushed to the broker, out of the schedule; one parked again
        since it was claimed (its message taken and deferred already) stays. Returns how
        many left."""
        return self._per_shard(self._confirm, retry_ids)

    def _per_shard(self, script: Any, retry_ids: list[str]) -> int:
        by_shard: dict[ScheduleKeys, list[str]] = {}
        for retry_id in retry_ids:
            by_shard.setdefault(self.shard_of(retry_endpoint(retry_id)), []).append(retry_id)
        removed = 0
        for shard, ids in by_shard.items():
            removed += int(script(
                **schedule(shard), releasing=shard.releasing,
                indexes=[shard.by_endpoint(retry_endpoint(retry_id)) for retry_id in ids],
                retry_ids=ids))
        return removed


def _text(value: Any) -> str:
    """A Redis reply (bytes or str) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _released(reply: Any) -> tuple[int, float | None]:
    """(released, seconds until the shard's next retry is due or None) of a release reply."""
    released, next_due, now = int(reply[0]), int(reply[1]), int(reply[2])
    return released, (max(0.0, (next_due - now) / 1000.0) if next_due >= 0 else None)
