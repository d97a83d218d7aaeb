"""The dead-letter queue's indexes: by time, by reason, by endpoint, by endpoint and reason, by
last HTTP status.

Each is a sorted set of entry ids scored by when they were dead-lettered, per shard
(``keys.DeadLetterKeys``), written and removed in the same transaction as the entry itself
(:func:`write_entries`, :func:`remove_entries`). A filtered page therefore reads one index
from a position (:func:`page_of`: O(log N + page) per index) and a dry-run count is a ZCOUNT
per index (:func:`count_of`): no entry is read for a filter on endpoint, reason and time.
A status with an endpoint or a reason has no index of its own: the smaller of the two is read
and each position read is kept if the other index holds it (``deadletter_pages``: one ZMSCORE
per shard and step, still no entry read).

The status indexes are one per status seen (``status_label``: the code, 100-599; ``0`` without
a response; ``other``), named in the shard's ``statuses`` set. A transaction that indexes or
removes an entry removes it from every index that set names, read under WATCH
(:func:`in_transaction`): a status first seen meanwhile makes it start again, so an entry is
never left in the index of a status it no longer has.

Entries written by a version without the per-endpoint or per-status indexes are indexed once,
by :func:`reindex_shard` (``hookline dlq reindex``, or the first read that needs the indexes of
a shard whose ``endpoint_indexed`` or ``status_indexed`` marker is missing).

A position (:class:`Position`) is an entry's score and id: the sorted sets order equal scores
by id, so ``(score, id)`` is the index order and a page resumes after it exactly, even when the
entry it names was removed since.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.store.event_log import EventLog
from hookline.store.keys import DeadLetterKeys, endpoint_shard

#: Entries read from the entries hash per step of a reindex.
REINDEX_BATCH = 500
#: Extra ids read past a page's size, so that ties at the position's score rarely cost a
#: second read.
SLACK = 8
#: Times a reindex step is tried again when the queue changed under it.
REINDEX_ATTEMPTS = 20
#: Times a write is tried when statuses are first seen under it (it fails after).
WRITE_ATTEMPTS = 20
#: The HTTP status codes with an index each; ``NO_STATUS`` and ``OTHER_STATUS`` hold the rest.
HTTP_STATUSES = range(100, 600)
#: The status label of entries whose last attempt had no response.
NO_STATUS = "0"
#: The status label of entries with a code outside ``HTTP_STATUSES`` (no filter selects them).
OTHER_STATUS = "other"


@dataclass(frozen=True, order=True)
class Position:
    """Where a page ended: the last entry's score (dead-lettered at) and id."""

    at: float
    entry_id: str


class IndexedEntry(Protocol):
    """What the indexes read of a dead letter (``dead_letter_queue.DeadLetter``)."""

    @property
    def id(self) -> str: ...

    reason: str
    dead_lettered_at: float
    last_status: int | None

    def to_json(self) -> str: ...


def endpoint_of(entry_id: str) -> str:
    """The endpoint id an entry id (``<endpoint id>/<event id>``) starts with."""
    return entry_id.split("/", 1)[0]


def status_label(status: int | None) -> str:
    """The status index holding an entry whose last HTTP status is ``status``."""
    if not status:
        return NO_STATUS
    return str(status) if status in HTTP_STATUSES else OTHER_STATUS


def indexed_status(status: int | None) -> str | None:
    """The status index holding exactly the entries a filter on ``status`` selects (None: no
    status filter, or a code no index holds alone: the entries decide)."""
    if status is None:
        return None
    label = status_label(status)
    return None if label == OTHER_STATUS else label


def watched_statuses(pipe: Any, shard: DeadLetterKeys) -> set[str]:
    """WATCH the shard's set of status labels and read it (``pipe`` before its MULTI): the
    status indexes that may hold any of its entries until the transaction runs."""
    pipe.watch(shard.statuses)
    return {_text(label) for label in pipe.smembers(shard.statuses)}


def in_transaction(client: Any, shard: DeadLetterKeys,
                   queue: Callable[[Any, set[str]], None]) -> list[Any]:
    """Run the commands ``queue(pipe, statuses)`` queues as one transaction on ``shard``
    (:func:`watched_statuses`); returns their replies. Tried again while statuses are first
    seen under it (a WatchError after ``WRITE_ATTEMPTS``)."""
    attempts = 0
    while True:
        with client.pipeline(transaction=True) as pipe:
            try:
                statuses = watched_statuses(pipe, shard)
                pipe.multi()
                queue(pipe, statuses)
                return list(pipe.execute())
            except redis.WatchError:
                attempts += 1
                if attempts >= WRITE_ATTEMPTS:
                    raise


def write_entries(client: Any, shard: DeadLetterKeys, entries: Sequence[IndexedEntry],
                  reasons: Collection[str]) -> None:
    """Store ``entries`` (all of ``shard``) and index them, in one transaction."""
    def queue(pipe: Any, statuses: set[str]) -> None:
        latest = {entry.id: entry for entry in entries}  # an id given twice: the last one
        if not latest:
            return
        pipe.hset(shard.entries, mapping={entry_id: entry.to_json()
                                          for entry_id, entry in latest.items()})
        queue_index_writes(pipe, shard, list(latest.values()), reasons, statuses)
        if not cluster:
            log.record_dead(list(latest.values()), pipe=pipe)  # the event log: dead

    log = EventLog(client)
    cluster = settings().state_is_cluster
    in_transaction(client, shard, queue)
    if cluster:
        log.record_dead(entries)


def remove_entries(client: Any, shard: DeadLetterKeys, ids: Sequence[str],
                   reasons: Collection[str]) -> int:
    """Remove entries ``ids`` of ``shard`` and their index places, in one transaction;
    returns how many entries there were."""
    def queue(pipe: Any, statuses: set[str]) -> None:
        queue_removal(pipe, shard, ids, reasons, statuses)

    return int(in_transaction(client, shard, queue)[0])


def queue_indexing(pipe: Any, shard: DeadLetterKeys, entry: IndexedEntry,
                   reasons: Collection[str], statuses: set[str]) -> None:
    """Queue on ``pipe`` (a transaction) the index writes of one entry
    (:func:`queue_index_writes`)."""
    queue_index_writes(pipe, shard, [entry], reasons, statuses)


def queue_index_writes(pipe: Any, shard: DeadLetterKeys, entries: Sequence[IndexedEntry],
                       reasons: Collection[str], statuses: set[str]) -> None:
    """Queue on ``pipe`` (a transaction) the index writes of ``entries`` (distinct ids): an
    entry replaced with another reason or status leaves the other reasons' and ``statuses``'
    indexes. One ZREM and one ZADD per index touched, however many entries (a batch moved to
    the queue at once, a restored spool); the labels first seen are added to ``statuses``."""
    removed: dict[str, list[str]] = {}
    added: dict[str, dict[str, float]] = {}
    labels: set[str] = set()
    for entry in entries:
        entry_id, reason, at = entry.id, entry.reason, entry.dead_lettered_at
        endpoint_id = endpoint_of(entry_id)
        label = status_label(entry.last_status)
        labels.add(label)
        gone = [key for other in reasons if other != reason for key in (
            shard.by_reason(other), shard.by_endpoint_reason(endpoint_id, other))]
        gone += [shard.by_status(other) for other in statuses - {label}]
        for key in gone:
            removed.setdefault(key, []).append(entry_id)
        for key in (shard.by_time, shard.by_reason(reason), shard.by_endpoint(endpoint_id),
                    shard.by_endpoint_reason(endpoint_id, reason), shard.by_status(label)):
            added.setdefault(key, {})[entry_id] = at
    for key, ids in removed.items():
        pipe.zrem(key, *ids)
    for key, scores in added.items():
        pipe.zadd(key, scores)
    if labels - statuses:
        pipe.sadd(shard.statuses, *(labels - statuses))
        statuses |= labels


def queue_removal(pipe: Any, shard: DeadLetterKeys, ids: Sequence[str],
                  reasons: Collection[str], statuses: Collection[str]) -> None:
    """Queue on ``pipe`` (a transaction whose ``statuses`` were read watched) the removal of
    entries ``ids`` and of their places in every index of their shard; its first reply is how
    many entries there were."""
    pipe.hdel(shard.entries, *ids)
    pipe.zrem(shard.by_time, *ids)
    for reason in reasons:
        pipe.zrem(shard.by_reason(reason), *ids)
    for label in statuses:
        pipe.zrem(shard.by_status(label), *ids)
    by_endpoint: dict[str, list[str]] = {}
    for entry_id in ids:
        by_endpoint.setdefault(endpoint_of(entry_id), []).append(entry_id)
    for endpoint_id, endpoint_ids in by_endpoint.items():
        pipe.zrem(shard.by_endpoint(endpoint_id), *endpoint_ids)
        for reason in reasons:
            pipe.zrem(shard.by_endpoint_reason(endpoint_id, reason), *endpoint_ids)


def index_keys(shards: Sequence[DeadLetterKeys], *, endpoint_ids: Iterable[str] | None = None,
               reason: str | None = None) -> list[str]:
    """The indexes that together hold exactly the entries of the given endpoints (``None``:
    every endpoint) and reason (``None``: every reason)."""
    if endpoint_ids is None:
        return [shard.by_reason(reason) if reason else shard.by_time for shard in shards]
    found = []
    for endpoint_id in endpoint_ids:
        shard = shards[endpoint_shard(endpoint_id, len(shards))]
        found.append(shard.by_endpoint_reason(endpoint_id, reason) if reason
                     else shard.by_endpoint(endpoint_id))
    return found


def _bound(value: float | None, default: str) -> Any:
    return default if value is None else value


def _range(client: Any, key: str, low: Any, high: Any, offset: int, count: int,
           reverse: bool) -> list[tuple[str, float]]:
    if reverse:
        rows = client.zrevrangebyscore(key, high, low, start=offset, num=count, withscores=True)
    else:
        rows = client.zrangebyscore(key, low, high, start=offset, num=count, withscores=True)
    return [(_text(member), float(score)) for member, score in rows]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def ranged(client: Any, key: str, *, since: float | None, until: float | None,
           after: Position | None, limit: int, reverse: bool = False) -> list[Position]:
    """Up to ``limit`` positions of index ``key`` within [since, until], in index order
    (newest first when ``reverse``), strictly after ``after``."""
    low, high = _bound(since, "-inf"), _bound(until, "+inf")
    if after is not None:
        if reverse:
            high = after.at if until is None else min(after.at, until)
        else:
            low = after.at if since is None else max(after.at, since)
    found: list[Position] = []
    offset = 0
    while len(found) < limit:
        count = limit - len(found) + SLACK
        rows = _range(client, key, low, high, offset, count, reverse)
        offset += len(rows)
        for entry_id, at in rows:
            position = Position(at, entry_id)
            if after is None or (position < after if reverse else position > after):
                found.append(position)
        if len(rows) < count:
            break
    return found[:limit]


def page_of(client: Any, index: Sequence[str], *, since: float | None = None,
            until: float | None = None, after: Position | None = None, limit: int,
            reverse: bool = False) -> list[Position]:
    """The first ``limit`` positions after ``after`` across several indexes, merged in index
    order: each index is read for at most ``limit``, so a page costs O(indexes x page)."""
    parts = [ranged(client, key, since=since, until=until, after=after, limit=limit,
                    reverse=reverse) for key in index]
    merged = heapq.merge(*parts, reverse=reverse)
    return [position for _, position in zip(range(limit), merged, strict=False)]


def count_of(client: Any, index: Sequence[str], *, since: float | None = None,
             until: float | None = None) -> int:
    """How many entries the indexes hold within [since, until]: one ZCOUNT each, no entry
    read."""
    pipe = client.pipeline(transaction=False)
    for key in index:
        pipe.zcount(key, _bound(since, "-inf"), _bound(until, "+inf"))
    return sum(int(n) for n in pipe.execute())


def ensure_endpoint_index(client: Any, shards: Iterable[DeadLetterKeys]) -> None:
    """Build the per-endpoint indexes of each shard that lacks its ``endpoint_indexed``
    marker (once, after an upgrade from a version without them)."""
    for shard in shards:
        if not client.exists(shard.endpoint_indexed):
            reindex_shard(client, shard)


def ensure_status_index(client: Any, shards: Iterable[DeadLetterKeys]) -> None:
    """Build the per-status indexes of each shard that lacks its ``status_indexed`` marker
    (once, after an upgrade from a version without them)."""
    for shard in shards:
        if not client.exists(shard.status_indexed):
            reindex_shard(client, shard)


def reindex_shard(client: Any, shard: DeadLetterKeys) -> int:
    """Add every entry of ``shard`` to its per-endpoint and per-status indexes (entries
    already there stay), then set the shard's markers; returns how many entries were read.
    Safe beside writers: a step adds only entries whose time index still holds them at that
    score."""
    seen = 0
    batch: dict[str, tuple[str, float, str]] = {}
    for entry_id, text in client.hscan_iter(shard.entries, count=REINDEX_BATCH):
        data = json.loads(text)
        batch[_text(entry_id)] = (str(data["reason"]), float(data["dead_lettered_at"]),
                                  status_label(data.get("last_status")))
        if len(batch) >= REINDEX_BATCH:
            seen += _index_batch(client, shard, batch)
            batch = {}
    seen += _index_batch(client, shard, batch)
    client.set(shard.endpoint_indexed, "1")
    client.set(shard.status_indexed, "1")
    log_event("deadletter.reindexed", level=logging.INFO, shard=shard.tag, entries=seen)
    return seen


def _index_batch(client: Any, shard: DeadLetterKeys,
                 batch: dict[str, tuple[str, float, str]]) -> int:
    ids = list(batch)
    for _ in range(REINDEX_ATTEMPTS if ids else 0):
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(shard.by_time)
                scores = pipe.zmscore(shard.by_time, ids)
                pipe.multi()
                for entry_id, score in zip(ids, scores, strict=True):
                    reason, at, label = batch[entry_id]
                    if score is not None and float(score) == at:
                        endpoint_id = endpoint_of(entry_id)
                        pipe.zadd(shard.by_endpoint(endpoint_id), {entry_id: at})
                        pipe.zadd(shard.by_endpoint_reason(endpoint_id, reason), {entry_id: at})
                        pipe.zadd(shard.by_status(label), {entry_id: at})
                        pipe.sadd(shard.statuses, label)
                pipe.execute()
                return len(ids)
            except redis.WatchError:  # written meanwhile: read the scores again
                continue
    return len(ids)
