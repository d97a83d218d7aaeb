"""Crashes and restarts lose no event: SIGKILL and SIGTERM of a worker mid-run, a Redis restart
with AOF while retries are scheduled. Each test has its own Redis database or server, its own
workers (visibility timeout 20 s, so a killed worker's messages come back within the test)."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from examples.receiver import Reply, always, fail_first
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule
from hookline.transport.records import UNACKED_RECORDS_KEY
from tests.conftest import PrivateRedis, flushed, isolated_url, wait_until
from tests.support.queue import delivered, enqueue

ISOLATED_URL = isolated_url(13)
CRASH_ENV = {"CELERY_VISIBILITY_TIMEOUT": "20"}


@pytest.fixture
def isolated():
    yield from flushed(ISOLATED_URL)


def run_with_interruption(isolated, receiver, start_worker, sig: int) -> tuple[list[str], Counter]:
    endpoint = EndpointRegistry(isolated).add(
        "crash", receiver.route("/crash", always(Reply(204, delay=0.05))))
    env = {"REDIS_URL": ISOLATED_URL, **CRASH_ENV}
    first = start_worker("crash-1", concurrency=16, extra_env=env)
    event_ids = enqueue(isolated, endpoint.id, 1000)
    assert receiver.wait_for(lambda got: len(got) >= 300, timeout=30)
    first.process.send_signal(sig)
    first.process.wait(60)
    if sig == signal.SIGKILL:
        # What the killed worker held is in the unacked records set only
        # (hookline/transport/unacked.py), for the second worker's sweep to restore.
        assert isolated.zcard(UNACKED_RECORDS_KEY) > 0
        assert not isolated.exists("unacked", "unacked_index")
    start_worker("crash-2", concurrency=16, extra_env=env)
    wait_until(lambda: delivered(isolated, endpoint.id, event_ids) == 1000, timeout=90)
    return event_ids, Counter(r.webhook_id for r in receiver.received)


def test_sigkill_mid_run_loses_nothing_and_resends_only_what_was_in_flight(
        isolated, receiver, start_worker):
    event_ids, received = run_with_interruption(isolated, receiver, start_worker,
                                                signal.SIGKILL)
    assert set(received) == set(event_ids)
    duplicates = {event_id: n for event_id, n in received.items() if n > 1}
    print(f"\nSIGKILL mid-run: 1000 delivered, {len(duplicates)} sent twice (in flight)")
    # Only attempts running at the kill (at most one per thread) can have reached the
    # receiver without their delivery being recorded.
    assert len(duplicates) <= 16 and max(received.values()) <= 2


def test_sigterm_mid_run_finishes_running_attempts_and_resends_nothing(
        isolated, receiver, start_worker):
    event_ids, received = run_with_interruption(isolated, receiver, start_worker,
                                                signal.SIGTERM)
    assert set(received) == set(event_ids)
    assert max(received.values()) == 1


def test_scheduled_retries_survive_a_redis_restart(tmp_path, receiver, start_worker):
    server = PrivateRedis(tmp_path)
    client = server.start()
    try:
        endpoint = EndpointRegistry(client).add(
            "restart", receiver.route("/restart", fail_first(1, Reply(503))),
            # Long enough that all 20 are parked well before the first is due, even on a
            # loaded machine: the check below is of a schedule not yet released.
            retry_policy={"initial_backoff": 10, "max_backoff": 10, "jitter": 0})
        # 20 failures would open the breaker (threshold 5 in the tests), whose deferrals come
        # and go from the schedule within a second or two: kept shut here, so that the 20
        # parked retries are all there is to count.
        start_worker("restart", concurrency=8,
                     extra_env={"REDIS_URL": server.url, "HOOKLINE_BREAKER_THRESHOLD": "100",
                                **CRASH_ENV})
        event_ids = enqueue(client, endpoint.id, 20)
        schedule = RetrySchedule(client)
        wait_until(lambda: schedule.stats().total == 20, timeout=20)
        server.shutdown()  # AOF on: the schedule is on disk
        client = server.start()
        assert RetrySchedule(client).stats().total in (20, 0)  # released already, or waiting
        wait_until(lambda: delivered(client, endpoint.id, event_ids) == 20, timeout=60)
        assert Counter(r.webhook_id for r in receiver.received) == dict.fromkeys(event_ids, 2)
    finally:
        server.stop()
