"""A worker killed with SIGKILL in the middle of a bulk replay job: the job's task, acknowledged
late, comes back to another worker, which takes the job's lease once the killed one's runs out
and resumes at the recorded cursor. Every dead letter arrives under its own webhook-id, the job
replays none twice (a second copy only of a delivery the killed worker had in flight), and its
progress reaches the total.

Own Redis database and workers, so the session worker takes no part."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter

import pytest

from examples.receiver import Reply, always
from hookline.core import config
from hookline.service import dead_letters, replay_jobs
from hookline.service.actor import Actor
from hookline.service.dead_letters import DeadLetterQuery
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import emptied, isolated_url, wait_until

URL = isolated_url(11)
ENV = {"REDIS_URL": URL, "CELERY_VISIBILITY_TIMEOUT": "20"}
OPERATOR = Actor("alice", "console:crash-test")
ENDPOINTS, PER_ENDPOINT, RATE = 2, 200, "10/s"  # 20 s of replay


@pytest.fixture
def isolated():
    client = emptied(URL)
    config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL})
    yield client
    config.configure()
    emptied(URL).close()
    client.close()


def test_sigkill_during_a_bulk_replay_resumes_and_replays_no_entry_twice(
        isolated, receiver, start_worker):
    registry, queue = EndpointRegistry(), DeadLetterQueue()
    expected = set()
    now = time.time()
    for _ in range(ENDPOINTS):
        endpoint_id = f"crash-{uuid.uuid4().hex[:8]}"
        registry.add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))),
                     rate=RATE)
        queue._write([DeadLetter(endpoint_id, f"ev-{n:04d}", "order.paid", {"n": n},
                                 "exhausted", attempts=4, dead_lettered_at=now - 900 + n)
                      for n in range(PER_ENDPOINT)])
        expected |= {(endpoint_id, f"ev-{n:04d}") for n in range(PER_ENDPOINT)}
    total = ENDPOINTS * PER_ENDPOINT
    first = start_worker("bulk-1", concurrency=4, extra_env=ENV)
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(reason="exhausted"))
    wait_until(lambda: replay_jobs.job(OPERATOR, job_id).replayed >= 150, timeout=30,
               what=lambda: replay_jobs.job(OPERATOR, job_id))
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    interrupted = replay_jobs.job(OPERATOR, job_id)
    assert interrupted.state == "running" and interrupted.replayed < total, (
        "the job ended before the kill: nothing was interrupted")
    start_worker("bulk-2", concurrency=4, extra_env=ENV)
    done = wait_until(lambda: (job := replay_jobs.job(OPERATOR, job_id)).finished and job,
                      timeout=90, what=lambda: replay_jobs.job(OPERATOR, job_id))
    assert (done.state, done.replayed, done.skipped, done.total) == ("done", total, 0, total)
    assert dead_letters.count(OPERATOR, DeadLetterQuery()) == 0

    def received() -> Counter[tuple[str, str]]:
        return Counter((r.path.lstrip("/"), r.headers["webhook-id"]) for r in receiver.received)

    wait_until(lambda: set(received()) == expected, timeout=60,
               what=lambda: len(set(received())))
    time.sleep(1)
    duplicates = {pair: n for pair, n in received().items() if n > 1}
    print(f"\nSIGKILL after {interrupted.replayed}/{total} replayed: "
          f"{len(duplicates)} sent twice (in flight at the kill)")
    assert set(received()) == expected
    assert len(duplicates) <= 4 and max(received().values()) <= 2
