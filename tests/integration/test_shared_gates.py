"""Gates shared by every worker, end to end: several worker processes, one receiver.

Worker settings (tests/conftest.py): breaker threshold 5, cool-down 1.5 s doubling to 4 s.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from examples.receiver import Reply, always, in_order
from hookline import send_webhook
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until
from tests.support.windows import busiest_window

pytestmark = pytest.mark.usefixtures("worker")


def new_endpoint(receiver, behaviour, **options):
    endpoint_id = f"ep-{uuid.uuid4().hex[:10]}"
    return EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", behaviour),
                                  **options)


def test_three_workers_keep_one_receivers_rate(receiver_process, start_worker):
    start_worker("rate-2", concurrency=8)
    start_worker("rate-3", concurrency=8)  # with the session worker: three processes
    base_url, requests = receiver_process
    endpoint = EndpointRegistry().add("rate-limited", f"{base_url}/ok", rate="20/s")  # burst 2
    event_ids = [send_webhook(endpoint.id, "order.created", {"n": n}) for n in range(300)]
    wait_until(lambda: len(requests()) >= 300, timeout=40)
    received = requests()
    times = [r["at"] for r in received]
    assert sorted(r["webhook_id"] for r in received) == sorted(event_ids)
    assert busiest_window(times) <= 20 + endpoint.effective_burst()
    drain = max(times) - min(times)
    assert drain >= 299 / 20 - 0.1  # could not have gone faster than the budget
    assert drain < 299 / 20 * 1.3, f"drained in {drain:.1f}s, ideal {299 / 20:.1f}s"


def test_open_breaker_stops_requests_then_lets_exactly_one_probe(receiver, start_worker):
    start_worker("breaker-2", concurrency=8)
    failing = new_endpoint(receiver, always(Reply(503)))
    healthy = new_endpoint(receiver, always(Reply(204)))
    for n in range(12):
        send_webhook(failing.id, "order.created", {"n": n})
    gate = Gate()
    wait_until(lambda: gate.breaker_status(failing.id).state == "open", timeout=15)
    breaker = store.client().hgetall(keys.breaker_key(failing.id))
    opened_at = int(breaker["opened_at"]) / 1000
    first_open_until = int(breaker["open_until"]) / 1000

    # Meanwhile a healthy endpoint's events flow.
    healthy_ids = [send_webhook(healthy.id, "order.created", {}) for _ in range(5)]
    wait_until(lambda: all(gate.is_delivered(healthy.id, e) for e in healthy_ids), timeout=5)

    # The probe fails (503): the breaker reopens with twice the cool-down.
    wait_until(lambda: float(store.client().hget(keys.breaker_key(failing.id), "opened_at")
                             or 0) / 1000 > opened_at, timeout=15)
    second = store.client().hgetall(keys.breaker_key(failing.id))
    reopened_at = int(second["opened_at"]) / 1000
    assert int(second["cooldown_ms"]) == 2 * int(breaker["cooldown_ms"])
    times = [r.at for r in receiver.requests_to(f"/{failing.id}")]
    # Attempts admitted before the breaker opened were in flight and may still arrive just
    # after it; nothing admitted later does.
    in_flight = 0.25
    late = [round(t - opened_at, 3) for t in times if opened_at + in_flight < t < first_open_until]
    assert late == [], f"requests {late}s after the breaker opened"
    # The reopening's time is the admit's Redis time plus the attempt's duration as the worker
    # measured it, in whole milliseconds; the receiver stamps the arrival on its own: on a
    # loaded machine the probe's arrival has read up to 4 ms later than the reopening it caused.
    probes = [t for t in times if first_open_until <= t <= reopened_at + 0.01]
    assert len(probes) == 1, (
        f"{len(probes)} probes during the half-open period; requests at "
        f"{[round(t - opened_at, 3) for t in times]}s after the opening, open until "
        f"+{first_open_until - opened_at:.3f}s, reopened at +{reopened_at - opened_at:.3f}s")


def test_deferred_events_keep_their_attempt_count(receiver, worker):
    endpoint = new_endpoint(receiver, always(Reply(503)), rate="4/s",
                            retry_policy={"max_attempts": 2, "initial_backoff": 0.1})
    event_ids = [send_webhook(endpoint.id, "order.created", {"n": n}) for n in range(4)]
    queue = DeadLetterQueue()
    entries = wait_until(lambda: all(queue.get(f"{endpoint.id}/{e}") for e in event_ids)
                         and [queue.get(f"{endpoint.id}/{e}") for e in event_ids], timeout=20)
    assert [entry.attempts for entry in entries] == [2, 2, 2, 2]
    assert [entry.reason for entry in entries] == ["exhausted"] * 4
    for event_id in event_ids:
        requests = [r for r in receiver.received if r.webhook_id == event_id]
        assert len(requests) == 2
    deferrals = re.findall(r"delivery\.deferred endpoint_id=\S+ event_id=(\S+) "
                           r"reason=rate_limited attempt=(\d)", worker.output())
    deferred_ids = {event_id for event_id, _ in deferrals}
    assert deferred_ids & set(event_ids), "no event was deferred by the rate limit"


def test_retry_after_on_one_event_holds_back_the_endpoints_others(receiver):
    endpoint = new_endpoint(receiver, in_order(Reply(429, headers={"Retry-After": "2"})))
    first = send_webhook(endpoint.id, "order.created", {"n": 1})
    assert receiver.wait_for(lambda got: len(got) == 1)
    throttled_at = receiver.received[0].at
    others = [send_webhook(endpoint.id, "order.created", {"n": n}) for n in range(3)]
    gate = Gate()
    wait_until(lambda: all(gate.is_delivered(endpoint.id, e) for e in [first, *others]),
               timeout=10)
    later = [r.at for r in receiver.received if r.webhook_id in others]
    assert len(later) == 3
    assert min(later) >= throttled_at + 2.0 - 0.05


def test_gone_dead_letters_already_scheduled_retries_without_sending(receiver):
    endpoint = new_endpoint(receiver, in_order(Reply(503), Reply(410)),
                            retry_policy={"initial_backoff": 1.5, "jitter": 0})
    waiting = send_webhook(endpoint.id, "order.created", {"n": 1})
    assert receiver.wait_for(lambda got: len(got) == 1)
    gone = send_webhook(endpoint.id, "order.created", {"n": 2})
    queue = DeadLetterQueue()
    assert wait_until(lambda: queue.get(f"{endpoint.id}/{gone}")).reason == "endpoint_gone"
    entry = wait_until(lambda: queue.get(f"{endpoint.id}/{waiting}"), timeout=10)
    assert (entry.reason, entry.attempts) == ("endpoint_gone", 1)
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 2


def test_a_failing_endpoints_retries_do_not_delay_a_healthy_endpoints_first_deliveries(
        receiver):
    from hookline.store.schedule import RetrySchedule
    from hookline.transport.envelope import build_message
    from hookline.worker.celery import worker_app

    failing = new_endpoint(receiver, always(Reply(503, delay=0.3)))
    healthy = new_endpoint(receiver, always(Reply(204)))
    schedule = RetrySchedule()
    for n in range(500):  # a backlog of retries, all due now
        event_id = f"backlog-{n}"
        schedule.park(endpoint_id=failing.id, event_id=event_id, countdown=0, message=build_message(
            worker_app, task_name="hookline.deliver", task_id=event_id,
            args=[failing.id, "order.created", {}], kwargs={"event_id": event_id, "attempts": 1},
            retries=1, queue="hookline.retry"))
    started = time.monotonic()
    healthy_ids = [send_webhook(healthy.id, "order.created", {"n": n}) for n in range(30)]
    gate = Gate()
    wait_until(lambda: all(gate.is_delivered(healthy.id, e) for e in healthy_ids), timeout=10)
    elapsed = time.monotonic() - started
    backlog = [r for r in receiver.received if r.path == f"/{failing.id}"]
    assert elapsed < 3.0, f"healthy deliveries took {elapsed:.1f}s behind the backlog"
    assert len(backlog) < 500  # the backlog was still there, not drained first
