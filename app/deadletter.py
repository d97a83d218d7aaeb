"""The dead-letter queue: every event that will not be delivered, with why, for operators to
inspect and replay.

``hookline:dlq`` is a hash of entry id -> JSON; ``hookline:dlq:by_time`` orders the ids by when
they were dead-lettered. An entry id is ``<endpoint id>/<event id>``: the same event sent to two
endpoints has two entries, and dead-lettering an event again replaces its entry.

When Redis itself is the failure, an entry is appended to a local spool file and moved into
Redis by the next successful write (or ``hookline dlq restore-spool``): never dropped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from app import store
from app.config import settings

log = logging.getLogger("hookline.deadletter")

DLQ_KEY = "hookline:dlq"
DLQ_INDEX_KEY = "hookline:dlq:by_time"

#: Why an event was dead-lettered.
REASONS = {
    "exhausted": "retries used up (attempts or age)",
    "rejected": "the receiver answered a 3xx or 4xx that is not worth retrying",
    "endpoint_gone": "the receiver answered 410 Gone; the endpoint was disabled",
    "endpoint_disabled": "the endpoint is disabled",
    "endpoint_removed": "the endpoint does not exist (removed, or never added)",
    "expired": "past the event's deadline",
    "refused": "the target URL cannot be requested",
    "malformed": "the task message is not a valid event",
    "worker_lost": "workers died while sending it, again and again",
    "retry_failed": "the retry could not be scheduled",
    "backlog_full": "the retry schedule is at its cap (in all or for the endpoint)",
    "error": "an unexpected error in Hookline",
}

_spool_lock = threading.Lock()


@dataclass
class DeadLetter:
    """One undeliverable event with everything needed to understand and replay it."""

    endpoint_id: str
    event_id: str
    event_type: str
    payload: Any
    reason: str
    attempts: int = 0
    first_attempt_at: float | None = None
    last_attempt_at: float | None = None
    last_status: int | None = None
    last_error: str = ""
    dead_lettered_at: float = field(default_factory=time.time)
    detail: str = ""

    @property
    def id(self) -> str:
        return f"{self.endpoint_id}/{self.event_id}"

    def to_json(self) -> str:
        return json.dumps({"id": self.id, **asdict(self)}, default=str)

    @classmethod
    def from_json(cls, text: str) -> DeadLetter:
        data = json.loads(text)
        data.pop("id", None)
        return cls(**data)


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which entries an operation applies to; every field is optional."""

    endpoint_id: str | None = None
    reason: str | None = None
    since: float | None = None
    until: float | None = None
    ids: tuple[str, ...] = ()

    def matches(self, entry: DeadLetter) -> bool:
        return (
            (self.endpoint_id is None or entry.endpoint_id == self.endpoint_id)
            and (self.reason is None or entry.reason == self.reason)
            and (not self.ids or entry.id in self.ids or entry.event_id in self.ids)
        )


class DeadLetterQueue:
    """Store, list, replay and purge dead letters."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def add(self, entry: DeadLetter) -> None:
        """Store ``entry``; if Redis is unreachable, spool it to disk instead of losing it."""
        if entry.reason not in REASONS:
            raise ValueError(f"unknown dead-letter reason {entry.reason!r}")
        try:
            self._write([entry])
        except redis.RedisError as exc:
            spool(entry, cause=exc)
            return
        restore_spool(self)

    def _write(self, entries: Iterable[DeadLetter]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        for entry in entries:
            pipe.hset(DLQ_KEY, entry.id, entry.to_json())
            pipe.zadd(DLQ_INDEX_KEY, {entry.id: entry.dead_lettered_at})
        pipe.execute()

    def get(self, entry_id: str) -> DeadLetter | None:
        text = self.redis.hget(DLQ_KEY, entry_id)
        return DeadLetter.from_json(text) if text else None

    def find(self, selection: DeadLetterFilter = DeadLetterFilter(), *, limit: int | None = None
             ) -> list[DeadLetter]:
        """Matching entries, oldest first."""
        found: list[DeadLetter] = []
        for entry in self._scan(selection):
            found.append(entry)
            if limit is not None and len(found) >= limit:
                break
        return found

    def _scan(self, selection: DeadLetterFilter, batch: int = 500) -> Iterator[DeadLetter]:
        low = "-inf" if selection.since is None else selection.since
        high = "+inf" if selection.until is None else selection.until
        offset = 0
        while True:
            ids = self.redis.zrangebyscore(DLQ_INDEX_KEY, low, high, start=offset, num=batch)
            if not ids:
                return
            offset += len(ids)
            for text in self.redis.hmget(DLQ_KEY, ids):
                if text:
                    entry = DeadLetter.from_json(text)
                    if selection.matches(entry):
                        yield entry

    def count(self) -> int:
        return int(self.redis.zcard(DLQ_INDEX_KEY))

    def counts_by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for entry in self._scan(DeadLetterFilter()):
            counts[entry.reason] = counts.get(entry.reason, 0) + 1
        return counts

    def remove(self, entry_ids: Iterable[str]) -> int:
        ids = list(entry_ids)
        if not ids:
            return 0
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(DLQ_KEY, *ids)
        pipe.zrem(DLQ_INDEX_KEY, *ids)
        removed, _ = pipe.execute()
        return int(removed)

    def replay(self, selection: DeadLetterFilter, *, dry_run: bool = False) -> list[DeadLetter]:
        """Enqueue matching entries again with their event ids, then remove them.

        Enqueue comes first: a crash between the two leaves the entry in the queue *and* the
        event enqueued, and the idempotency gate stops a second send; nothing is lost.
        """
        from tasks.webhooks import deliver  # the task module imports this one

        entries = self.find(selection)
        if dry_run:
            return entries
        for entry in entries:
            deliver.apply_async(
                args=(entry.endpoint_id, entry.event_type, entry.payload),
                kwargs={"event_id": entry.event_id},
            )
            self.remove([entry.id])
        return entries

    def purge(self, selection: DeadLetterFilter, *, dry_run: bool = False) -> list[DeadLetter]:
        entries = self.find(selection)
        if not dry_run:
            self.remove(entry.id for entry in entries)
        return entries


def spool(entry: DeadLetter, *, cause: BaseException) -> None:
    """Append ``entry`` to the local spool file: the DLQ's fallback when Redis is down."""
    path = settings().dlq_spool_path
    with _spool_lock, open(path, "a", encoding="utf-8") as handle:
        handle.write(entry.to_json() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    log.error(
        "delivery.dead_letter_spooled endpoint_id=%s event_id=%s reason=%s cause=%s path=%s",
        entry.endpoint_id, entry.event_id, entry.reason, type(cause).__name__, path,
    )


def restore_spool(queue: DeadLetterQueue, path: str | None = None) -> int:
    """Move spooled entries into Redis; returns how many. A no-op when there is no spool."""
    path = path or settings().dlq_spool_path
    if not os.path.exists(path):
        return 0
    with _spool_lock:
        if not os.path.exists(path):
            return 0
        with open(path, encoding="utf-8") as handle:
            entries = [DeadLetter.from_json(line) for line in handle if line.strip()]
        queue._write(entries)
        os.unlink(path)
    log.warning("delivery.dead_letter_spool_restored count=%d", len(entries))
    return len(entries)
