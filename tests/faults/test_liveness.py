"""Worker liveness against real workers, a real Redis and a loopback receiver: a killed worker's
attempts come back in seconds (not after the visibility timeout), a live worker's slow
attempts are never taken from it, and a worker paused past its liveness window cannot settle
what was given to another (hookline/transport/liveness.py)."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from examples.receiver import Behaviour, Reply, always
from hookline.store.endpoints import EndpointRegistry
from hookline.store.history import AttemptHistory
from hookline.transport.liveness import registry
from tests.conftest import flushed, isolated_url, wait_until
from tests.support.queue import delivered, enqueue

ISOLATED_URL = isolated_url(12)


@pytest.fixture
def isolated():
    yield from flushed(ISOLATED_URL)


def first_slow(delay: float) -> Behaviour:
    """Each event's first request is answered after ``delay`` seconds, later ones at once."""
    return lambda attempt: Reply(204, delay=delay) if attempt == 1 else Reply(204)


def test_a_killed_workers_attempts_are_delivered_in_seconds_by_a_live_one(
        isolated, receiver, start_worker):
    """kill -9 of a worker holding 64 attempts in flight (the receiver answers after 3 s),
    with a second worker alive and the default settings: every event is delivered long
    before the visibility timeout (300 s); nothing is lost, and a second request goes only
    for events whose first had reached the receiver (same webhook-id)."""
    endpoint = EndpointRegistry(isolated).add(
        "slow", receiver.route("/slow", always(Reply(204, delay=3))))
    env = {"REDIS_URL": ISOLATED_URL, "HOOKLINE_READ_TIMEOUT": "10"}
    first = start_worker("alive-1", concurrency=64, extra_env=env)
    event_ids = enqueue(isolated, endpoint.id, 64)
    assert receiver.wait_for(lambda _: receiver.in_flight["/slow"] >= 64, timeout=30)
    start_worker("alive-2", concurrency=64, extra_env=env)
    reached = {r.webhook_id for r in receiver.received}
    first.process.kill()
    killed = time.monotonic()
    first.process.wait(10)
    wait_until(lambda: delivered(isolated, endpoint.id, event_ids) == 64, timeout=60,
               )
    took = time.monotonic() - killed
    received = Counter(r.webhook_id for r in receiver.received)
    assert set(received) == set(event_ids)
    assert {event_id for event_id, n in received.items() if n > 1} <= reached
    assert max(received.values()) <= 2
    print(f"\nkill -9 with 64 in flight: all delivered {took:.1f}s after the kill")
    assert took < 60  # the visibility timeout would have taken 300 s and more
    state = registry(isolated)
    assert state["declared_dead"] == 1 and state["restored"] == 64
    assert len(state["live"]) == 1
    # The dead worker's 64 attempts gave their in-flight counts back, leases and all: no share
    # leaked.
    wait_until(lambda: isolated.hget(f"hookline:{{{endpoint.id}}}:endpoint", "inflight")
               in (None, "0") and not isolated.zcard(f"hookline:{{{endpoint.id}}}:leases"),
               timeout=10)


def test_a_live_worker_waiting_on_a_slow_receiver_is_never_declared_dead(
        isolated, receiver, start_worker):
    """Two live workers, a receiver that answers after 40 s and a read timeout of 60 s: every
    event is sent exactly once (no live worker's message is restored, however long its
    attempt runs)."""
    endpoint = EndpointRegistry(isolated).add(
        "glacial", receiver.route("/glacial", always(Reply(204, delay=40))))
    env = {"REDIS_URL": ISOLATED_URL, "HOOKLINE_READ_TIMEOUT": "60"}
    start_worker("patient-1", concurrency=16, extra_env=env)
    start_worker("patient-2", concurrency=16, extra_env=env)
    event_ids = enqueue(isolated, endpoint.id, 24)
    wait_until(lambda: delivered(isolated, endpoint.id, event_ids) == 24, timeout=120,
               )
    received = Counter(r.webhook_id for r in receiver.received)
    assert received == Counter(event_ids)  # each exactly once
    assert registry(isolated)["declared_dead"] == 0


def test_a_worker_paused_past_its_window_cannot_settle_what_another_delivered(
        isolated, receiver, start_worker):
    """SIGSTOP a worker while its 8 attempts wait on the receiver, past its liveness window:
    the other worker restores and delivers them. SIGCONT: the answers the paused worker then
    reads are refused at settle (nothing recorded twice), nothing is sent a third time, and the
    resumed worker registers anew and delivers again."""
    endpoint = EndpointRegistry(isolated).add(
        "paused", receiver.route("/paused", first_slow(8)))
    env = {"REDIS_URL": ISOLATED_URL, "HOOKLINE_READ_TIMEOUT": "15",
           "HOOKLINE_LIVENESS_WINDOW": "2",
           "HOOKLINE_HEARTBEAT_INTERVAL": "0.5"}
    first = start_worker("fenced-1", concurrency=8, extra_env=env)
    event_ids = enqueue(isolated, endpoint.id, 8)
    assert receiver.wait_for(lambda _: receiver.in_flight["/paused"] >= 8, timeout=30)
    second = start_worker("fenced-2", concurrency=8, extra_env=env)
    first.process.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: delivered(isolated, endpoint.id, event_ids) == 8, timeout=30,
                   )
    finally:
        first.process.send_signal(signal.SIGCONT)
    # The paused worker's requests are answered 8 s after they arrived; it reads the answers
    # once resumed, and its settles find the records restored.
    # The settles' lines and the heartbeat's come from different threads, in either order.
    wait_until(lambda: first.output().count("delivery.fenced") >= 8
               and "worker.fenced" in first.output(), timeout=30)
    received = Counter(r.webhook_id for r in receiver.received)
    assert set(received) == set(event_ids) and max(received.values()) == 2
    history = AttemptHistory(isolated)
    for event_id in event_ids:
        # the second worker's attempt only: the refused settle wrote nothing
        assert [a.outcome for a in history.attempts(endpoint.id, event_id)] == ["delivered"]
    # The resumed worker recovers: alone, it delivers a new event.
    second.stop()
    more = enqueue(isolated, endpoint.id, 1, prefix="after")
    wait_until(lambda: delivered(isolated, endpoint.id, more) == 1, timeout=30,
               )
    assert first.process.poll() is None
    assert max(Counter(r.webhook_id for r in receiver.received).values()) == 2
    # The fenced attempts' counts and leases went with them: nothing is counted in flight.
    wait_until(lambda: isolated.hget(f"hookline:{{{endpoint.id}}}:endpoint", "inflight")
               in (None, "0") and not isolated.zcard(f"hookline:{{{endpoint.id}}}:leases"),
               timeout=10)


def test_an_endpoint_capped_at_five_never_has_more_in_flight_across_three_workers(
        isolated, receiver, start_worker):
    """``--max-in-flight 5``: three workers, 60 events, a receiver answering after 0.2 s that
    counts its concurrent requests: never more than 5, and every event delivered."""
    registry_ = EndpointRegistry(isolated)
    endpoint = registry_.add("capped", receiver.route("/capped", always(Reply(204, delay=0.2))),
                             max_in_flight=5)
    env = {"REDIS_URL": ISOLATED_URL}
    for n in range(3):
        start_worker(f"capped-{n}", concurrency=16, extra_env=env)
    event_ids = enqueue(isolated, endpoint.id, 60)
    wait_until(lambda: delivered(isolated, endpoint.id, event_ids) == 60, timeout=60)
    assert receiver.most_in_flight["/capped"] <= 5
    assert receiver.most_in_flight["/capped"] >= 2  # it did run attempts side by side
    assert Counter(r.webhook_id for r in receiver.received) == Counter(event_ids)
    wait_until(lambda: isolated.hget(f"hookline:{{{endpoint.id}}}:endpoint", "inflight")
               in (None, "0"), timeout=10, )


def test_a_slow_endpoints_backlog_does_not_hold_back_a_fast_endpoint(
        isolated, receiver, start_worker):
    """A slow but healthy endpoint (2 s per answer) with 400 events queued ahead of 100 for a
    fast one, one worker with the default 512 slots: the fast endpoint's events are all
    delivered while most of the slow backlog still waits (before, every slot waited on the
    slow endpoint)."""
    endpoints = EndpointRegistry(isolated)
    slow = endpoints.add("slowpoke", receiver.route("/slowpoke", always(Reply(204, delay=2))))
    fast = endpoints.add("quick", receiver.route("/quick", always(Reply(204))))
    slow_ids = enqueue(isolated, slow.id, 400, prefix="slow")
    fast_ids = enqueue(isolated, fast.id, 100, prefix="fast")
    start_worker("fair", concurrency=512,  # the default
                 extra_env={"REDIS_URL": ISOLATED_URL, "HOOKLINE_READ_TIMEOUT": "10"})
    wait_until(lambda: delivered(isolated, fast.id, fast_ids) == 100, timeout=60,
               )
    assert delivered(isolated, slow.id, slow_ids) < 200


def test_a_fast_endpoints_backlog_does_not_hold_back_another_endpoints_first_event(
        isolated, receiver, start_worker):
    """2,000 events of an endpoint that answers at once queued ahead of one event for another:
    the other's event is delivered while most of the backlog still waits (the consumer sets
    a backlog aside per endpoint and serves the endpoints by their counts)."""
    endpoints = EndpointRegistry(isolated)
    busy = endpoints.add("busy", receiver.route("/busy", always(Reply(204))))
    other = endpoints.add("other", receiver.route("/other", always(Reply(204))))
    busy_ids = enqueue(isolated, busy.id, 2000, prefix="busy")
    [other_id] = enqueue(isolated, other.id, 1, prefix="other")
    start_worker("digger", concurrency=512, extra_env={"REDIS_URL": ISOLATED_URL})
    assert receiver.wait_for(lambda got: any(r.webhook_id == other_id for r in got), 60)
    arrived_before = sum(1 for r in receiver.received if r.path == "/busy")
    assert arrived_before < 1000, arrived_before
    wait_until(lambda: delivered(isolated, busy.id, busy_ids) == 2000, timeout=90)
    received = Counter(r.webhook_id for r in receiver.received)
    assert received == Counter([*busy_ids, other_id])  # every one, once, none lost
    busy_order = [r.webhook_id for r in receiver.received if r.path == "/busy"]
    assert len(busy_order) == 2000
