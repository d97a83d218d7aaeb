"""The dead-letter queue's per-endpoint indexes, pages and counts: kept with the entries (add,
replace, remove, trim), read from a position so a filtered page reads only what it shows, and
built for entries older than them."""

from __future__ import annotations

import pytest

from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_index import Position
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.keys import dead_letter_shards
from tests.support.dead_letters import T0, CountingClient, letter

REASONS = ["exhausted", "rejected", "expired"]


@pytest.fixture(params=[1, 3], ids=["one shard", "three shards"])
def queue(request, redis_client) -> DeadLetterQueue:
    return DeadLetterQueue(shards=request.param)


def fill(queue: DeadLetterQueue, count: int = 600) -> list[DeadLetter]:
    letters = [letter(f"ep-{n % 6}", n, REASONS[n % 3], status=(500 + n % 4) if n % 7 else None)
               for n in range(count)]
    queue._write(letters)
    return letters


def ids(entries) -> list[str]:
    return [entry.id for entry in entries]


def test_a_page_filtered_by_endpoint_reason_and_time_reads_only_the_entries_it_shows(
        queue: DeadLetterQueue) -> None:
    letters = fill(queue)
    counting = CountingClient(queue.redis)
    pages = DeadLetterPages(DeadLetterQueue(counting, shards=len(queue.shards)))
    selection = DeadLetterFilter(endpoint_id="ep-2", reason="expired", since=T0 + 100,
                                 until=T0 + 500)
    expected = [e for e in letters if e.endpoint_id == "ep-2" and e.reason == "expired"
                and T0 + 100 <= e.dead_lettered_at <= T0 + 500]
    seen: list[DeadLetter] = []
    after = None
    while True:
        counting.entries_read = 0
        page = pages.page(selection, limit=7, after=after)
        assert counting.entries_read <= 7  # the page's own entries, nothing more
        seen += page.entries
        if page.after is None:
            break
        after = page.after
    assert ids(seen) == ids(expected)
    assert pages.count(selection) == len(expected)


def test_pages_newest_first_cover_every_entry_once(queue: DeadLetterQueue) -> None:
    letters = fill(queue, 120)
    pages = DeadLetterPages(queue)
    seen: list[DeadLetter] = []
    after = None
    while True:
        page = pages.page(DeadLetterFilter(reason="rejected"), limit=9, after=after,
                          reverse=True)
        seen += page.entries
        if page.after is None:
            break
        after = page.after
    assert ids(seen) == ids(reversed([e for e in letters if e.reason == "rejected"]))


def test_the_status_filter_is_exact_and_every_page_stays_bounded(queue: DeadLetterQueue
                                                                 ) -> None:
    letters = fill(queue)
    counting = CountingClient(queue.redis)
    pages = DeadLetterPages(DeadLetterQueue(counting, shards=len(queue.shards)))
    selection = DeadLetterFilter(endpoint_id="ep-1", last_status=0)  # no response
    expected = [e for e in letters if e.endpoint_id == "ep-1" and e.last_status is None]
    assert pages.count(selection) == len(expected)
    seen, after = [], None
    while True:
        counting.entries_read = 0
        page = pages.page(selection, limit=2, after=after)
        assert counting.entries_read <= 2 * 20
        seen += page.entries
        if page.after is None:
            break
        after = page.after
    assert ids(seen) == ids(expected)
    assert [e.id for e in pages.matching(DeadLetterFilter(last_status=501))] == [
        e.id for e in letters if e.last_status == 501]


def test_counts_read_no_entry(queue: DeadLetterQueue) -> None:
    fill(queue)
    counting = CountingClient(queue.redis)
    pages = DeadLetterPages(DeadLetterQueue(counting, shards=len(queue.shards)))
    assert pages.count(DeadLetterFilter(endpoint_id="ep-3")) == 100
    assert pages.count(DeadLetterFilter(reason="rejected", until=T0 + 299)) == 100
    assert pages.count(DeadLetterFilter(endpoint_id="ep-3", reason="exhausted")) == 100
    assert pages.count(DeadLetterFilter(), endpoint_ids=["ep-0", "ep-1"]) == 200
    assert counting.entries_read == 0


def test_the_indexes_follow_a_replaced_entry_a_removal_and_a_trim(queue: DeadLetterQueue
                                                                  ) -> None:
    fill(queue, 60)
    pages = DeadLetterPages(queue)
    first = letter("ep-0", 0, "exhausted")
    queue.add(letter("ep-0", 0, "rejected", at=T0 + 1000))  # dead-lettered again, new reason
    assert pages.count(DeadLetterFilter(endpoint_id="ep-0", reason="exhausted")) == 9
    assert pages.count(DeadLetterFilter(endpoint_id="ep-0", reason="rejected")) == 1
    newest = pages.page(DeadLetterFilter(endpoint_id="ep-0"), limit=1, reverse=True)
    assert ids(newest.entries) == [first.id]
    queue.remove([first.id, "ep-1/ev-00001"])
    assert pages.count(DeadLetterFilter(endpoint_id="ep-0")) == 9
    assert pages.count(DeadLetterFilter(endpoint_id="ep-1")) == 9
    assert queue.trim(T0 + 30) == 28  # n < 30, but the two removed
    assert pages.count(DeadLetterFilter(endpoint_id="ep-0")) == 5
    assert sum(pages.count(DeadLetterFilter(endpoint_id=f"ep-{n}")) for n in range(6)) \
        == queue.count() == 30


def test_entries_older_than_the_endpoint_index_are_indexed_on_the_first_read_that_needs_it(
        queue: DeadLetterQueue) -> None:
    letters = fill(queue, 90)
    for shard in dead_letter_shards(len(queue.shards)):  # as a version without the index
        stale = list(queue.redis.scan_iter(f"hookline:{{{shard.tag}}}:by_endpoint*"))
        queue.redis.delete(shard.endpoint_indexed, *stale)
    pages = DeadLetterPages(queue)
    assert pages.count(DeadLetterFilter(endpoint_id="ep-4", reason="exhausted")) == len(
        [e for e in letters if e.endpoint_id == "ep-4" and e.reason == "exhausted"])
    assert ids(pages.page(DeadLetterFilter(endpoint_id="ep-5"), limit=100).entries) == [
        e.id for e in letters if e.endpoint_id == "ep-5"]


def test_a_page_resumes_after_its_position_when_that_entry_is_gone(queue: DeadLetterQueue
                                                                   ) -> None:
    tied = [letter("ep-0", n, at=T0) for n in range(5)]  # one score: ordered by id
    queue._write(tied)
    pages = DeadLetterPages(queue)
    page = pages.page(DeadLetterFilter(endpoint_id="ep-0"), limit=2)
    assert page.after == Position(T0, tied[1].id)
    queue.remove([tied[1].id])
    assert ids(pages.page(DeadLetterFilter(endpoint_id="ep-0"), limit=10,
                          after=page.after).entries) == ids(tied[2:])
