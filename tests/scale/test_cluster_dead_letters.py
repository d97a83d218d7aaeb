"""Dead-letter pages, counts, the per-endpoint index's rebuild and a bulk replay job on a Redis
Cluster of three masters (the entries and indexes sharded, ``HOOKLINE_STATE_SHARDS``): each
read and write of one shard stays on its slot, and listing merges the shards in time order.
The cluster and its worker are tests/scale/test_cluster.py's."""

from __future__ import annotations

import time

import pytest

from hookline.delivery.replay_job import JobRunner
from hookline.service import dead_letters, replay_jobs
from hookline.service.actor import Actor
from hookline.service.dead_letters import DeadLetterQuery
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.schedule import RetrySchedule
from tests.scale.test_cluster import on_cluster, setup  # noqa: F401 (the fixtures)

pytestmark = pytest.mark.scale
OPERATOR = Actor("alice", "cluster-test")


@pytest.mark.usefixtures("on_cluster")
def test_dead_letter_pages_counts_reindex_and_a_bulk_job_on_a_cluster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    queue = DeadLetterQueue()
    assert len(queue.shards) > 1
    now = time.time()
    endpoints = [f"cl-dlq-{n}" for n in range(8)]  # spread over the shards
    queue._write([DeadLetter(endpoint_id, f"ev-{n:03d}", "order.paid", {"n": n},
                             "rejected" if n % 2 else "exhausted", attempts=2,
                             last_status=400 if n % 2 else 503, dead_lettered_at=now - 500 + n)
                  for n in range(40) for endpoint_id in endpoints])
    for order in ("newest", "oldest"):  # newest first unless asked
        query = DeadLetterQuery(reason="rejected", since=now - 490, order=order)
        assert dead_letters.count(OPERATOR, query) == 8 * 15
        seen, cursor = [], None
        while True:
            page = dead_letters.list_page(OPERATOR, query, cursor, limit=11)
            seen += [(entry.dead_lettered_at, entry.id) for entry in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == sorted(seen, reverse=order == "newest") and len(set(seen)) == 120
    assert dead_letters.reindex(OPERATOR) == 8 * 40
    one = DeadLetterQuery(endpoint="cl-dlq-3", status=503)
    assert dead_letters.count(OPERATOR, one) == 20
    monkeypatch.setattr("hookline.service.replay_jobs.enqueue_replay_job", lambda job_id: None)
    job_id = replay_jobs.start_bulk_replay(OPERATOR, one, rate="1000/s")
    assert JobRunner(job_id, sleep=lambda seconds: None).run() == "done"
    assert replay_jobs.job(OPERATOR, job_id).replayed == 20
    # The replayed ones left (the worker may dead-letter them again, with no status: the
    # endpoint is not registered); the others stayed.
    assert dead_letters.count(OPERATOR, one) == 0
    assert dead_letters.count(OPERATOR, DeadLetterQuery(endpoint="cl-dlq-3",
                                                        reason="rejected")) == 20
    RetrySchedule().unpark([f"cl-dlq-3/ev-{n:03d}" for n in range(0, 40, 2)])
