"""The dead-letter queue's storage, filters and its fallback when Redis is down."""

import json
from pathlib import Path

import pytest
import redis

from app.config import settings
from app.deadletter import DeadLetter, DeadLetterFilter, DeadLetterQueue, restore_spool


def entry(endpoint_id: str, event_id: str, reason: str, at: float) -> DeadLetter:
    return DeadLetter(endpoint_id, event_id, "order.created", {"id": event_id}, reason,
                      attempts=2, dead_lettered_at=at)


@pytest.fixture
def dlq():
    queue = DeadLetterQueue()
    for n, (endpoint_id, reason) in enumerate(
        [("a", "rejected"), ("a", "exhausted"), ("b", "rejected"), ("b", "endpoint_gone")]
    ):
        queue.add(entry(endpoint_id, f"evt-{n}", reason, at=1000.0 + n))
    return queue


def test_entries_are_listed_oldest_first_and_filtered(dlq):
    assert [e.id for e in dlq.find()] == ["a/evt-0", "a/evt-1", "b/evt-2", "b/evt-3"]
    assert [e.id for e in dlq.find(DeadLetterFilter(endpoint_id="a"))] == ["a/evt-0", "a/evt-1"]
    assert [e.id for e in dlq.find(DeadLetterFilter(reason="rejected"))] == ["a/evt-0", "b/evt-2"]
    assert [e.id for e in dlq.find(DeadLetterFilter(since=1001, until=1002))] == [
        "a/evt-1", "b/evt-2"]
    assert dlq.counts_by_reason() == {"rejected": 2, "exhausted": 1, "endpoint_gone": 1}


def test_dead_lettering_an_event_again_replaces_its_entry(dlq):
    dlq.add(entry("a", "evt-0", "exhausted", at=2000.0))
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
