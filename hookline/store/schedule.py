"""The durable retry schedule: retries wait in Redis, not in worker memory.

Celery's countdown on the Redis broker keeps every waiting retry unacknowledged inside a worker
(about 12 KB each) and delivers one twice if its countdown outlasts the visibility timeout.
Instead, a retry is *parked*: its ready-to-push broker message goes into a sorted set scored by
its due time (Redis server time), and the current message is acknowledged only once the park
is written. A :class:`Releaser` moves due retries, earliest first and in bounded batches, onto
the ``hookline.retry`` queue in one atomic script, so any number of releasers can run.

Keys share the ``{schedule}`` hash tag: one Redis Cluster slot, like rq's registries.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kombu.serialization import dumps as serialize
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps as json_dumps
from kombu.utils.uuid import uuid

from hookline.core.config import settings
from hookline.core.messages import TASK_NAME, delivery_headers
from hookline.store import connection as store
from hookline.store.connection import ring
from hookline.store.keys import (
    COUNTS_KEY,
    DUE_KEY,
    MESSAGES_KEY,
    META_KEY,
    RELEASING_KEY,
    SCHEDULE_KEYS,
    WAKE_KEY,
    doorbell_key,
    glob_escaped,
    schedule_endpoint_key,
)

#: Seconds a releaser that claimed retries for a separate broker has to push them.
CLAIM_LEASE = 30.0
#: After losing every retry it read to another releaser, release_due reads the next batch
#: down the due set, up to this many batches deep, then from the head again.
STALE_READS = 5
#: Retries read per page by ``scheduled()``.
PAGE = 500


def retry_endpoint(retry_id: str) -> str:
    """The endpoint id of a retry id (``<endpoint id>/<event id>``; an endpoint id has no
    ``/``)."""
    return retry_id.split("/", 1)[0]


def index_key(retry_id: str) -> str:
    """The per-endpoint index set a retry id is kept in (``keys.schedule_endpoint_key``)."""
    return schedule_endpoint_key(retry_endpoint(retry_id))


class ScheduleFull(Exception):
    """The total or per-endpoint cap on scheduled retries is reached."""

    def __init__(self, which: str, count: int) -> None:
        where = "in all" if which == "total" else "for this endpoint"
        super().__init__(f"the retry schedule is full: {count} retries scheduled {where}")
        self.which = which


@dataclass(frozen=True)
class ScheduledRetry:
    """A parked retry, decoded from its broker message."""

    id: str
    endpoint_id: str
    event_id: str
    event_type: str
    payload: Any
    due: float
    attempts: int
    first_attempt_at: float | None
    last_status: int | None
    last_error: str
    #: The Celery task id of its message (Flower's task), or "" if the message has none.
    task_id: str = ""
    #: When the event was published (the message's ``enqueued_at``), as the message carries it.
    enqueued_at: Any = None


@dataclass(frozen=True)
class ScheduleStats:
    total: int
    by_endpoint: dict[str, int] = field(default_factory=dict)
    #: Unix seconds of the earliest due retry, or None.
    oldest_due: float | None = None
    #: Seconds the earliest retry is overdue (0 when none is): how far behind releasing is.
    lag: float = 0.0


def build_message(app: Any, *, task_name: str, task_id: str, args: Any, kwargs: dict[str, Any],
                  retries: int, queue: str, parent_id: str | None = None,
                  root_id: str | None = None, argsrepr: str | None = None) -> str:
    """The message kombu's Redis transport would push for this task onto ``queue``, as JSON.

    Built with Celery's own ``create_task_message`` and the envelope kombu's virtual channel
    makes (``prepare_message`` and ``_inplace_augment_message``: base64 body, a fresh delivery
    tag, the queue as exchange and routing key), so the worker reads it like any published
    task. Built here rather than through a producer: no broker connection is needed, so a
    retry can be built (and parked) without one.
    """
    headers, properties, body, _ = app.amqp.create_task_message(
        task_id, task_name, args, kwargs, retries=retries, parent_id=parent_id, root_id=root_id,
        argsrepr=argsrepr,
    )
    if task_name == TASK_NAME:
        headers.update(delivery_headers(args, kwargs, task_id))
    content_type, content_encoding, data = serialize(body, serializer="json")
    message = {
        "body": bytes_to_str(base64.b64encode(str_to_bytes(data))),
        "content-encoding": content_encoding,
        "content-type": content_type,
        "headers": headers,
        "properties": {
            **properties,
            "delivery_mode": 2,
            "delivery_info": {"exchange": queue, "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": uuid(),
        },
    }
    return str(json_dumps(message))


def decode_message(message: str) -> tuple[list[Any], dict[str, Any]]:
    """The task arguments inside a broker message built by :func:`build_message`."""
    _task_id, args, kwargs = decode_task(message)
    return args, kwargs


def decode_task(message: str) -> tuple[str, list[Any], dict[str, Any]]:
    """The task id ("" if none) and arguments inside a broker message."""
    envelope = json.loads(message)
    body = envelope["body"]
    if envelope["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs, _embed = json.loads(body)
    headers = envelope.get("headers")
    task_id = headers.get("id") if isinstance(headers, dict) else None
    return str(task_id or ""), list(args), dict(kwargs)


class RetrySchedule:
    """Park, release, inspect and drop scheduled retries."""

    def __init__(self, redis_client: Any = None, *, max_total: int | None = None,
                 max_per_endpoint: int | None = None) -> None:
        self.redis: Any = redis_client or store.client()
        self.max_total = max_total or settings().schedule_max
        self.max_per_endpoint = max_per_endpoint or settings().schedule_max_per_endpoint
        self._park = self.redis.register_script(store.load_script("park"))
        self._release = self.redis.register_script(store.load_script("release"))
        self._unpark = self.redis.register_script(store.load_script("unpark"))

    def park(self, *, endpoint_id: str, event_id: str, countdown: float, message: str,
             last_status: int | None = None, last_error: str = "") -> float:
        """Schedule ``message`` to be released in ``countdown`` seconds; returns the due time
        (Unix seconds). Raises :class:`ScheduleFull` at a cap."""
        meta = json.dumps({"endpoint_id": endpoint_id, "event_id": event_id,
                           "last_status": last_status, "last_error": last_error})
        reply = self._park(
            keys=[*SCHEDULE_KEYS, WAKE_KEY, schedule_endpoint_key(endpoint_id)],
            args=[f"{endpoint_id}/{event_id}", max(0, round(countdown * 1000)), message, meta,
                  endpoint_id, self.max_total, self.max_per_endpoint],
        )
        if reply[0] == "full":
            raise ScheduleFull(reply[1], int(reply[2]))
        return int(reply[1]) / 1000.0

    def release_due(self, *, batch: int = 500, queue: str = "hookline.retry",
                    broker: Any = None, queue_limit: int | None = None
                    ) -> tuple[int, float | None]:
        """Release up to ``batch`` due retries, earliest first.

        ``broker`` is None when the broker is this Redis: the script pushes the messages itself,
        atomically. Otherwise the script claims them and they are pushed to ``broker`` here
        and confirmed; a releaser dying in between leaves them claimed until the lease ends,
        then another releases them again (the idempotency gate stops a second send).
        Returns (released, seconds until the next retry is due or None when none is left).
        """
        if broker is None:
            limit = queue_limit or settings().retry_queue_limit
            # The script takes every key through KEYS, so the candidates' endpoint index keys
            # are read first: the earliest ``batch`` retries (the script releases those still
            # there and due, and reports the ones another releaser took meanwhile).
            # Losing every candidate to another releaser means that one made progress, so
            # reading again always ends; after a loss the next read starts further down the
            # due set, so two releasers in step take different retries instead of the same.
            offset = 0
            while True:
                candidates = [bytes_to_str(c) for c in
                              self.redis.zrange(DUE_KEY, offset, offset + batch - 1)]
                if not candidates and offset:
                    offset = 0
                    continue
                if not candidates:
                    return 0, None  # nothing scheduled: an idle releaser runs no script
                reply = self._release(
                    keys=[*SCHEDULE_KEYS, queue, doorbell_key(queue),
                          *map(index_key, candidates)],
                    args=[batch, limit, "push", *candidates])
                if int(reply[0]) or not int(reply[3]):
                    break  # released some, or nothing taken by another releaser: done
                offset = (offset + batch) % (STALE_READS * batch)
        else:
            reply = self._release(keys=[*SCHEDULE_KEYS, RELEASING_KEY],
                                  args=[batch, round(CLAIM_LEASE * 1000), "claim"])
            ids, messages = reply[3::2], reply[4::2]
            if ids:
                pipe = broker.pipeline(transaction=False)
                for message in messages:
                    if message:
                        pipe.lpush(queue, message)
                ring(pipe, queue, len(messages))
                pipe.execute()
                self.unpark([bytes_to_str(retry_id) for retry_id in ids])
        released, next_due, now = int(reply[0]), int(reply[1]), int(reply[2])
        return released, (max(0.0, (next_due - now) / 1000.0) if next_due >= 0 else None)

    def wait_for_wake(self, timeout: float) -> None:
        """Block until a retry due sooner than all others is parked, or ``timeout`` passes."""
        if timeout <= 0:
            return
        self.redis.blpop([WAKE_KEY], timeout=max(0.01, timeout))

    def stats(self) -> ScheduleStats:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(DUE_KEY)
        pipe.hgetall(COUNTS_KEY)
        pipe.zrange(DUE_KEY, 0, 0, withscores=True)
        pipe.time()
        total, counts, head, (seconds, micros) = pipe.execute()
        now = seconds + micros / 1e6
        oldest = head[0][1] / 1000.0 if head else None
        return ScheduleStats(
            total=int(total),
            by_endpoint={endpoint: int(n) for endpoint, n in counts.items() if int(n) > 0},
            oldest_due=oldest,
            lag=max(0.0, now - oldest) if oldest is not None else 0.0,
        )

    def scheduled(self, endpoint_id: str | None = None) -> Iterator[ScheduledRetry]:
        """Scheduled retries (of one endpoint), in no particular order.

        One endpoint's are read from its index set (``keys.schedule_endpoint_key``), not by a
        scan of the whole schedule; a page of ids at a time, each page's meta, messages and due
        times in one round trip."""
        if endpoint_id is None:
            pages = _pages(retry_id for retry_id, _ in
                           self.redis.hscan_iter(META_KEY, count=PAGE))
        else:
            self._complete_index(endpoint_id)
            pages = _pages(self.redis.sscan_iter(schedule_endpoint_key(endpoint_id),
                                                 count=PAGE))
        for ids in pages:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(META_KEY, ids)
            pipe.hmget(MESSAGES_KEY, ids)
            pipe.zmscore(DUE_KEY, ids)
            metas, messages, dues = pipe.execute()
            for retry_id, meta_text, message, due in zip(ids, metas, messages, dues, strict=True):
                if meta_text is None or message is None:
                    continue  # left the schedule since the id was read
                meta = json.loads(meta_text)
                task_id, args, kwargs = decode_task(message)
                yield ScheduledRetry(
                    id=retry_id, endpoint_id=meta["endpoint_id"], event_id=meta["event_id"],
                    event_type=args[1] if len(args) > 1 else "",
                    payload=args[2] if len(args) > 2 else None,
                    due=(due or 0) / 1000.0, attempts=int(kwargs.get("attempts") or 0),
                    first_attempt_at=kwargs.get("first_attempt_at"),
                    last_status=meta.get("last_status"), last_error=meta.get("last_error") or "",
                    task_id=task_id,
                    enqueued_at=kwargs.get("enqueued_at"),
                )

    def _complete_index(self, endpoint_id: str) -> None:
        """Retries parked before the per-endpoint index existed are counted but not indexed:
        when the index holds fewer ids than the endpoint's count, add the endpoint's ids found
        by one scan of the schedule (once; after that the index is complete)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(COUNTS_KEY, endpoint_id)
        pipe.scard(schedule_endpoint_key(endpoint_id))
        count, indexed = pipe.execute()
        if int(count or 0) <= int(indexed):
            return
        prefix = f"{endpoint_id}/"
        ids = [bytes_to_str(retry_id) for retry_id, _ in
               self.redis.hscan_iter(META_KEY, match=f"{glob_escaped(prefix)}*", count=PAGE)]
        for start in range(0, len(ids), PAGE):
            self.redis.sadd(schedule_endpoint_key(endpoint_id), *ids[start:start + PAGE])

    def unpark(self, retry_ids: list[str]) -> int:
        if not retry_ids:
            return 0
        return int(self._unpark(keys=[*SCHEDULE_KEYS, RELEASING_KEY, *map(index_key, retry_ids)],
                                args=retry_ids))


def _pages(ids: Iterator[str]) -> Iterator[list[str]]:
    """``ids`` in lists of at most ``PAGE``, each id once (a scan may return one twice)."""
    seen: set[str] = set()
    page: list[str] = []
    for retry_id in ids:
        if retry_id in seen:
            continue
        seen.add(retry_id)
        page.append(retry_id)
        if len(page) >= PAGE:
            yield page
            page = []
    if page:
        yield page
