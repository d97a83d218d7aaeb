"""Filtered pages and counts of the dead-letter queue, read through its indexes.

The filter's endpoint, reason and time window choose the index (``hookline.store.
deadletter_index``): a page reads the index from its position and only the entries it shows;
a count is a ZCOUNT per index. The rest of a filter (last status, attempts, ids) needs the
entries: a page then reads at most ``budget`` entries and, when it found fewer than it was
asked for, ends at the last entry read, so the next page goes on from there (every page stays
bounded, however rare the match); a count reads the chosen index's entries to the end (the
dry run is exact).

An entry replaced since its index was read (dead-lettered again) is shown at its new place
only, never twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hookline.store.deadletter import DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.deadletter_index import (
    Position,
    count_of,
    endpoint_of,
    ensure_endpoint_index,
    index_keys,
    page_of,
)
from hookline.store.keys import endpoint_shard

#: Entries a page reads at most, per entry shown, when the filter needs entries to decide.
BUDGET_PER_ITEM = 20
#: Positions read per step when counting or listing everything that matches.
STEP = 1000


@dataclass(frozen=True)
class EntriesPage:
    """Entries in index order; ``after`` is where the next page starts (None: the end)."""

    entries: list[DeadLetter]
    after: Position | None


def needs_entries(selection: DeadLetterFilter) -> bool:
    """Whether the filter looks at more than the indexes know (endpoint, reason, time)."""
    return (selection.last_status is not None or selection.min_attempts is not None
            or selection.max_attempts is not None or bool(selection.ids))


class DeadLetterPages:
    """Pages, counts and full listings of ``queue`` for a filter; ``endpoint_ids`` limits any of
    them to those endpoints (an application's, for a scoped reader), whatever the filter says
    of its endpoint (the caller intersects the two)."""

    def __init__(self, queue: DeadLetterQueue | None = None) -> None:
        self.queue = queue or DeadLetterQueue()
        self.redis = self.queue.redis

    def indexes(self, selection: DeadLetterFilter,
                endpoint_ids: Sequence[str] | None = None) -> list[str]:
        """The index keys holding exactly the filter's endpoints and reason."""
        if endpoint_ids is None and selection.endpoint_id is not None:
            endpoint_ids = [selection.endpoint_id]
        if endpoint_ids is not None:
            count = len(self.queue.shards)
            ensure_endpoint_index(self.redis, {self.queue.shards[endpoint_shard(e, count)]
                                               for e in endpoint_ids})
        return index_keys(self.queue.shards, endpoint_ids=endpoint_ids,
                          reason=selection.reason)

    def page(self, selection: DeadLetterFilter, *, limit: int, after: Position | None = None,
             endpoint_ids: Sequence[str] | None = None, reverse: bool = False) -> EntriesPage:
        """Up to ``limit`` matching entries after ``after`` (newest first when ``reverse``)."""
        index = self.indexes(selection, endpoint_ids)
        if not needs_entries(selection):
            positions = self._positions(index, selection, after, limit + 1, reverse)
            shown = positions[:limit]
            return EntriesPage(self._read(shown, selection),
                               shown[-1] if len(positions) > limit else None)
        return self._filtered_page(index, selection, limit, after, reverse)

    def _filtered_page(self, index: list[str], selection: DeadLetterFilter, limit: int,
                       after: Position | None, reverse: bool) -> EntriesPage:
        found: list[DeadLetter] = []
        budget = limit * BUDGET_PER_ITEM
        while budget > 0:
            positions = self._positions(index, selection, after, min(STEP, budget), reverse)
            budget -= len(positions)
            if not positions:
                return EntriesPage(found, None)
            texts = self._texts(positions)
            for position, text in zip(positions, texts, strict=True):
                after = position
                entry = _current(position, text)
                if entry is not None and selection.matches(entry):
                    found.append(entry)
                    if len(found) == limit:
                        return EntriesPage(found, position)
        return EntriesPage(found, after)

    def count(self, selection: DeadLetterFilter,
              endpoint_ids: Sequence[str] | None = None) -> int:
        """Exactly how many entries match: ZCOUNTs alone unless the filter needs entries."""
        index = self.indexes(selection, endpoint_ids)
        if not needs_entries(selection):
            return count_of(self.redis, index, since=selection.since, until=selection.until)
        return sum(1 for _ in self.matching(selection, endpoint_ids))

    def matching(self, selection: DeadLetterFilter,
                 endpoint_ids: Sequence[str] | None = None) -> Iterator[DeadLetter]:
        """Every matching entry, oldest first, read a step at a time."""
        index = self.indexes(selection, endpoint_ids)
        after: Position | None = None
        while True:
            positions = self._positions(index, selection, after, STEP, False)
            if not positions:
                return
            after = positions[-1]
            yield from self._read(positions, selection)

    def positions(self, selection: DeadLetterFilter,
                  endpoint_ids: Sequence[str] | None = None) -> Iterator[Position]:
        """The position of every matching entry, oldest first: no entry read unless the
        filter needs entries (a bulk replay's snapshot)."""
        if needs_entries(selection):
            for entry in self.matching(selection, endpoint_ids):
                yield Position(entry.dead_lettered_at, entry.id)
            return
        index = self.indexes(selection, endpoint_ids)
        after: Position | None = None
        while positions := self._positions(index, selection, after, STEP, False):
            after = positions[-1]
            yield from positions

    def _positions(self, index: list[str], selection: DeadLetterFilter,
                   after: Position | None, limit: int, reverse: bool) -> list[Position]:
        return page_of(self.redis, index, since=selection.since, until=selection.until,
                       after=after, limit=limit, reverse=reverse)

    def _texts(self, positions: list[Position]) -> list[str | None]:
        """The entries' JSON at ``positions`` (None where removed), one HMGET per shard."""
        by_shard: dict[int, list[int]] = {}
        count = len(self.queue.shards)
        for n, position in enumerate(positions):
            shard = endpoint_shard(endpoint_of(position.entry_id), count)
            by_shard.setdefault(shard, []).append(n)
        texts: list[str | None] = [None] * len(positions)
        for shard, places in by_shard.items():
            read = self.redis.hmget(self.queue.shards[shard].entries,
                                    [positions[n].entry_id for n in places])
            for n, text in zip(places, read, strict=True):
                texts[n] = text.decode() if isinstance(text, bytes) else text
        return texts

    def _read(self, positions: list[Position], selection: DeadLetterFilter
              ) -> list[DeadLetter]:
        entries = (_current(position, text)
                   for position, text in zip(positions, self._texts(positions), strict=True))
        return [entry for entry in entries if entry is not None and selection.matches(entry)]


def _current(position: Position, text: str | None) -> DeadLetter | None:
    """The entry, if it is still the one the index placed there."""
    if text is None:
        return None
    entry = DeadLetter.from_json(text)
    return entry if entry.dead_lettered_at == position.at else None
