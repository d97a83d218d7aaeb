"""Filtered pages and counts of the dead-letter queue, read through its indexes.

The filter's endpoint, reason, last status and time window choose the index (``hookline.store.
deadletter_index``): a page reads the index from its position and only the entries it shows;
a count is a ZCOUNT per index. A status with an endpoint or a reason reads the smaller of its
index and theirs and keeps the positions the other holds (:func:`choose_index`, :func:`kept`):
no entry read either, but a count then goes through the smaller index. The rest of a filter
(attempts, ids) needs the entries.
A page whose positions are checked reads at most a budget of them (``BUDGET_PER_ITEM`` per
entry asked for when it reads entries to decide, ``CHECKS_PER_ITEM`` when the indexes decide)
and, when it found fewer than it was asked for, ends at the last position read, so the next page
goes on from there (every page stays bounded, however rare the match); a count reads the chosen
index to the end (the dry run is exact).

An entry replaced since its index was read (dead-lettered again) is shown at its new place
only, never twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hookline.store.dead_letter_index import (
    Position,
    count_of,
    endpoint_of,
    ensure_endpoint_index,
    ensure_status_index,
    index_keys,
    indexed_status,
    page_of,
)
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.keys import DeadLetterKeys, endpoint_shard

#: Entries a page reads at most, per entry shown, when the filter needs entries to decide.
BUDGET_PER_ITEM = 20
#: Positions a page checks at most, per entry shown, when the indexes decide (no entry read).
CHECKS_PER_ITEM = 100
#: Positions read per step when counting or listing everything that matches.
STEP = 1000


@dataclass(frozen=True)
class EntriesPage:
    """Entries in index order; ``after`` is where the next page starts (None: the end)."""

    entries: list[DeadLetter]
    after: Position | None


def needs_entries(selection: DeadLetterFilter) -> bool:
    """Whether the filter looks at more than the indexes know (endpoint, reason, time, a last
    status that has an index)."""
    unindexed_status = (selection.last_status is not None
                        and indexed_status(selection.last_status) is None)
    return (unindexed_status or selection.min_attempts is not None
            or selection.max_attempts is not None or bool(selection.ids))


@dataclass(frozen=True)
class IndexRead:
    """What a filter reads: the indexes ``keys`` (their union, in index order), each position
    read kept if it is an entry of ``endpoint_ids`` held by its shard's index of ``reason``
    and of status label ``status`` (:func:`kept`; None: not checked)."""

    keys: list[str]
    endpoint_ids: frozenset[str] | None = None
    reason: str | None = None
    status: str | None = None

    @property
    def exact(self) -> bool:
        """Whether ``keys`` hold exactly the filter's entries (no position to check)."""
        return self.endpoint_ids is None and self.reason is None and self.status is None


def choose_index(client: Any, shards: Sequence[DeadLetterKeys], *,
                 endpoint_ids: Sequence[str] | None = None, reason: str | None = None,
                 status: str | None = None, since: float | None = None,
                 until: float | None = None) -> IndexRead:
    """The indexes for a filter on endpoints, reason and status label: those holding exactly
    its entries when there are (:func:`index_keys`, or the status alone); else the smaller,
    within [since, until], of the status index and the endpoint and reason one, the other
    checked."""
    keys = index_keys(shards, endpoint_ids=endpoint_ids, reason=reason)
    if status is None:
        return IndexRead(keys)
    by_status = [shard.by_status(status) for shard in shards_of(shards, endpoint_ids)]
    if endpoint_ids is None and reason is None:
        return IndexRead(by_status)
    if (count_of(client, keys, since=since, until=until)
            <= count_of(client, by_status, since=since, until=until)):
        return IndexRead(keys, status=status)
    return IndexRead(by_status, reason=reason,
                     endpoint_ids=None if endpoint_ids is None else frozenset(endpoint_ids))


def shards_of(shards: Sequence[DeadLetterKeys], endpoint_ids: Iterable[str] | None
              ) -> list[DeadLetterKeys]:
    """The shards holding the entries of ``endpoint_ids`` (None: every shard)."""
    if endpoint_ids is None:
        return list(shards)
    return [shards[n] for n in sorted({endpoint_shard(e, len(shards)) for e in endpoint_ids})]


def kept(client: Any, shards: Sequence[DeadLetterKeys], read: IndexRead,
         positions: list[Position]) -> list[Position]:
    """The ``positions`` read from ``read.keys`` that pass ``read``'s checks, in their order:
    no entry read, one ZMSCORE per shard and index checked."""
    if read.endpoint_ids is not None:
        positions = [p for p in positions if endpoint_of(p.entry_id) in read.endpoint_ids]
    if read.reason is not None:
        positions = _held(client, shards, positions, DeadLetterKeys.by_reason, read.reason)
    if read.status is not None:
        positions = _held(client, shards, positions, DeadLetterKeys.by_status, read.status)
    return positions


def _held(client: Any, shards: Sequence[DeadLetterKeys], positions: list[Position],
          index: Callable[[DeadLetterKeys, str], str], name: str) -> list[Position]:
    """The ``positions`` whose shard's index ``index(shard, name)`` holds them at their score
    (an entry replaced since is at its new score)."""
    by_shard: dict[int, list[Position]] = {}
    for position in positions:
        shard = endpoint_shard(endpoint_of(position.entry_id), len(shards))
        by_shard.setdefault(shard, []).append(position)
    pipe = client.pipeline(transaction=False)
    for shard, shard_positions in by_shard.items():
        pipe.zmscore(index(shards[shard], name), [p.entry_id for p in shard_positions])
    held: set[Position] = set()
    for shard_positions, scores in zip(by_shard.values(), pipe.execute() if by_shard else [],
                                       strict=True):
        held.update(position for position, score in zip(shard_positions, scores, strict=True)
                    if score is not None and float(score) == position.at)
    return [position for position in positions if position in held]


class DeadLetterPages:
    """Pages, counts and full listings of ``queue`` for a filter; ``endpoint_ids`` limits any of
    them to those endpoints (an application's, for a scoped reader), whatever the filter says
    of its endpoint (the caller intersects the two)."""

    def __init__(self, queue: DeadLetterQueue | None = None) -> None:
        self.queue = queue or DeadLetterQueue()
        self.redis = self.queue.redis

    def indexes(self, selection: DeadLetterFilter,
                endpoint_ids: Sequence[str] | None = None) -> IndexRead:
        """The indexes read for the filter's endpoints, reason and status, and the checks
        each position read must pass."""
        if endpoint_ids is None and selection.endpoint_id is not None:
            endpoint_ids = [selection.endpoint_id]
        shards = shards_of(self.queue.shards, endpoint_ids)
        if endpoint_ids is not None:
            ensure_endpoint_index(self.redis, shards)
        status = indexed_status(selection.last_status)
        if status is not None:
            ensure_status_index(self.redis, shards)
        return choose_index(self.redis, self.queue.shards, endpoint_ids=endpoint_ids,
                            reason=selection.reason, status=status, since=selection.since,
                            until=selection.until)

    def page(self, selection: DeadLetterFilter, *, limit: int, after: Position | None = None,
             endpoint_ids: Sequence[str] | None = None, reverse: bool = False) -> EntriesPage:
        """Up to ``limit`` matching entries after ``after`` (newest first when ``reverse``)."""
        read = self.indexes(selection, endpoint_ids)
        if read.exact and not needs_entries(selection):
            positions = self._positions(read, selection, after, limit + 1, reverse)
            shown = positions[:limit]
            return EntriesPage(self._read(shown, selection),
                               shown[-1] if len(positions) > limit else None)
        return self._checked_page(read, selection, limit, after, reverse)

    def _checked_page(self, read: IndexRead, selection: DeadLetterFilter, limit: int,
                      after: Position | None, reverse: bool) -> EntriesPage:
        """A page whose positions are checked: against the indexes (steps growing from twice
        the page, only the entries shown read) and, if the filter needs them, the entries."""
        entries_decide = needs_entries(selection)
        budget = limit * (BUDGET_PER_ITEM if entries_decide else CHECKS_PER_ITEM)
        found: list[DeadLetter] = []
        step = 2 * limit
        while budget > 0:
            positions = self._positions(read, selection, after, min(step, STEP, budget),
                                        reverse)
            budget, step = budget - len(positions), 2 * step
            if not positions:
                return EntriesPage(found, None)
            shown, after = kept(self.redis, self.queue.shards, read, positions), positions[-1]
            if not entries_decide and len(shown) > limit - len(found):
                shown = shown[:limit - len(found)]
                after = shown[-1]
            for position, text in zip(shown, self._texts(shown), strict=True):
                entry = _current(position, text)
                if entry is not None and selection.matches(entry):
                    found.append(entry)
                    if len(found) == limit:
                        return EntriesPage(found, position)
        return EntriesPage(found, after)

    def count(self, selection: DeadLetterFilter,
              endpoint_ids: Sequence[str] | None = None) -> int:
        """Exactly how many entries match: ZCOUNTs alone when the indexes hold exactly the
        filter's entries, the smaller index's positions checked when they decide, else the
        entries read."""
        if needs_entries(selection):
            return sum(1 for _ in self.matching(selection, endpoint_ids))
        read = self.indexes(selection, endpoint_ids)
        if read.exact:
            return count_of(self.redis, read.keys, since=selection.since,
                            until=selection.until)
        return sum(len(batch) for batch in self._batches(read, selection))

    def names(self, endpoint_id: str) -> bool:
        """Whether any dead letter is of endpoint ``endpoint_id`` (its index, one ZCARD per
        shard)."""
        return bool(self.count(DeadLetterFilter(endpoint_id=endpoint_id)))

    def matching(self, selection: DeadLetterFilter,
                 endpoint_ids: Sequence[str] | None = None) -> Iterator[DeadLetter]:
        """Every matching entry, oldest first, read a step at a time."""
        for batch in self._batches(self.indexes(selection, endpoint_ids), selection):
            yield from self._read(batch, selection)

    def positions(self, selection: DeadLetterFilter,
                  endpoint_ids: Sequence[str] | None = None) -> Iterator[Position]:
        """The position of every matching entry, oldest first: no entry read unless the
        filter needs entries (a bulk replay's snapshot)."""
        if needs_entries(selection):
            for entry in self.matching(selection, endpoint_ids):
                yield Position(entry.dead_lettered_at, entry.id)
            return
        for batch in self._batches(self.indexes(selection, endpoint_ids), selection):
            yield from batch

    def _batches(self, read: IndexRead, selection: DeadLetterFilter
                 ) -> Iterator[list[Position]]:
        """The positions ``read`` keeps, oldest first, ``STEP`` read at a time."""
        after: Position | None = None
        while positions := self._positions(read, selection, after, STEP, False):
            after = positions[-1]
            yield kept(self.redis, self.queue.shards, read, positions)

    def _positions(self, read: IndexRead, selection: DeadLetterFilter,
                   after: Position | None, limit: int, reverse: bool) -> list[Position]:
        return page_of(self.redis, read.keys, since=selection.since, until=selection.until,
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
