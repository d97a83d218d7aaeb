"""The dead-letter queue's storage, filters and its fallback when Redis is down."""

import dataclasses
import json
import time
from pathlib import Path

import pytest
import redis

import hookline.store.dead_letter_queue
from hookline.core.config import ConfigError, load_settings, settings
from hookline.delivery.replay import THROTTLE_ABOVE, replay_interval, replay_spread
from hookline.store.dead_letter_queue import (
    DLQ_INDEX_KEY,
    DLQ_KEY,
    DLQ_REASON_KEY,
    DeadLetter,
    DeadLetterFilter,
    DeadLetterQueue,
    DeadLetterStats,
    restore_spool,
)

#: When the test entries were dead-lettered: a day ago, well within the default retention.
T0 = float(int(time.time()) - 86400)


def entry(endpoint_id: str, event_id: str, reason: str, at: float) -> DeadLetter:
    return DeadLetter(endpoint_id, event_id, "order.created", {"id": event_id}, reason,
                      attempts=2, dead_lettered_at=at)


@pytest.fixture
def dlq():
    queue = DeadLetterQueue()
    for n, (endpoint_id, reason) in enumerate(
        [("a", "rejected"), ("a", "exhausted"), ("b", "rejected"), ("b", "endpoint_gone")]
    ):
        queue.add(entry(endpoint_id, f"evt-{n}", reason, at=T0 + n))
    return queue


def test_entries_are_listed_oldest_first_and_filtered(dlq):
    assert [e.id for e in dlq.find()] == ["a/evt-0", "a/evt-1", "b/evt-2", "b/evt-3"]
    assert [e.id for e in dlq.find(DeadLetterFilter(endpoint_id="a"))] == ["a/evt-0", "a/evt-1"]
    assert [e.id for e in dlq.find(DeadLetterFilter(reason="rejected"))] == ["a/evt-0", "b/evt-2"]
    assert [e.id for e in dlq.find(DeadLetterFilter(since=T0 + 1, until=T0 + 2))] == [
        "a/evt-1", "b/evt-2"]
    assert dlq.counts_by_reason() == {"rejected": 2, "exhausted": 1, "endpoint_gone": 1}


def test_dead_lettering_an_event_again_replaces_its_entry(dlq):
    dlq.add(entry("a", "evt-0", "exhausted", at=T0 + 1000))
    assert dlq.count() == 4
    assert dlq.get("a/evt-0").reason == "exhausted"
    assert dlq.find()[-1].id == "a/evt-0"


def test_purge_dry_run_counts_and_keeps(dlq):
    assert len(dlq.purge(DeadLetterFilter(reason="rejected"), dry_run=True)) == 2
    assert dlq.count() == 4
    assert len(dlq.purge(DeadLetterFilter(reason="rejected"))) == 2
    assert [e.reason for e in dlq.find()] == ["exhausted", "endpoint_gone"]


def test_unknown_reason_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown dead-letter reason"):
        DeadLetterQueue().add(entry("a", "e", "because", at=1.0))


@pytest.mark.slow
def test_redis_down_spools_to_disk_and_restores_later():
    spool = Path(settings().dlq_spool_path)
    spool.unlink(missing_ok=True)
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    DeadLetterQueue(unreachable).add(entry("a", "evt-down", "retry_failed", at=5.0))
    lines = spool.read_text().splitlines()
    assert json.loads(lines[0])["event_id"] == "evt-down"
    queue = DeadLetterQueue()
    assert restore_spool(queue) == 1
    assert queue.get("a/evt-down").reason == "retry_failed"
    assert not spool.exists()


def test_entries_are_filtered_by_attempt_count():
    queue = DeadLetterQueue()
    for attempts in range(5):
        queue.add(DeadLetter("a", f"evt-{attempts}", "t", {}, "exhausted", attempts=attempts,
                             dead_lettered_at=T0 + attempts))
    assert [e.attempts for e in queue.find(DeadLetterFilter(min_attempts=3))] == [3, 4]
    assert [e.attempts for e in queue.find(DeadLetterFilter(max_attempts=1))] == [0, 1]
    assert [e.attempts for e in queue.find(DeadLetterFilter(min_attempts=1, max_attempts=2))
            ] == [1, 2]


def test_stats_count_by_reason_without_reading_entries_and_follow_replacements(dlq):
    assert dlq.stats() == DeadLetterStats(
        total=4, by_reason={"rejected": 2, "exhausted": 1, "endpoint_gone": 1}, oldest=T0)
    dlq.add(entry("a", "evt-0", "expired", at=T0 + 1000))  # replaces a rejected entry
    dlq.remove(["b/evt-3"])
    assert dlq.stats() == DeadLetterStats(
        total=3, by_reason={"rejected": 1, "exhausted": 1, "expired": 1}, oldest=T0 + 1)


def test_stats_rebuild_the_reason_index_of_entries_written_without_one(redis_client):
    redis_client.hset(DLQ_KEY, "a/old", entry("a", "old", "rejected", at=T0 - 5).to_json())
    redis_client.zadd(DLQ_INDEX_KEY, {"a/old": T0 - 5})
    queue = DeadLetterQueue()
    queue.add(entry("a", "new", "exhausted", at=T0))
    assert queue.stats().by_reason == {"rejected": 1, "exhausted": 1}
    assert redis_client.zcard(DLQ_REASON_KEY.format("rejected")) == 1


def test_remove_unchanged_keeps_an_entry_dead_lettered_again_since_it_was_read(dlq):
    read = dlq.get("a/evt-0")
    dlq.add(entry("a", "evt-0", "endpoint_disabled", at=T0 + 2000))  # the replay failed again
    other = dlq.get("a/evt-1")
    assert dlq.remove_unchanged({read.id: read.dead_lettered_at,
                                 other.id: other.dead_lettered_at}) == 1
    assert dlq.get("a/evt-0").reason == "endpoint_disabled"
    assert dlq.get("a/evt-1") is None


def test_trim_removes_only_entries_dead_lettered_before_the_cutoff(dlq):
    assert dlq.count_before(T0 + 2) == 2
    assert dlq.trim(T0 + 2) == 2
    assert [e.id for e in dlq.find()] == ["b/evt-2", "b/evt-3"]
    assert dlq.counts_by_reason() == {"rejected": 1, "endpoint_gone": 1}
    assert dlq.trim(T0 + 2) == 0


def test_trim_goes_through_large_queues_in_batches_and_honours_a_limit(monkeypatch):
    monkeypatch.setattr(hookline.store.dead_letter_queue, "TRIM_BATCH", 7)
    queue = DeadLetterQueue()
    queue._write([entry("a", f"evt-{n}", "exhausted", at=T0 + n) for n in range(50)])
    assert queue.trim(T0 + 30, limit=20) == 20
    assert queue.trim(T0 + 30) == 10
    assert queue.count() == 20
    assert min(e.dead_lettered_at for e in queue.find()) == T0 + 30


@pytest.fixture
def one_hour_retention(monkeypatch):
    hour = dataclasses.replace(settings(), dlq_retention=3600.0)
    monkeypatch.setattr(hookline.store.dead_letter_queue, "settings", lambda: hour)
    hookline.store.dead_letter_queue._auto_trim.reset()
    yield 3600.0
    hookline.store.dead_letter_queue._auto_trim.reset()


def test_adding_a_dead_letter_trims_expired_ones_at_most_once_a_minute(one_hour_retention):
    queue = DeadLetterQueue()
    now = time.time()
    queue._write([entry("a", "expired", "exhausted", at=now - 3700),
                  entry("a", "kept", "exhausted", at=now - 3500)])
    queue.add(entry("a", "new", "rejected", at=now))
    assert [e.event_id for e in queue.find()] == ["kept", "new"]
    queue.add(entry("a", "expired-2", "rejected", at=now - 7200))  # within the minute: stays
    assert queue.count() == 3
    hookline.store.dead_letter_queue._auto_trim.reset()  # a minute later
    queue.add(entry("a", "newer", "rejected", at=now))
    assert [e.event_id for e in queue.find()] == ["kept", "new", "newer"]


def test_a_retention_of_zero_keeps_dead_letters_forever(monkeypatch):
    forever = dataclasses.replace(settings(), dlq_retention=0.0)
    monkeypatch.setattr(hookline.store.dead_letter_queue, "settings", lambda: forever)
    hookline.store.dead_letter_queue._auto_trim.reset()
    queue = DeadLetterQueue()
    queue.add(entry("a", "ancient", "exhausted", at=1.0))
    queue.add(entry("a", "new", "exhausted", at=time.time()))
    assert queue.count() == 2


def test_replay_is_throttled_above_the_threshold_or_at_a_given_rate():
    assert replay_interval(THROTTLE_ABOVE, None) is None
    assert replay_interval(THROTTLE_ABOVE + 1, None) == pytest.approx(0.1)  # 10/s
    assert replay_interval(1, "2/s") == 0.5
    entries = [entry(endpoint_id, f"e{n}", "exhausted", at=1.0)
               for endpoint_id, n in [("a", 0), ("a", 1), ("a", 2), ("b", 3)]]
    assert replay_spread(entries, 0.5) == 1.0  # a's third event: two intervals in
    assert replay_spread(entries, None) == 0.0


def test_retention_is_read_from_the_environment():
    assert load_settings({}).dlq_retention == 30 * 86400
    assert load_settings({"HOOKLINE_DLQ_RETENTION": "3600"}).dlq_retention == 3600
    with pytest.raises(ConfigError, match="HOOKLINE_DLQ_RETENTION"):
        load_settings({"HOOKLINE_DLQ_RETENTION": "-1"})
