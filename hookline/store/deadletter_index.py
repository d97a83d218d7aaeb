"""The dead-letter queue's indexes: by time, by reason, by endpoint, by endpoint and reason.

Each is a sorted set of entry ids scored by when they were dead-lettered, per shard
(``keys.DeadLetterKeys``), written and removed in the same transaction as the entry itself
(:func:`queue_indexing`, :func:`queue_unindexing`). A filtered page therefore reads one index
from a position (:func:`page_of`: O(log N + page) per index) and a dry-run count is a ZCOUNT
per index (:func:`count_of`): no entry is read for a filter on endpoint, reason and time.

Entries written by a version without the per-endpoint indexes are indexed once, by
:func:`reindex_endpoints` (``hookline dlq reindex``, or the first read that needs the indexes
of a shard whose ``endpoint_indexed`` marker is missing).

A position (:class:`Position`) is an entry's score and id: the sorted sets order equal scores
by id, so ``(score, id)`` is the index order and a page resumes after it exactly, even when the
entry it names was removed since.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from hookline.core.logs import log_event
from hookline.store.keys import DeadLetterKeys, endpoint_shard

#: Entries read from the entries hash per step of a reindex.
REINDEX_BATCH = 500
#: Extra ids read past a page's size, so that ties at the position's score rarely cost a
#: second read.
SLACK = 8
#: Times a reindex step is tried again when the queue changed under it.
REINDEX_ATTEMPTS = 20


@dataclass(frozen=True, order=True)
class Position:
    """Where a page ended: the last entry's score (dead-lettered at) and id."""

    at: float
    entry_id: str


def endpoint_of(entry_id: str) -> str:
    """The endpoint id an entry id (``<endpoint id>/<event id>``) starts with."""
    return entry_id.split("/", 1)[0]


def queue_indexing(pipe: Any, shard: DeadLetterKeys, entry_id: str, reason: str, at: float,
                   reasons: Collection[str]) -> None:
    """Queue on ``pipe`` (a transaction) the index writes of one entry; an entry replaced
    with another reason leaves the other reasons' indexes."""
    endpoint_id = endpoint_of(entry_id)
    pipe.zadd(shard.by_time, {entry_id: at})
    for other in reasons:
        if other != reason:
            pipe.zrem(shard.by_reason(other), entry_id)
            pipe.zrem(shard.by_endpoint_reason(endpoint_id, other), entry_id)
    pipe.zadd(shard.by_reason(reason), {entry_id: at})
    pipe.zadd(shard.by_endpoint(endpoint_id), {entry_id: at})
    pipe.zadd(shard.by_endpoint_reason(endpoint_id, reason), {entry_id: at})


def queue_unindexing(pipe: Any, shard: DeadLetterKeys, ids: Sequence[str],
                     reasons: Collection[str]) -> None:
    """Queue on ``pipe`` the removal of ``ids`` from every index of their shard."""
    pipe.zrem(shard.by_time, *ids)
    for reason in reasons:
        pipe.zrem(shard.by_reason(reason), *ids)
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
            reindex_endpoints(client, shard)


def reindex_endpoints(client: Any, shard: DeadLetterKeys) -> int:
    """Add every entry of ``shard`` to its per-endpoint indexes (entries already there stay),
    then set the shard's marker; returns how many entries were read. Safe beside writers: a
    step adds only entries whose time index still holds them at that score."""
    seen = 0
    batch: dict[str, tuple[str, float]] = {}
    for entry_id, text in client.hscan_iter(shard.entries, count=REINDEX_BATCH):
        data = json.loads(text)
        batch[_text(entry_id)] = (str(data["reason"]), float(data["dead_lettered_at"]))
        if len(batch) >= REINDEX_BATCH:
            seen += _index_batch(client, shard, batch)
            batch = {}
    seen += _index_batch(client, shard, batch)
    client.set(shard.endpoint_indexed, "1")
    log_event("deadletter.reindexed", level=logging.INFO, shard=shard.tag, entries=seen)
    return seen


def _index_batch(client: Any, shard: DeadLetterKeys, batch: dict[str, tuple[str, float]]
                 ) -> int:
    ids = list(batch)
    for _ in range(REINDEX_ATTEMPTS if ids else 0):
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(shard.by_time)
                scores = pipe.zmscore(shard.by_time, ids)
                pipe.multi()
                for entry_id, score in zip(ids, scores, strict=True):
                    reason, at = batch[entry_id]
                    if score is not None and float(score) == at:
                        endpoint_id = endpoint_of(entry_id)
                        pipe.zadd(shard.by_endpoint(endpoint_id), {entry_id: at})
                        pipe.zadd(shard.by_endpoint_reason(endpoint_id, reason), {entry_id: at})
                pipe.execute()
                return len(ids)
            except redis.WatchError:  # written meanwhile: read the scores again
                continue
    return len(ids)
