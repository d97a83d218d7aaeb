"""The dead-letter queue: every event that will not be delivered, with why, for operators to
inspect and replay.

``hookline:{dlq}:entries`` is a hash of entry id -> JSON; ``hookline:{dlq}:by_time`` orders the
ids by when they were dead-lettered; ``by_reason:<reason>``, ``by_endpoint:<endpoint>``,
``by_endpoint_reason:<reason>:<endpoint>`` and ``by_status:<status>`` do the same per reason,
per endpoint, per both and per last HTTP status (``hookline.store.dead_letter_index``), so a
filtered page or count reads no entry it does not show. An entry id is ``<endpoint id>/<event
id>``: the same event sent to two endpoints has two entries, and dead-lettering an event again
replaces its entry. A ``conflict`` (another content sent under a used event id) is kept apart,
as ``<endpoint id>/<event id>#conflict``, never replacing the entry of the event owning the id.

Entries older than ``HOOKLINE_DLQ_RETENTION`` are trimmed: by ``hookline dlq trim`` and, at most
once a minute per process, when an entry is added. Never by size: a full dead-letter queue is an
incident to see, not data to drop.

With ``HOOKLINE_STATE_SHARDS`` above 1 (a Redis Cluster) the entries and indexes are kept per shard
(``keys.dead_letter_shards``: ``hookline:{dlq:<n>}:...``), an entry in its endpoint's shard;
each write and removal is a transaction on one shard, and listing merges the shards in time
order.

When Redis itself is the failure, an entry is appended to a local spool file and moved into
Redis by the next successful write (or ``hookline dlq restore-spool``): never dropped.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.store import connection as store
from hookline.store.dead_letter_index import (
    queue_removal,
    remove_entries,
    watched_statuses,
    write_entries,
)
from hookline.store.keys import (  # noqa: F401 (the one-shard names, re-exported)
    DLQ_INDEX_KEY,
    DLQ_KEY,
    DLQ_REASON_KEY,
    DeadLetterKeys,
    dead_letter_shards,
    entry_shard,
)
from hookline.store.replication import wait_for_replicas

log = logging.getLogger("hookline.deadletter")

#: Why an event was dead-lettered.
REASONS = {
    "exhausted": "retries used up (attempts or age)",
    "rejected": "the receiver answered a 3xx or 4xx that is not worth retrying",
    "endpoint_gone": "the receiver answered 410 Gone; the endpoint was disabled",
    "endpoint_disabled": "the endpoint is disabled",
    "endpoint_removed": "the endpoint does not exist (removed, or never added)",
    "expired": "past the event's deadline (or a Celery expires)",
    "refused": "the target URL cannot be requested",
    "malformed": "the task message is not a valid event",
    "worker_lost": "workers died while sending it, again and again",
    "retry_failed": "the retry could not be scheduled",
    "backlog_full": "the retry schedule is at its cap (in all or for the endpoint)",
    "error": "an unexpected error in Hookline",
    "revoked": "its task was revoked (Flower, celery control revoke)",
    "conflict": "the event id was used before with another event type or payload",
    "unpublishable": "the outbox's relay could not publish it: its application is unknown, "
                     "or the event catalog or a schema refused it",
}

#: Suffix of the entry id of a ``conflict`` dead letter.
CONFLICT_SUFFIX = "#conflict"

#: Entries removed per transaction when trimming.
TRIM_BATCH = 500
#: Seconds between two automatic trims in one process.
TRIM_INTERVAL = 60.0
#: Most entries one automatic trim removes; the rest go a minute later.
AUTO_TRIM_LIMIT = 10_000
#: Times a removal is tried again when another client wrote to the queue meanwhile.
REMOVE_ATTEMPTS = 20

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
    #: When the event was published (Unix seconds): a replay carries it, so the replayed body
    #: (its ``timestamp``) is the one first sent. None in entries older than this field.
    enqueued_at: float | None = None
    #: An ordered endpoint's: the ordering key given at publish (None: the endpoint's own) and
    #: the event's place in its key's line, which a replay keeps.
    ordering_key: str | None = None
    sequence: int | None = None
    #: The last answer's first bytes, redacted (``response_excerpt``; "": none, or older).
    last_response: str = ""
    #: The first attempt's span (``traceparent`` form; None without traces): a replay links it.
    first_attempt_span: str | None = None

    @property
    def id(self) -> str:
        suffix = CONFLICT_SUFFIX if self.reason == "conflict" else ""
        return f"{self.endpoint_id}/{self.event_id}{suffix}"

    def to_json(self) -> str:
        return json.dumps({"id": self.id, **asdict(self)}, default=str)

    @classmethod
    def from_json(cls, text: str) -> DeadLetter:
        # Fields a later version added are left out: it may write entries this one reads.
        fields = cls.__dataclass_fields__
        return cls(**{name: value for name, value in json.loads(text).items() if name in fields})


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which entries an operation applies to; every field is optional, bounds inclusive."""

    endpoint_id: str | None = None
    reason: str | None = None
    since: float | None = None
    until: float | None = None
    ids: tuple[str, ...] = ()
    min_attempts: int | None = None
    max_attempts: int | None = None
    #: The entry's last HTTP status (``0``: entries whose last attempt had no response).
    last_status: int | None = None

    def matches(self, entry: DeadLetter) -> bool:
        return (
            (self.endpoint_id is None or entry.endpoint_id == self.endpoint_id)
            and (self.reason is None or entry.reason == self.reason)
            and (self.last_status is None or (entry.last_status or 0) == self.last_status)
            and (not self.ids or entry.id in self.ids or entry.event_id in self.ids)
            and (self.min_attempts is None or entry.attempts >= self.min_attempts)
            and (self.max_attempts is None or entry.attempts <= self.max_attempts)
        )


@dataclass(frozen=True)
class DeadLetterStats:
    total: int
    by_reason: dict[str, int]
    #: Unix seconds the oldest entry was dead-lettered, or None.
    oldest: float | None


def response_excerpt(text: str) -> str:
    """The first ``HOOKLINE_HISTORY_BODY_BYTES`` of an answer, as the attempt history keeps."""
    return text.encode("utf-8")[:settings().history_body_bytes].decode("utf-8", "ignore")


class _OncePer:
    """``due()`` is true at most once per ``seconds`` in this process (thread-safe)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = 0.0
        self._lock = threading.Lock()

    def due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                return False
            self._next = now + self.seconds
            return True

    def reset(self) -> None:
        with self._lock:
            self._next = 0.0


_auto_trim = _OncePer(TRIM_INTERVAL)


class DeadLetterQueue:
    """Store, list, count, replay, purge and trim dead letters.

    ``shards`` (default ``HOOKLINE_STATE_SHARDS``): how many sets of keys the entries are split
    over."""

    def __init__(self, redis_client: Any = None, *, shards: int | None = None) -> None:
        self.redis: Any = redis_client or store.client()
        self.shards: tuple[DeadLetterKeys, ...] = dead_letter_shards(
            shards or settings().state_shards)

    def shard_of(self, entry_id: str) -> DeadLetterKeys:
        """The keys of the shard holding entry ``entry_id`` (its endpoint's shard)."""
        return self.shards[entry_shard(entry_id, len(self.shards))]

    def _by_shard(self, entry_ids: Iterable[str]) -> dict[DeadLetterKeys, list[str]]:
        grouped: dict[DeadLetterKeys, list[str]] = {}
        for entry_id in entry_ids:
            grouped.setdefault(self.shard_of(entry_id), []).append(entry_id)
        return grouped

    def add(self, entry: DeadLetter) -> None:
        """Store ``entry``; if Redis is unreachable, spool it to disk instead of losing it."""
        if entry.reason not in REASONS:
            raise ValueError(f"unknown dead-letter reason {entry.reason!r}")
        entry.last_response = response_excerpt(entry.last_response)
        try:
            self._write([entry])
            wait_for_replicas(self.redis)  # see hookline/store/replication.py
        except redis.RedisError as exc:
            spool(entry, cause=exc)
            return
        restore_spool(self)
        if _auto_trim.due():
            self._trim_expired()

    def _write(self, entries: Iterable[DeadLetter]) -> None:
        grouped: dict[DeadLetterKeys, list[DeadLetter]] = {}
        for entry in entries:
            grouped.setdefault(self.shard_of(entry.id), []).append(entry)
        for shard, shard_entries in grouped.items():
            write_entries(self.redis, shard, shard_entries, REASONS)

    def get(self, entry_id: str) -> DeadLetter | None:
        text = self.redis.hget(self.shard_of(entry_id).entries, entry_id)
        return DeadLetter.from_json(text) if text else None

    def get_many(self, entry_ids: Iterable[str]) -> dict[str, DeadLetter]:
        """The entries of ``entry_ids`` that exist, by id (one HMGET per shard)."""
        found = {}
        for shard, ids in self._by_shard(entry_ids).items():
            for entry_id, text in zip(ids, self.redis.hmget(shard.entries, ids), strict=True):
                if text:
                    found[entry_id] = DeadLetter.from_json(text)
        return found

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
        """Matching entries, oldest first: the shards' time indexes merged (only the
        endpoint's shard when the selection names one)."""
        shards = (self.shards if selection.endpoint_id is None
                  else (self.shard_of(f"{selection.endpoint_id}/"),))
        return heapq.merge(*(self._scan_shard(shard, selection, batch) for shard in shards),
                           key=lambda entry: (entry.dead_lettered_at, entry.id))

    def _scan_shard(self, shard: DeadLetterKeys, selection: DeadLetterFilter,
                    batch: int) -> Iterator[DeadLetter]:
        low = "-inf" if selection.since is None else selection.since
        high = "+inf" if selection.until is None else selection.until
        offset = 0
        while True:
            ids = self.redis.zrangebyscore(shard.by_time, low, high, start=offset, num=batch)
            if not ids:
                return
            offset += len(ids)
            entries = [DeadLetter.from_json(text)
                       for text in self.redis.hmget(shard.entries, ids) if text]
            # In index order; an entry replaced since the index was read sorts by its new time.
            yield from sorted((entry for entry in entries if selection.matches(entry)),
                              key=lambda entry: (entry.dead_lettered_at, entry.id))

    def count(self) -> int:
        return sum(int(self.redis.zcard(shard.by_time)) for shard in self.shards)

    def stats(self) -> DeadLetterStats:
        """Total, count per reason and the oldest entry's time, without reading any entry."""
        total, oldest = 0, None
        by_reason: dict[str, int] = {}
        for shard in self.shards:
            shard_total, head, counts = self._shard_stats(shard)
            total += shard_total
            for reason, n in counts.items():
                by_reason[reason] = by_reason.get(reason, 0) + n
            if head and (oldest is None or float(head[0][1]) < oldest):
                oldest = float(head[0][1])
        return DeadLetterStats(total=total, by_reason=by_reason, oldest=oldest)

    def _shard_stats(self, shard: DeadLetterKeys) -> tuple[int, Any, dict[str, int]]:
        pipe = self.redis.pipeline(transaction=True)  # one consistent view of the indexes
        pipe.zcard(shard.by_time)
        pipe.zrange(shard.by_time, 0, 0, withscores=True)
        for reason in REASONS:
            pipe.zcard(shard.by_reason(reason))
        total, head, *counts = pipe.execute()
        by_reason = {reason: int(n) for reason, n in zip(REASONS, counts, strict=True) if n}
        if sum(by_reason.values()) != total:  # entries written before the reason index
            by_reason = self._index_reasons(shard)
        return int(total), head, by_reason

    def counts_by_reason(self) -> dict[str, int]:
        return self.stats().by_reason

    def _index_reasons(self, shard: DeadLetterKeys) -> dict[str, int]:
        """Rebuild a shard's per-reason indexes from its entries (once, after an upgrade from
        a version without them); returns the counts found."""
        counts: dict[str, int] = {}
        self.redis.delete(*(shard.by_reason(reason) for reason in REASONS))
        pipe = self.redis.pipeline(transaction=False)
        for n, entry in enumerate(self._scan_shard(shard, DeadLetterFilter(), TRIM_BATCH),
                                  start=1):
            counts[entry.reason] = counts.get(entry.reason, 0) + 1
            pipe.zadd(shard.by_reason(entry.reason), {entry.id: entry.dead_lettered_at})
            if n % TRIM_BATCH == 0:
                pipe.execute()
        pipe.execute()
        return counts

    def remove(self, entry_ids: Iterable[str]) -> int:
        """Remove entries whatever they hold now (one transaction per shard)."""
        return sum(remove_entries(self.redis, shard, ids, REASONS)
                   for shard, ids in self._by_shard(entry_ids).items())

    def remove_unchanged(self, dead_lettered_at: Mapping[str, float]) -> int:
        """Remove each entry id whose entry is still the one dead-lettered at the given time.

        An event dead-lettered again since it was read (a replay that failed at once, say) has
        a new entry: that one stays. Returns how many were removed.
        """
        return sum(self._remove_unchanged(shard, ids, dead_lettered_at)
                   for shard, ids in self._by_shard(dead_lettered_at).items())

    def _remove_unchanged(self, shard: DeadLetterKeys, ids: list[str],
                          dead_lettered_at: Mapping[str, float]) -> int:
        for _ in range(REMOVE_ATTEMPTS if ids else 0):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(shard.by_time)
                    scores = pipe.zmscore(shard.by_time, ids)
                    same = [entry_id for entry_id, score in zip(ids, scores, strict=True)
                            if score is not None and score == dead_lettered_at[entry_id]]
                    if not same:
                        return 0
                    statuses = watched_statuses(pipe, shard)
                    pipe.multi()
                    queue_removal(pipe, shard, same, REASONS, statuses)
                    pipe.execute()
                    return len(same)
                except redis.WatchError:  # the queue changed between the read and the write
                    continue
        if ids:
            log_event("deadletter.remove_contended", level=logging.WARNING, count=len(ids))
        return 0

    def purge(self, selection: DeadLetterFilter, *, dry_run: bool = False) -> list[DeadLetter]:
        entries = self.find(selection)
        if not dry_run:
            self.remove(entry.id for entry in entries)
        return entries

    def count_before(self, before: float) -> int:
        """Entries dead-lettered before ``before`` (Unix seconds)."""
        return sum(int(self.redis.zcount(shard.by_time, "-inf", f"({before!r}"))
                   for shard in self.shards)

    def trim(self, before: float, *, limit: int | None = None) -> int:
        """Remove entries dead-lettered before ``before`` (Unix seconds), at most ``limit``;
        returns how many."""
        removed = 0
        for shard in self.shards:
            removed += self._trim_shard(shard, before,
                                        None if limit is None else limit - removed)
            if limit is not None and removed >= limit:
                break
        if removed:
            log_event("deadletter.trimmed", level=logging.INFO, count=removed, before=before)
        return removed

    def _trim_shard(self, shard: DeadLetterKeys, before: float, limit: int | None) -> int:
        removed = 0
        while limit is None or removed < limit:
            batch = TRIM_BATCH if limit is None else min(TRIM_BATCH, limit - removed)
            found = self.redis.zrangebyscore(shard.by_time, "-inf", f"({before!r}", start=0,
                                             num=batch, withscores=True)
            done = self._remove_unchanged(shard, [entry_id for entry_id, _ in found],
                                          dict(found)) if found else 0
            removed += done
            if done == 0 or len(found) < batch:
                break
        return removed

    def _trim_expired(self) -> None:
        """The automatic trim: entries past ``HOOKLINE_DLQ_RETENTION``, a bounded number."""
        retention = settings().dlq_retention
        if retention <= 0:
            return
        try:
            self.trim(time.time() - retention, limit=AUTO_TRIM_LIMIT)
        except redis.RedisError as exc:  # the entry is stored; trimming waits for next time
            log_event("deadletter.trim_failed", level=logging.WARNING,
                      error=type(exc).__name__)


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
