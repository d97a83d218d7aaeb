"""The dead-letter queue's per-status indexes: kept with the entries (add, replace, remove,
trim), read for a filter on the last status alone or with an endpoint, a reason and a time
window (counts read no entry, pages only what they show), and built for entries older than
them."""

from __future__ import annotations

from typing import Any

import pytest

from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_index import (
    in_transaction,
    queue_indexing,
    reindex_shard,
    status_label,
)
from hookline.store.dead_letter_queue import REASONS, DeadLetter, DeadLetterFilter, DeadLetterQueue
from tests.support.dead_letters import T0, CountingClient, letter

FILL_REASONS = ["exhausted", "rejected", "expired"]
#: The statuses the filled entries are given, in turn (None: no response).
FILL_STATUSES = [503, 500, None, 503, 410, 429, 503]


@pytest.fixture(params=[1, 3], ids=["one shard", "three shards"])
def queue(request, quiet_redis) -> DeadLetterQueue:
    return DeadLetterQueue(shards=request.param)


def fill(queue: DeadLetterQueue, count: int = 700) -> list[DeadLetter]:
    letters = [letter(f"ep-{n % 5}", n, FILL_REASONS[n % 3],
                      status=FILL_STATUSES[n % len(FILL_STATUSES)]) for n in range(count)]
    queue._write(letters)
    return letters


def counting_pages(queue: DeadLetterQueue) -> tuple[CountingClient, DeadLetterPages]:
    counting = CountingClient(queue.redis)
    return counting, DeadLetterPages(DeadLetterQueue(counting, shards=len(queue.shards)))


def selected(letters: list[DeadLetter], selection: DeadLetterFilter) -> list[DeadLetter]:
    """What ``selection`` selects of ``letters``, its time window included."""
    return [e for e in letters if selection.matches(e)
            and (selection.since is None or e.dead_lettered_at >= selection.since)
            and (selection.until is None or e.dead_lettered_at <= selection.until)]


def ids(entries) -> list[str]:
    return [entry.id for entry in entries]


def all_pages(pages: DeadLetterPages, selection: DeadLetterFilter, counting: CountingClient,
              *, limit: int, endpoint_ids: list[str] | None = None,
              reverse: bool = False) -> list[DeadLetter]:
    """Every page of ``selection`` in turn, each checked to read only the entries it shows."""
    seen: list[DeadLetter] = []
    after = None
    while True:
        counting.entries_read = 0
        page = pages.page(selection, limit=limit, after=after, endpoint_ids=endpoint_ids,
                          reverse=reverse)
        assert counting.entries_read <= limit
        seen += page.entries
        if page.after is None:
            return seen
        after = page.after


SELECTIONS = {
    "status": DeadLetterFilter(last_status=503),
    "no response": DeadLetterFilter(last_status=0),
    "status and time": DeadLetterFilter(last_status=500, since=T0 + 100, until=T0 + 400),
    "status and reason": DeadLetterFilter(last_status=503, reason="rejected"),
    "rare status and common reason": DeadLetterFilter(last_status=410, reason="exhausted"),
    "status and endpoint": DeadLetterFilter(last_status=429, endpoint_id="ep-3"),
    "status, endpoint, reason, time": DeadLetterFilter(
        last_status=503, endpoint_id="ep-1", reason="expired", since=T0 + 50,
        until=T0 + 650),
}


@pytest.mark.parametrize("name", SELECTIONS)
def test_a_status_filter_counts_from_the_indexes_and_pages_read_only_what_they_show(
        queue: DeadLetterQueue, name: str) -> None:
    letters = fill(queue)
    selection = SELECTIONS[name]
    expected = selected(letters, selection)
    assert expected  # the filter selects something, not everything
    assert len(expected) < len(letters)
    counting, pages = counting_pages(queue)
    assert pages.count(selection) == len(expected)
    assert [p.entry_id for p in pages.positions(selection)] == ids(expected)
    assert counting.entries_read == 0
    assert ids(all_pages(pages, selection, counting, limit=9)) == ids(expected)
    assert ids(all_pages(pages, selection, counting, limit=50, reverse=True)) == ids(
        reversed(expected))
    assert ids(pages.matching(selection)) == ids(expected)


@pytest.mark.parametrize("status", [503, 410], ids=["common status", "rare status"])
def test_a_status_filter_within_an_applications_endpoints(queue: DeadLetterQueue,
                                                          status: int) -> None:
    letters = fill(queue)
    scope = ["ep-0", "ep-2"]
    selection = DeadLetterFilter(last_status=status)
    expected = [e for e in letters if e.endpoint_id in scope and e.last_status == status]
    counting, pages = counting_pages(queue)
    assert pages.count(selection, scope) == len(expected)
    assert counting.entries_read == 0
    assert ids(all_pages(pages, selection, counting, limit=11, endpoint_ids=scope)) == ids(
        expected)


def test_a_status_filter_with_attempts_still_reads_the_entries_it_needs(
        queue: DeadLetterQueue) -> None:
    letters = fill(queue)
    selection = DeadLetterFilter(last_status=503, min_attempts=4)
    expected = selected(letters, selection)
    _, pages = counting_pages(queue)
    assert pages.count(selection) == len(expected)
    assert ids(pages.matching(selection)) == ids(expected)


def test_the_status_index_follows_a_replaced_entry_a_removal_and_a_trim(
        queue: DeadLetterQueue) -> None:
    fill(queue, 70)  # statuses in turn: ten of each of the seven places
    pages = DeadLetterPages(queue)

    def count(status: int) -> int:
        return pages.count(DeadLetterFilter(last_status=status))

    assert (count(503), count(500), count(0), count(410)) == (30, 10, 10, 10)
    queue.add(letter("ep-0", 0, status=418, at=T0 + 1000))  # dead-lettered again: a new status
    assert (count(503), count(418)) == (29, 1)
    queue.add(letter("ep-0", 0, status=None, at=T0 + 1001))  # and again: no response
    assert (count(503), count(418), count(0)) == (29, 0, 11)
    queue.remove(["ep-0/ev-00000", "ep-1/ev-00001", "ep-2/ev-00002"])  # None, 500, None
    assert (count(0), count(500)) == (9, 9)
    assert queue.trim(T0 + 21) == 18  # n < 21, but the three removed
    assert (count(503), count(500), count(0), count(410), count(429)) == (21, 7, 7, 7, 7)
    assert queue.count() == 49
    assert not queue.redis.exists(*(shard.by_status("418") for shard in queue.shards))


def test_a_code_outside_http_is_indexed_apart_and_found_from_the_entries(
        queue: DeadLetterQueue) -> None:
    odd = [letter("ep-0", 1, status=999), letter("ep-1", 2, status=42),
           letter("ep-2", 3, status=503)]
    queue._write(odd)
    pages = DeadLetterPages(queue)
    assert status_label(999) == status_label(42) == "other"
    assert pages.count(DeadLetterFilter(last_status=42)) == 1  # no index of its own: read
    assert ids(pages.matching(DeadLetterFilter(last_status=42))) == ["ep-1/ev-00002"]
    assert pages.count(DeadLetterFilter(last_status=503)) == 1
    queue.remove([entry.id for entry in odd])
    assert not list(queue.redis.scan_iter("hookline:*by_status:*"))


def older_version(queue: DeadLetterQueue) -> None:
    """Leave the queue as a version without the status index left it."""
    for shard in queue.shards:
        stale = list(queue.redis.scan_iter(f"hookline:{{{shard.tag}}}:by_status:*"))
        queue.redis.delete(shard.status_indexed, shard.statuses, *stale)


def test_entries_older_than_the_status_index_are_indexed_on_the_first_read_that_needs_it(
        queue: DeadLetterQueue) -> None:
    letters = fill(queue, 140)
    older_version(queue)
    pages = DeadLetterPages(queue)
    selection = DeadLetterFilter(last_status=500, reason="expired")
    assert pages.count(selection) == len(selected(letters, selection))
    assert all(queue.redis.exists(shard.status_indexed) for shard in queue.shards)
    assert ids(pages.page(DeadLetterFilter(last_status=0), limit=200).entries) == [
        e.id for e in letters if e.last_status is None]


def test_a_reindex_builds_the_status_index_and_a_replacement_then_leaves_the_old_status(
        queue: DeadLetterQueue) -> None:
    letters = fill(queue, 140)
    older_version(queue)
    assert sum(reindex_shard(queue.redis, shard) for shard in queue.shards) == 140
    pages = DeadLetterPages(queue)
    assert pages.count(DeadLetterFilter(last_status=410)) == len(
        [e for e in letters if e.last_status == 410])
    queue.add(letter("ep-4", 4, FILL_REASONS[1], status=503, at=T0 + 1000))  # was 410
    assert pages.count(DeadLetterFilter(last_status=410)) == len(
        [e for e in letters if e.last_status == 410]) - 1


def test_a_status_first_seen_during_a_write_makes_the_write_start_again(
        quiet_redis) -> None:
    queue = DeadLetterQueue(shards=1)
    shard = queue.shards[0]
    queue._write([letter("ep-0", 1, status=503)])
    replaced = letter("ep-0", 1, status=500, at=T0 + 10)
    seen: list[set[str]] = []

    def racing(pipe: Any, statuses: set[str]) -> None:
        seen.append(set(statuses))
        if len(seen) == 1:  # another worker dead-letters it meanwhile, with a status new here
            queue._write([letter("ep-0", 1, status=418, at=T0 + 5)])
        pipe.hset(shard.entries, replaced.id, replaced.to_json())
        queue_indexing(pipe, shard, replaced, REASONS, statuses)

    in_transaction(queue.redis, shard, racing)
    assert seen == [{"503"}, {"503", "418"}]
    pages = DeadLetterPages(queue)
    assert [pages.count(DeadLetterFilter(last_status=s)) for s in (503, 418, 500)] == [0, 0, 1]
