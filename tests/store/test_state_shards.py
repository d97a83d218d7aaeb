"""The retry schedule and the dead-letter queue split over several hash-tag shards
(``HOOKLINE_STATE_SHARDS``, a Redis Cluster's layout), here on one real Redis: every operation
walks the shards, the caps hold, listings come out in time order."""

from __future__ import annotations

import time

import pytest

from hookline.core.envelope import decode_task
from hookline.core.messages import TASK_NAME
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.schedule import RetrySchedule, ScheduleFull
from hookline.transport.envelope import build_message
from hookline.worker.celery import worker_app
from tests.conftest import flushed, isolated_url

QUEUE = "test.retry"
SHARDS = 4


@pytest.fixture
def client():
    """Database 13: no worker's releaser runs there."""
    yield from flushed(isolated_url(13))


def endpoints_in_every_shard(schedule: RetrySchedule, per_shard: int = 2) -> list[str]:
    found: dict[object, list[str]] = {shard: [] for shard in schedule.shards}
    n = 0
    while any(len(ids) < per_shard for ids in found.values()):
        endpoint_id = f"ep-{n}"
        ids = found[schedule.shard_of(endpoint_id)]
        if len(ids) < per_shard:
            ids.append(endpoint_id)
        n += 1
    return [endpoint_id for ids in found.values() for endpoint_id in ids]


def park(schedule: RetrySchedule, endpoint_id: str, event_id: str, countdown: float = 0) -> None:
    """A retry whose message's task id is its retry id."""
    message = build_message(worker_app, task_name=TASK_NAME, task_id=f"{endpoint_id}/{event_id}",
                            args=[endpoint_id, "t", {}], kwargs={"event_id": event_id},
                            retries=1, queue=QUEUE)
    schedule.park(endpoint_id=endpoint_id, event_id=event_id, countdown=countdown,
                  message=message)


def test_retries_go_to_their_endpoints_shard_and_stats_add_the_shards_up(client):
    schedule = RetrySchedule(client, shards=SHARDS)
    endpoint_ids = endpoints_in_every_shard(schedule)
    for endpoint_id in endpoint_ids:
        park(schedule, endpoint_id, "e1", countdown=60)
        park(schedule, endpoint_id, "e2", countdown=30)
    for shard in schedule.shards:
        assert client.zcard(shard.due) == 4  # two endpoints, two retries each
    stats = schedule.stats()
    assert stats.total == 2 * len(endpoint_ids)
    assert stats.by_endpoint == {endpoint_id: 2 for endpoint_id in endpoint_ids}
    assert 29 < stats.oldest_due - time.time() <= 30.5
    assert {retry.id for retry in schedule.scheduled()} == {
        f"{endpoint_id}/{event}" for endpoint_id in endpoint_ids for event in ("e1", "e2")}
    assert {retry.event_id for retry in schedule.scheduled(endpoint_ids[0])} == {"e1", "e2"}


def test_the_total_cap_is_each_shards_share_and_the_endpoint_cap_is_exact(client):
    schedule = RetrySchedule(client, shards=SHARDS, max_total=8, max_per_endpoint=3)
    assert schedule.max_per_shard == 2
    first, second = endpoints_in_every_shard(schedule)[:2]  # both in the first shard
    park(schedule, first, "e1")
    park(schedule, second, "e1")
    with pytest.raises(ScheduleFull) as full:
        park(schedule, first, "e2", countdown=5)
    assert full.value.which == "total" and "1 of 4" in str(full.value)
    park(schedule, first, "e1", countdown=9)  # the same retry again replaces, never capped
    schedule = RetrySchedule(client, shards=SHARDS, max_total=100, max_per_endpoint=3)
    for event in ("e2", "e3"):
        park(schedule, first, event)
    with pytest.raises(ScheduleFull) as full:
        park(schedule, first, "e4")
    assert full.value.which == "endpoint"


@pytest.mark.parametrize("mode", ["claim", "push"])
def test_release_walks_every_shard(client, mode):
    schedule = RetrySchedule(client, shards=SHARDS)
    endpoint_ids = endpoints_in_every_shard(schedule)
    for endpoint_id in endpoint_ids:
        park(schedule, endpoint_id, "due")
        park(schedule, endpoint_id, "later", countdown=20)
    released, next_due = schedule.release_due(
        queue=QUEUE, broker=client if mode == "claim" else None)
    assert released == len(endpoint_ids)
    assert 19 < next_due <= 20
    pushed = {decode_task(message)[0] for message in client.lrange(QUEUE, 0, -1)}
    assert pushed == {f"{endpoint_id}/due" for endpoint_id in endpoint_ids}
    stats = schedule.stats()
    assert stats.total == len(endpoint_ids)
    assert stats.by_endpoint == {endpoint_id: 1 for endpoint_id in endpoint_ids}
    assert all(not client.zcard(shard.releasing) for shard in schedule.shards)


def test_a_claim_release_takes_its_batch_in_all_not_per_shard_and_reaches_every_shard(client):
    """A broker elsewhere: the releaser sizes ``batch`` to the room in the retry queue, so the
    shards share it; successive calls start at different shards, so none waits for ever."""
    schedule = RetrySchedule(client, shards=SHARDS)
    endpoint_ids = endpoints_in_every_shard(schedule, per_shard=3)
    for endpoint_id in endpoint_ids:
        park(schedule, endpoint_id, "due")
    released, _ = schedule.release_due(batch=5, queue=QUEUE, broker=client)
    assert released == 5
    assert client.llen(QUEUE) == 5
    while schedule.stats().total:
        assert schedule.release_due(batch=5, queue=QUEUE, broker=client)[0] <= 5
    pushed = {decode_task(message)[0] for message in client.lrange(QUEUE, 0, -1)}
    assert pushed == {f"{endpoint_id}/due" for endpoint_id in endpoint_ids}


def test_unpark_groups_ids_by_shard(client):
    schedule = RetrySchedule(client, shards=SHARDS)
    endpoint_ids = endpoints_in_every_shard(schedule)
    for endpoint_id in endpoint_ids:
        park(schedule, endpoint_id, "e", countdown=60)
    assert schedule.unpark([f"{endpoint_id}/e" for endpoint_id in endpoint_ids]) == 8
    assert schedule.stats().total == 0
    assert not [key for key in client.scan_iter("hookline:*") if not key.endswith(":wake")]


def test_the_wake_wait_returns_at_its_timeout_and_on_a_park(client):
    schedule = RetrySchedule(client, shards=SHARDS)
    started = time.monotonic()
    schedule.wait_for_wake(0.05)
    assert time.monotonic() - started < 2
    for endpoint_id in endpoints_in_every_shard(schedule, per_shard=1):
        park(schedule, endpoint_id, "soon", countdown=1)  # each shard's wake list is pushed
    started = time.monotonic()
    for _ in schedule.shards:
        schedule.wait_for_wake(5)  # one shard's list per call, each already pushed
    assert time.monotonic() - started < 2


def dead_letter(endpoint_id: str, event_id: str, at: float, reason: str = "exhausted"
                ) -> DeadLetter:
    return DeadLetter(endpoint_id=endpoint_id, event_id=event_id, event_type="t", payload={},
                      reason=reason, dead_lettered_at=at)


def test_dead_letters_are_listed_in_time_order_across_the_shards(client):
    queue = DeadLetterQueue(client, shards=SHARDS)
    endpoint_ids = endpoints_in_every_shard(RetrySchedule(client, shards=SHARDS))
    now = time.time()
    entries = [dead_letter(endpoint_ids[n % len(endpoint_ids)], f"e{n}", now - 100 + n,
                           "rejected" if n % 3 == 0 else "exhausted") for n in range(24)]
    for entry in reversed(entries):
        queue.add(entry)
    assert len({queue.shard_of(entry.id) for entry in entries}) == SHARDS
    assert [entry.id for entry in queue.find()] == [entry.id for entry in entries]
    assert [entry.id for entry in queue.find(limit=5)] == [entry.id for entry in entries[:5]]
    mine = queue.find(DeadLetterFilter(endpoint_id=endpoint_ids[1]))
    assert [entry.id for entry in mine] == [entry.id for entry in entries
                                            if entry.endpoint_id == endpoint_ids[1]]
    window = queue.find(DeadLetterFilter(since=now - 90, until=now - 81))
    assert [entry.event_id for entry in window] == [f"e{n}" for n in range(10, 20)]
    stats = queue.stats()
    assert (stats.total, stats.by_reason) == (24, {"rejected": 8, "exhausted": 16})
    assert stats.oldest == entries[0].dead_lettered_at
    assert queue.get(entries[7].id) == entries[7]
    assert queue.count_before(now - 90) == 10
    assert queue.trim(now - 90) == 10
    assert queue.remove([entries[10].id, entries[23].id]) == 2
    assert [entry.event_id for entry in queue.find()] == [f"e{n}" for n in range(11, 23)]
    assert queue.remove_unchanged({entry.id: entry.dead_lettered_at
                                   for entry in entries[11:23]}) == 12
    assert queue.count() == 0


class ReparkedWhilePushing(RetrySchedule):
    """A worker takes a claimed retry off the broker and parks it again (deferred: the
    breaker is still open) before the releaser confirms the claim."""

    def confirm_claimed(self, retry_ids):
        # Called once the claimed retries are on the broker, before their claims are
        # confirmed: the moment a worker can take one and park it again.
        for retry_id in retry_ids:
            endpoint_id, event_id = retry_id.split("/")
            park(self, endpoint_id, event_id, countdown=30)
        return super().confirm_claimed(retry_ids)


@pytest.mark.parametrize("shards", [1, SHARDS])
def test_a_retry_parked_again_before_the_claim_is_confirmed_stays_scheduled(client, shards):
    schedule = ReparkedWhilePushing(client, shards=shards)
    endpoint_ids = endpoints_in_every_shard(schedule, per_shard=1)
    for endpoint_id in endpoint_ids:
        park(schedule, endpoint_id, "held")
    released, _ = schedule.release_due(queue=QUEUE, broker=client)
    assert released == len(endpoint_ids)
    stats = schedule.stats()
    assert stats.by_endpoint == {endpoint_id: 1 for endpoint_id in endpoint_ids}
    assert {retry.id for retry in schedule.scheduled()} == {
        f"{endpoint_id}/held" for endpoint_id in endpoint_ids}
    assert all(29 < retry.due - time.time() <= 30.5 for retry in schedule.scheduled())
    assert all(not client.zcard(shard.releasing) for shard in schedule.shards)
