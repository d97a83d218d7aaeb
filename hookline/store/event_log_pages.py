"""The event log read a page at a time, newest change first (``hookline.store.event_log``
writes it): filtered by endpoints, event type prefix, status and time window, resumed after a
:class:`~hookline.store.dead_letter_index.Position` (the row's time in ms and
``<endpoint>/<event>``: the indexes order equal times by member, so a page resumes exactly
after the last row shown, even when that row changed or went since).

Without endpoints, a page merges (heapq) the shards' per-status, per-type indexes that the
filter selects, each read from the position for at most a page (one pipelined round trip per
step), then reads the rows shown; with endpoints (a scoped tenant, an endpoint filter), it
merges those endpoints' own time indexes and keeps the rows the status and type match. A page
examines at most :data:`SCAN_BUDGET` rows: past that it ends short, with a cursor to go on
(``LogPage.exhausted`` False), so a rare filter never makes a page slow.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hookline.core.config import settings
from hookline.store import connection as store
from hookline.store.dead_letter_index import Position
from hookline.store.event_log import (
    STATUSES,
    LogRow,
    LogShard,
    log_key,
    log_shards,
    parse_row,
    rows_key,
)

#: Most rows (index entries) one page examines before it ends short.
SCAN_BUDGET = 5000
#: Extra positions read past a page's size per index, so that ties and skipped rows rarely
#: cost a second step.
SLACK = 8


@dataclass(frozen=True)
class LogFilter:
    """Which rows a page shows. ``endpoint_ids`` None: every endpoint; ``since``/``until``:
    Unix seconds of the latest change, inclusive."""

    endpoint_ids: Sequence[str] | None = None
    type_prefix: str = ""
    status: str | None = None
    since: float | None = None
    until: float | None = None


@dataclass(frozen=True)
class LogPage:
    rows: list[LogRow]
    #: Where the next page starts, None at the end of the log.
    after: Position | None
    #: False: the page ended short at its budget; more may match after ``after``.
    exhausted: bool = True


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class _Source:
    """One sorted set a page merges: a shard's index (``status`` and ``event_type`` set, its
    members ``<endpoint>/<event>``) or an endpoint's time index (members: event ids)."""

    key: str
    endpoint_id: str | None = None
    status: str | None = None
    event_type: str | None = None

    def entry(self, member: str) -> str:
        return member if self.endpoint_id is None else f"{self.endpoint_id}/{member}"


class EventLogPages:
    """Read the event log's pages (module docstring)."""

    def __init__(self, redis_client: Any = None, *, shards: int | None = None) -> None:
        self.redis: Any = redis_client or store.client()
        self.shards = log_shards(shards or settings().state_shards)

    def types(self) -> list[str]:
        """Every event type the shards' indexes name."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.shards:
            pipe.smembers(shard.types)
        return sorted({_text(name) for names in pipe.execute() for name in names})

    def _sources(self, selection: LogFilter) -> list[_Source]:
        if selection.endpoint_ids is not None:
            return [_Source(log_key(endpoint_id), endpoint_id=endpoint_id)
                    for endpoint_id in dict.fromkeys(selection.endpoint_ids)]
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.shards:
            pipe.smembers(shard.types)
        statuses = (selection.status,) if selection.status else STATUSES
        found: list[_Source] = []
        for shard, names in zip(self.shards, pipe.execute(), strict=True):
            for name in sorted(_text(name) for name in names):
                if name.startswith(selection.type_prefix):
                    found.extend(_index(shard, status, name) for status in statuses)
        return found

    def page(self, selection: LogFilter, *, limit: int,
             after: Position | None = None) -> LogPage:
        """Up to ``limit`` rows after ``after``, newest change first (module docstring)."""
        retention = settings().event_log_retention
        floor = (time.time() - retention) * 1000
        low = floor if selection.since is None else max(floor, selection.since * 1000)
        high = None if selection.until is None else selection.until * 1000
        sources = self._sources(selection)
        rows: list[LogRow] = []
        examined = 0
        while len(rows) < limit:
            step = max(limit - len(rows), 1) + SLACK
            candidates = self._merged(sources, low, high, after, step)
            if not candidates:
                return LogPage(rows, None)
            examined += len(candidates)
            for position, source, member in candidates:
                row = self._kept(selection, source, member, position)
                after = position
                if row is not None:
                    rows.append(row)
                    if len(rows) == limit:
                        return LogPage(rows, after)
            if len(candidates) < step:
                return LogPage(rows, None)
            if examined >= SCAN_BUDGET:
                return LogPage(rows, after, exhausted=False)
        return LogPage(rows, after)

    def _merged(self, sources: Sequence[_Source], low: float, high: float | None,
                after: Position | None, count: int) -> list[tuple[Position, _Source, str]]:
        """The first ``count`` positions after ``after`` across ``sources``, newest first,
        with their rows attached (``_kept`` reads them from ``self._rows``)."""
        top: Any = "+inf" if high is None else high
        if after is not None:
            top = after.at if high is None else min(after.at, high)
        pipe = self.redis.pipeline(transaction=False)
        for source in sources:
            pipe.zrevrangebyscore(source.key, top, low, start=0, num=count + SLACK,
                                  withscores=True)
        parts = []
        for source, found in zip(sources, pipe.execute(), strict=True):
            part = []
            for member, score in found:
                member = _text(member)
                position = Position(float(score), source.entry(member))
                if after is None or position < after:
                    part.append((position, source, member))
            if len(found) == count + SLACK and len(part) < count:
                part = self._past_ties(source, top, low, after, count)
            parts.append(part)
        merged = list(heapq.merge(*parts, key=lambda found: found[0], reverse=True))[:count]
        self._rows = self._read_rows([(source, member) for _, source, member in merged])
        return merged

    def _past_ties(self, source: _Source, top: Any, low: float, after: Position | None,
                   count: int) -> list[tuple[Position, _Source, str]]:
        """A source whose first read was all ties at the cursor's time: read on past them."""
        part: list[tuple[Position, _Source, str]] = []
        offset = 0
        while len(part) < count:
            found = self.redis.zrevrangebyscore(source.key, top, low, start=offset,
                                                num=count + SLACK, withscores=True)
            offset += len(found)
            for member, score in found:
                position = Position(float(score), source.entry(_text(member)))
                if after is None or position < after:
                    part.append((position, source, _text(member)))
            if len(found) < count + SLACK:
                break
        return part[:count]

    def _read_rows(self, wanted: list[tuple[_Source, str]]) -> dict[str, LogRow | None]:
        pipe = self.redis.pipeline(transaction=False)
        named = []
        for source, member in wanted:
            endpoint_id, _, event_id = source.entry(member).partition("/")
            named.append((endpoint_id, event_id))
            pipe.hget(rows_key(endpoint_id), event_id)
        return {f"{endpoint_id}/{event_id}": parse_row(endpoint_id, event_id, text)
                for (endpoint_id, event_id), text in zip(named, pipe.execute(), strict=True)}

    def _kept(self, selection: LogFilter, source: _Source, member: str,
              position: Position) -> LogRow | None:
        """The row at ``position`` if it is still there as the source has it (a shard's
        index may be behind its row on a Redis Cluster) and matches the filter."""
        row = self._rows.get(position.entry_id)
        if row is None or round(row.changed_at * 1000) != round(position.at):
            return None
        if source.status is not None and (row.status != source.status
                                          or row.event_type != source.event_type):
            return None
        if selection.status is not None and row.status != selection.status:
            return None
        if not row.event_type.startswith(selection.type_prefix):
            return None
        return row

    def get(self, endpoint_id: str, event_id: str) -> LogRow | None:
        """One event's row at one endpoint."""
        return parse_row(endpoint_id, event_id, self.redis.hget(rows_key(endpoint_id), event_id))


def _index(shard: LogShard, status: str, event_type: str) -> _Source:
    return _Source(shard.index(status, event_type), status=status, event_type=event_type)
