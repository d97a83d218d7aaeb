"""The worker's memory of held endpoints (the cheap deferral) and the hold the engine reports,
with a fixed clock."""

from __future__ import annotations

import random

from hookline.delivery.engine import (
    PROBE_LOOK,
    Deferred,
    DeliveryRequest,
    hold_countdown,
)
from hookline.worker.held import MAX_REMEMBERED, REMEMBER_AT_MOST, HeldEndpoints

REQUEST = DeliveryRequest(endpoint_id="ep", event_type="t", payload={}, event_id="e1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_endpoint_hold_is_remembered_for_as_long_as_the_gate_said():
    clock = Clock()
    held = HeldEndpoints(clock)
    held.remember("ep", Deferred(4.2, "breaker_open", REQUEST, hold=4.0))
    assert held.held("ep") == ("breaker_open", 4.0)
    clock.now += 3.5
    assert held.held("ep") == ("breaker_open", 0.5)
    clock.now += 0.5
    assert held.held("ep") is None
    assert held.held("other") is None


def test_a_long_hold_is_remembered_only_briefly_so_a_breaker_reset_is_seen_soon():
    clock = Clock()
    held = HeldEndpoints(clock)
    held.remember("ep", Deferred(31.2, "breaker_open", REQUEST, hold=30.0))
    assert held.held("ep") == ("breaker_open", REMEMBER_AT_MOST)
    clock.now += REMEMBER_AT_MOST
    assert held.held("ep") is None  # the next delivery asks the gate again


def test_a_deferral_of_one_event_holds_nothing():
    held = HeldEndpoints(Clock())
    held.remember("ep", Deferred(0.4, "rate_limited", REQUEST))
    held.remember("ep", Deferred(3.0, "in_flight", REQUEST))
    assert held.held("ep") is None


def test_the_memory_is_bounded_and_forgets_the_oldest():
    held = HeldEndpoints(Clock())
    for n in range(MAX_REMEMBERED + 1):
        held.remember(f"ep{n}", Deferred(5, "blocked", REQUEST, hold=5))
    assert held.held("ep0") is None
    assert held.held(f"ep{MAX_REMEMBERED}") == ("blocked", 5)


def test_a_held_events_countdown_reaches_past_the_hold_with_jitter_and_probes_look_soon():
    rng = random.Random(7)
    for _ in range(200):
        assert 30.0 <= hold_countdown("breaker_open", 30.0, rng) <= 34.0
        assert 20.0 <= hold_countdown("blocked", 20.0, rng) <= 23.0
        assert 0.1 <= hold_countdown("breaker_probe", 40.0, rng) <= PROBE_LOOK + 1.0
