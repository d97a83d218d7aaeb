"""Pause and resume (``hookline endpoint pause|resume``): a paused endpoint's deliveries wait in
the retry schedule, parked by the broker's consume script before any worker takes them; no
attempt is used, nothing is dead-lettered; on resume they go out in the order they came in,
within the endpoint's rate limit. Paused time does not count against max_age; a caller's
deadline still holds. Real Redis (a database of its own), a real worker, real HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.core import config
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import PAUSE_PARK, EndpointRegistry
from hookline.store.gates import Gate
from hookline.store.history import AttemptHistory
from hookline.store.schedule import RetrySchedule
from tests.conftest import emptied, isolated_url, wait_until
from tests.support.cli import json_out, succeeds
from tests.support.windows import busiest_window

#: A database of its own: only this test's worker (one slot, so order is observable) sees it.
URL = isolated_url(10)
#: How long the endpoint stays paused (the issue's number).
PAUSE = 30.0


@pytest.fixture
def private() -> Iterator[redis.Redis]:
    client = emptied(URL)
    config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL})
    yield client
    config.configure()
    emptied(URL).close()


def scheduled(endpoint_id: str) -> dict[str, float]:
    return {r.event_id: r.due for r in RetrySchedule().scheduled(endpoint_id)}


def test_a_paused_endpoint_gets_nothing_loses_nothing_then_everything_in_order(
        receiver, start_worker, private):
    worker = start_worker("pause", concurrency=1, extra_env={"REDIS_URL": URL})
    # Two events fail their first attempt: their retries are scheduled (5 s on) when the
    # pause begins. max_age 10 s: only because paused time does not count are they retried
    # again after a second failure once resumed. (Four failures in a row: the breaker, at
    # five, stays closed.)
    endpoint = EndpointRegistry().add(
        "paused-ep", receiver.route("/paused", always(Reply(500))), rate="4/s",
        retry_policy={"initial_backoff": 5, "max_backoff": 5, "max_age": 10, "jitter": 0})
    before = [send_webhook(endpoint.id, "order.created", {"n": n}, f"pre-{n}") for n in range(2)]
    wait_until(lambda: len(receiver.requests_to("/paused")) == 2
               and len(scheduled(endpoint.id)) == 2, timeout=15)
    # From now on: a second attempt fails, every other one succeeds.
    receiver.route("/paused", lambda attempt: Reply(500 if attempt == 2 else 204))

    succeeds("endpoint", "pause", endpoint.id)
    paused_at = time.monotonic()
    shown = json_out("endpoint", "show", endpoint.id)
    assert shown["paused"] is True and shown["paused_at"]
    assert json_out("stats")["paused"] == [endpoint.id]
    # The retries come due during the pause: the consume script parks them again, a month out.
    far = time.time() + PAUSE_PARK - 3600
    wait_until(lambda: all(due > far for due in scheduled(endpoint.id).values()), timeout=15)
    during = []
    for n in range(10):
        during.append(send_webhook(endpoint.id, "order.created", {"n": n}, f"during-{n}"))
        time.sleep(0.05)  # distinct arrival times: the order to keep

    # Nothing reaches the receiver for the whole pause (a wait for a request that must not come).
    left = PAUSE - (time.monotonic() - paused_at)
    assert not receiver.wait_for(lambda got: len([r for r in got if r.path == "/paused"]) > 2,
                                 timeout=left)
    retries = {r.event_id: r for r in RetrySchedule().scheduled(endpoint.id)}
    assert sorted(retries) == sorted(before + during)
    assert all(retries[e].due > far for e in retries)
    assert [retries[e].attempts for e in before] == [1, 1]  # no attempt used while paused
    assert [retries[e].attempts for e in during] == [0] * 10
    assert DeadLetterQueue().stats().total == 0
    log = worker.output()
    assert "reason=paused" in log and "by=consumer" in log
    assert not any(f"Task hookline.deliver[{e}] received" in log for e in during)

    resumed = time.time()
    assert "12 held deliveries due now" in succeeds("endpoint", "resume", endpoint.id).output
    gate = Gate()
    wait_until(lambda: all(gate.is_delivered(endpoint.id, e) for e in before + during),
               timeout=40, what=lambda: scheduled(endpoint.id))
    after = [r for r in receiver.requests_to("/paused") if r.at >= resumed]
    firsts = list(dict.fromkeys(r.webhook_id for r in after))
    # In the order they came due: the retries (due before the others were sent), then the new
    # events as they were sent.
    assert firsts == before + during
    assert busiest_window([r.at for r in after]) <= 4 + 1  # 4/s, burst 1
    assert DeadLetterQueue().stats().total == 0
    # The retried ones failed once more after resume (age 30+ s, max_age 10 s) and were
    # retried again, not dead-lettered: the paused time was left out of their age.
    assert [len(AttemptHistory().attempts(endpoint.id, e)) for e in before] == [3, 3]
    assert json_out("endpoint", "show", endpoint.id)["paused"] is False


def test_a_deadline_that_passes_during_a_pause_dead_letters_the_event_on_resume(
        receiver, start_worker, private):
    start_worker("pause-deadline", concurrency=1, extra_env={"REDIS_URL": URL})
    endpoint = EndpointRegistry().add("deadline-ep", receiver.route("/deadline",
                                                                    always(Reply(204))))
    succeeds("endpoint", "pause", endpoint.id)
    deadline = time.time() + 2
    late = send_webhook(endpoint.id, "order.created", {}, "late-1", deadline=deadline)
    kept = send_webhook(endpoint.id, "order.created", {}, "kept-1")
    wait_until(lambda: len(scheduled(endpoint.id)) == 2, timeout=10)
    wait_until(lambda: time.time() > deadline + 0.1, timeout=5)
    assert DeadLetterQueue().stats().total == 0  # not while paused
    succeeds("endpoint", "resume", endpoint.id)
    entry = wait_until(lambda: DeadLetterQueue().get(f"{endpoint.id}/{late}"), timeout=15)
    assert entry.reason == "expired" and "deadline" in entry.detail
    wait_until(lambda: Gate().is_delivered(endpoint.id, kept), timeout=15)
    assert [r.webhook_id for r in receiver.requests_to("/deadline")] == [kept]


def test_pause_and_resume_of_an_unknown_endpoint_fail_plainly(private):
    from tests.support.cli import fails

    assert "no endpoint 'nope'" in fails("endpoint", "pause", "nope").output
    assert "no endpoint 'nope'" in fails("endpoint", "resume", "nope").output


def test_resume_of_an_endpoint_not_paused_changes_nothing(private, receiver):
    endpoint = EndpointRegistry().add("never-paused", receiver.route("/np", always(Reply(204))))
    assert "0 held deliveries" in succeeds("endpoint", "resume", endpoint.id).output
    succeeds("endpoint", "pause", endpoint.id)
    succeeds("endpoint", "pause", endpoint.id)  # twice: still one pause
    assert EndpointRegistry().require(endpoint.id).paused
    succeeds("endpoint", "resume", endpoint.id)
    again = EndpointRegistry().require(endpoint.id)
    assert not again.paused and len(again.pauses) == 1
