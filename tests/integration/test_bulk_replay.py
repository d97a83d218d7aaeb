"""The bulk replay job with the session worker and a real receiver: 500 dead letters replayed,
each delivered once under its own webhook-id and within its endpoint's rate limit, progress
reaching the total; a cancel stops the rest, which stays in the dead-letter queue. (A worker
killed in the middle: tests/faults/test_bulk_replay_crash.py.) Between two batches the job's
task has ended, its next run parked in the retry schedule: it holds no worker slot."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from examples.receiver import Receiver, Reply, always
from hookline.delivery.replay_job import REPLAY_JOB_TASK_NAME
from hookline.service import dead_letters, replay_jobs
from hookline.service.actor import Actor
from hookline.service.dead_letters import DeadLetterQuery
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.replay_jobs import CONTINUATIONS, ReplayJobs, next_run_id
from hookline.store.schedule import RetrySchedule
from hookline.transport.records import KOMBU_UNACKED_KEY, records_key
from tests.conftest import wait_until

OPERATOR = Actor("alice", "console:test")


def endpoints_with_letters(receiver: Receiver, count: int, per_endpoint: int, rate: str
                           ) -> dict[str, set[str]]:
    """``count`` endpoints at ``rate``, each with ``per_endpoint`` dead letters (reason
    ``expired``); returns each endpoint's event ids."""
    registry, queue = EndpointRegistry(), DeadLetterQueue()
    events: dict[str, set[str]] = {}
    now = time.time()
    for _ in range(count):
        endpoint_id = f"bulk-{uuid.uuid4().hex[:8]}"
        registry.add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))),
                     rate=rate)
        letters = [DeadLetter(endpoint_id, f"ev-{n:04d}", "order.paid", {"n": n}, "expired",
                              attempts=4, last_status=503, dead_lettered_at=now - 600 + n)
                   for n in range(per_endpoint)]
        queue._write(letters)
        events[endpoint_id] = {letter.event_id for letter in letters}
    return events


def arrivals(receiver: Receiver, endpoint_id: str) -> list[tuple[str, float]]:
    return [(request.webhook_id, request.at) for request in receiver.requests_to(f"/{endpoint_id}")]


@pytest.mark.usefixtures("worker")
def test_500_dead_letters_replayed_in_bulk_arrive_once_each_within_the_rate_limit(
        receiver: Receiver) -> None:
    events = endpoints_with_letters(receiver, 5, 100, "50/s")
    query = DeadLetterQuery(reason="expired")
    assert dead_letters.count(OPERATOR, query) == 500  # the dry run
    job_id = replay_jobs.start_bulk_replay(OPERATOR, query)
    assert replay_jobs.job(OPERATOR, job_id).total == 500
    done = wait_until(lambda: (job := replay_jobs.job(OPERATOR, job_id)).finished and job,
                      timeout=60, what=lambda: replay_jobs.job(OPERATOR, job_id))
    assert (done.state, done.replayed, done.skipped) == ("done", 500, 0)
    assert dead_letters.count(OPERATOR, query) == 0
    wait_until(lambda: sum(len(arrivals(receiver, e)) for e in events) >= 500, timeout=60,
               what=lambda: sum(len(arrivals(receiver, e)) for e in events))
    time.sleep(1)  # nothing more is coming
    for endpoint_id, event_ids in events.items():
        got = arrivals(receiver, endpoint_id)
        assert Counter(webhook_id for webhook_id, _ in got) == Counter(event_ids)  # once each
        times = sorted(at for _, at in got)
        assert times[-1] - times[0] >= 1.5  # 100 at 50/s: about 2 s
        busiest = max(sum(1 for t in times if start <= t < start + 1) for start in times)
        assert busiest <= 50 + 10  # the rate, its burst and a little timing slack


@pytest.mark.usefixtures("worker")
def test_a_cancelled_bulk_replay_stops_and_leaves_the_rest_in_the_queue(
        receiver: Receiver) -> None:
    events = endpoints_with_letters(receiver, 1, 200, "5/s")  # 40 s of replay
    (endpoint_id, event_ids), = events.items()
    query = DeadLetterQuery(endpoint=endpoint_id)
    job_id = replay_jobs.start_bulk_replay(OPERATOR, query)
    wait_until(lambda: replay_jobs.job(OPERATOR, job_id).replayed > 0, timeout=20)
    cancelled = replay_jobs.cancel(OPERATOR, job_id)
    assert cancelled.state == "cancelled"
    time.sleep(6)  # longer than a batch's look ahead: a batch begun before the cancel ends
    stopped = replay_jobs.job(OPERATOR, job_id)
    assert stopped.state == "cancelled"
    assert 0 < stopped.replayed <= cancelled.replayed + 27 < 200  # at most that batch (5 s)
    time.sleep(6)
    assert replay_jobs.job(OPERATOR, job_id).replayed == stopped.replayed  # and no other
    left = dead_letters.count(OPERATOR, query)
    assert left == 200 - stopped.replayed - stopped.skipped
    # What was handed over before the cancel arrives, once each; nothing else does.
    wait_until(lambda: len(arrivals(receiver, endpoint_id)) >= stopped.replayed, timeout=30)
    time.sleep(1.5)
    got = Counter(webhook_id for webhook_id, _ in arrivals(receiver, endpoint_id))
    assert sum(got.values()) == stopped.replayed and max(got.values()) == 1
    remaining = {entry.event_id for entry in dead_letters.find(OPERATOR, query)}
    assert remaining | set(got) == event_ids and not remaining & set(got)


def replay_job_messages_held(client: Any) -> int:
    """Messages of the bulk replay task a worker holds (taken, not yet acknowledged): in the
    records set beside kombu's ``unacked`` hash, and in the hash itself."""
    held = [member for member in client.zrange(records_key(KOMBU_UNACKED_KEY), 0, -1)]
    held += list(client.hvals(KOMBU_UNACKED_KEY))
    return sum(1 for item in held if REPLAY_JOB_TASK_NAME in str(item))


@pytest.mark.usefixtures("worker")
def test_a_waiting_bulk_replay_holds_no_worker_slot(receiver: Receiver) -> None:
    """Between two batches the job's task has ended: no worker holds its message, the job's
    lease is free, and its next run waits in the retry schedule (not in a worker)."""
    events = endpoints_with_letters(receiver, 1, 60, "5/s")  # 12 s: batches 5 s apart
    (endpoint_id, event_ids), = events.items()
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint=endpoint_id))
    wait_until(lambda: replay_jobs.job(OPERATOR, job_id).replayed > 0, timeout=20)
    client, jobs, schedule = store.client(), ReplayJobs(), RetrySchedule()
    samples = []
    for _ in range(12):  # about 3 s of a 5 s wait between two batches
        if replay_jobs.job(OPERATOR, job_id).finished:
            break
        parked = {retry.id for retry in schedule.scheduled(CONTINUATIONS)}
        lease_until = float(jobs.redis.hget(keys.replay_job_key(job_id), "lease_until") or 0)
        samples.append((replay_job_messages_held(client), next_run_id(job_id) in parked,
                        lease_until <= time.time()))
        time.sleep(0.25)
    waiting = [sample for sample in samples if sample == (0, True, True)]
    assert len(waiting) >= len(samples) - 2 and len(samples) >= 8, samples
    done = wait_until(lambda: (job := replay_jobs.job(OPERATOR, job_id)).finished and job,
                      timeout=40, what=lambda: replay_jobs.job(OPERATOR, job_id))
    assert (done.state, done.replayed) == ("done", 60)
    assert next_run_id(job_id) not in {retry.id for retry in schedule.scheduled(CONTINUATIONS)}
    wait_until(lambda: len(arrivals(receiver, endpoint_id)) >= 60, timeout=30)
    assert Counter(webhook_id for webhook_id, _ in arrivals(receiver, endpoint_id)) == Counter(
        event_ids)
