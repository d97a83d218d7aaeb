"""Looking an event up without naming its endpoint: one pass through the keys and the
dead-letter and schedule hashes finds every endpoint with a trace of it and its publication;
with a time budget (the console's) the search stops when it is spent and says so, so that a
page answers in bounded time whatever the number of keys."""

from __future__ import annotations

import time

from hookline.service import events
from hookline.service.actor import Actor
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule

ALICE = Actor(name="alice", session="s")


def seed(quiet_redis) -> None:
    registry = EndpointRegistry()
    for endpoint_id in ("ep-a", "ep-b", "ep-c"):
        registry.add(endpoint_id, f"http://127.0.0.1:9/{endpoint_id}")
    DeadLetterQueue().add(DeadLetter("ep-a", "ev-1", "order.paid", {"n": 1}, "exhausted",
                                     attempts=3, dead_lettered_at=time.time()))
    RetrySchedule().park(endpoint_id="ep-b", event_id="ev-1", countdown=60, message="{}")
    pipe = quiet_redis.pipeline(transaction=False)
    for n in range(5000):  # keys the search looks through
        pipe.set(f"hookline:{{ep-x{n}}}:done:other-{n}", "1")
    pipe.execute()


def test_an_event_is_found_at_every_endpoint_without_naming_one(quiet_redis) -> None:
    seed(quiet_redis)
    for budget in (None, 10.0):
        report = events.find_event(ALICE, "ev-1", budget=budget)
        assert report.complete and report.found
        assert sorted((d.endpoint_id, d.state) for d in report.deliveries) == [
            ("ep-a", "dead_lettered"), ("ep-b", "scheduled")]
    direct = events.find_event(ALICE, "ev-1", endpoint="ep-a")
    assert [d.endpoint_id for d in direct.deliveries] == ["ep-a"] and direct.complete
    assert events.find_event(ALICE, "ev-404", budget=10.0).found is False


def test_a_search_out_of_budget_stops_and_says_so(quiet_redis, monkeypatch) -> None:
    seed(quiet_redis)
    monkeypatch.setattr(events, "SCAN_COUNT", 100)
    started = time.monotonic()
    report = events.find_event(ALICE, "ev-1", budget=0.0)
    assert time.monotonic() - started < 1.0
    assert report.complete is False  # stopped after its first step through the keys
    assert events.find_event(ALICE, "ev-1").complete  # the CLI's: to the end
