"""Endpoint health kept by the workers in memory and written in batches
(``hookline.worker.health``, ``hookline.store.health``): per-minute counts and latency
buckets that add up across workers, the latest 50 attempts, bounded memory while Redis is
away, a clean stop that writes what is left; and the service's reads of it (scoped, the
excerpts scrubbed), and the index of disabled endpoints the overview lists."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import redis

from hookline.core import latency
from hookline.service import endpoint_health
from hookline.service.actor import Actor, NotFound
from hookline.store import disabled, health
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import ATTEMPT_OBSERVERS, Gate
from hookline.store.history import AttemptRecord
from hookline.worker import health as worker_health
from hookline.worker.health import HealthTally

ALICE = Actor(name="alice", session="s")
TENANT = Actor(name="portal:shop", session="t", app_scope="shop")
#: The start of a health hash's first minute an hour or so ago (a past beyond a day expires).
T0 = float(health.slab_of(int(time.time() // 60) - 60) * 60)


def record(at: float, status: int | None, latency_s: float, *, attempt: int = 1,
           response: str = "") -> AttemptRecord:
    outcome = "delivered" if status is not None and 200 <= status < 300 else "failed"
    return AttemptRecord(attempt=attempt, at=at, outcome=outcome, status=status,
                         latency=latency_s, error="" if status else "timed out",
                         response=response)


def test_a_batch_adds_attempts_up_per_endpoint_and_minute() -> None:
    tally = HealthTally(interval=0)
    tally.observe("ep-a", "e1", record(T0 + 1, 200, 0.05))
    tally.observe("ep-a", "e2", record(T0 + 2, 500, 0.2))
    tally.observe("ep-a", "e3", record(T0 + 61, 200, 0.05))
    tally.observe("ep-b", "e4", record(T0 + 3, None, 1.0))
    batch = tally._batch
    minute = int(T0 // 60)
    assert batch.minutes[("ep-a", minute)].delivered == 1
    assert batch.minutes[("ep-a", minute)].failed == 1
    assert batch.minutes[("ep-a", minute + 1)].delivered == 1
    assert batch.minutes[("ep-b", minute)].fields(minute) == {
        f"{minute % 10}f": 1, f"{minute % 10}b{latency.bucket_of(1.0)}": 1}
    assert [seen.event_id for seen in batch.attempts["ep-a"]] == ["e1", "e2", "e3"]
    assert batch.failures == {"ep-a": T0 + 2, "ep-b": T0 + 3}


def test_a_write_is_one_round_trip_and_reads_back_the_minutes(redis_client) -> None:
    tally = HealthTally(interval=0)
    for n in range(30):
        tally.observe("ep-a", f"ok-{n}", record(T0 + n, 200, 0.04))
    for n in range(10):
        tally.observe("ep-a", f"bad-{n}", record(T0 + 30 + n, 503, 0.9))
    tally.observe("ep-a", "late", record(T0 + 600, 200, 0.04))  # the next slab
    sent = tally.flush()
    assert sent > 0 and tally.flush() == 0  # nothing left
    minute = int(T0 // 60)
    found = health.HealthReader(redis_client).minutes("ep-a", minute - 1, minute + 10)
    assert [m.attempts for m in found] == [0, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    first = found[1]
    assert (first.delivered, first.failed, first.success_rate) == (30, 10, 0.75)
    assert first.p50 == pytest.approx(0.04, rel=0.2)
    assert first.p95 == pytest.approx(0.9, rel=0.2)
    assert found[0].success_rate is None and found[0].p95 is None
    # Keys carry the endpoint's hash tag; a minute hash lives a day past its last minute.
    slab = health.slab_key("ep-a", health.slab_of(minute))
    assert slab.startswith("hookline:{ep-a}:")
    assert redis_client.object("encoding", slab) == "listpack"
    expires = redis_client.expiretime(slab)
    assert expires == health.slab_of(minute) * 60 + health.SLAB_TTL
    assert expires >= (minute + 10) * 60 + 24 * 3600
    assert 0 < redis_client.ttl(health.attempts_key("ep-a")) <= health.ATTEMPTS_TTL


def test_the_counts_of_several_workers_add_up(redis_client) -> None:
    tallies = [HealthTally(interval=0) for _ in range(3)]
    for n in range(90):
        tallies[n % 3].observe("ep-a", f"e{n}", record(T0 + n % 60, 200 if n % 10 else 500,
                                                        0.01 * (1 + n % 7)))
    for tally in tallies:
        tally.flush()
    found = health.HealthReader(redis_client).minutes("ep-a", int(T0 // 60), int(T0 // 60))[0]
    assert (found.delivered, found.failed) == (81, 9)
    assert sum(found.buckets.values()) == 90


def test_the_latest_50_attempts_are_kept_newest_first(redis_client) -> None:
    tally = HealthTally(interval=0)
    for n in range(70):
        tally.observe("ep-a", f"e{n}", record(T0 + n, 200, 0.01, attempt=1))
        if n == 30:
            tally.flush()
    tally.flush()
    seen = health.HealthReader(redis_client).attempts("ep-a")
    assert len(seen) == 50
    assert [item.event_id for item in seen[:3]] == ["e69", "e68", "e67"]
    assert seen[-1].event_id == "e20"
    assert redis_client.llen(health.attempts_key("ep-a")) == 50


class FailingClient:
    """A client whose pipelines fail as an unreachable Redis's do."""

    def pipeline(self, transaction: bool = True) -> Any:
        raise redis.ConnectionError("Redis is away")


def test_a_failed_write_keeps_its_counts_for_the_next(redis_client, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="hookline")  # whatever an earlier test set
    client: list[Any] = [FailingClient()]
    tally = HealthTally(interval=0, client=lambda: client[0])
    tally.observe("ep-a", "e1", record(T0, 200, 0.05))
    assert tally.flush() == 0
    assert tally.failed_writes == 1
    assert "health.write_failed" in caplog.text
    tally.observe("ep-a", "e2", record(T0 + 1, 500, 0.05))
    client[0] = redis_client
    assert tally.flush() > 0
    found = health.HealthReader(redis_client).minutes("ep-a", int(T0 // 60), int(T0 // 60))[0]
    assert (found.delivered, found.failed) == (1, 1)
    assert [s.event_id for s in health.HealthReader(redis_client).attempts("ep-a")] == [
        "e2", "e1"]


def test_memory_stays_bounded_while_redis_is_away(monkeypatch) -> None:
    monkeypatch.setattr(worker_health, "MOST_MINUTES", 20)
    monkeypatch.setattr(worker_health, "MOST_ENDPOINTS", 5)
    now = [T0]
    tally = HealthTally(interval=0, client=FailingClient, clock=lambda: now[0])
    for round_ in range(4):
        for n in range(10):
            tally.observe(f"ep-{round_}-{n}", "e", record(T0 + round_ * 60, 200, 0.01))
        tally.flush()
    assert len(tally._batch.minutes) <= 20 + 10
    assert len(tally._batch.attempts) <= 5 + 10
    assert tally.dropped > 0
    # Counts older than a day are dropped, whatever room there is.
    now[0] = T0 + 2 * 86400
    tally.flush()
    tally.observe("ep-new", "e", record(now[0], 200, 0.01))
    tally.flush()
    assert set(tally._batch.minutes) == {("ep-new", int(now[0] // 60))}


def test_the_thread_writes_every_interval_and_stop_writes_the_rest(redis_client) -> None:
    tally = HealthTally(interval=0.2)
    tally.observe("ep-a", "e1", record(time.time(), 200, 0.05))
    reader = health.HealthReader(redis_client)
    deadline = time.monotonic() + 5
    while not reader.attempts("ep-a") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [s.event_id for s in reader.attempts("ep-a")] == ["e1"]
    tally.observe("ep-a", "e2", record(time.time(), 200, 0.05))
    thread = tally._thread
    assert thread is not None and thread.is_alive()
    started = time.monotonic()
    tally.stop()
    assert time.monotonic() - started < 2
    assert not thread.is_alive()
    assert [s.event_id for s in reader.attempts("ep-a")] == ["e2", "e1"]


def test_a_stalled_write_never_holds_up_an_attempt() -> None:
    release = threading.Event()

    class StalledClient:
        def pipeline(self, transaction: bool = True) -> Any:
            release.wait(5)
            raise redis.TimeoutError("stalled")

    tally = HealthTally(interval=0, client=StalledClient)
    tally.observe("ep-a", "e0", record(T0, 200, 0.01))
    writer = threading.Thread(target=tally.flush)
    writer.start()
    time.sleep(0.1)
    started = time.monotonic()
    for n in range(100):
        tally.observe("ep-a", f"e{n + 1}", record(T0 + 1, 200, 0.01))
    assert time.monotonic() - started < 2.5  # well short of the write's 5 s stall
    release.set()
    writer.join(5)
    assert sum(c.delivered for c in tally._batch.minutes.values()) == 101


def test_settle_hands_each_attempt_to_the_observers_and_an_observer_error_is_contained(
        redis_client, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="hookline")  # whatever an earlier test set
    EndpointRegistry().add("ep-obs", "https://example.com/hook")
    seen: list[tuple[str, str, int | None]] = []

    def broken(endpoint_id: str, event_id: str, rec: AttemptRecord) -> None:
        raise RuntimeError("observer bug")

    ATTEMPT_OBSERVERS.extend([broken, lambda e, v, r: seen.append((e, v, r.status))])
    try:
        gate = Gate()
        assert gate.admit("ep-obs", "evt-1", "tok").verdict.value == "admitted"
        gate.settle("ep-obs", "evt-1", "tok", "delivered",
                    record=record(time.time(), 200, 0.02))
    finally:
        del ATTEMPT_OBSERVERS[-2:]
    assert seen == [("ep-obs", "evt-1", 200)]
    assert "attempt.observer_failed" in caplog.text


def test_service_reads_are_scoped_and_excerpts_scrubbed(redis_client) -> None:
    AppRegistry().add("shop")
    AppRegistry().add("other")
    EndpointRegistry().add("ep-shop", "https://example.com/in/tok_9f8e7d6c5b?key=sekrit123",
                           app="shop")
    EndpointRegistry().add("ep-other", "https://example.com/hook", app="other")
    tally = HealthTally(interval=0)
    now = time.time()
    tally.observe("ep-shop", "e1", record(now, 500, 0.3,
                                         response="no route for /in/tok_9f8e7d6c5b?key=sekrit123"))
    tally.observe("ep-other", "e2", record(now, 200, 0.01))
    tally.flush()
    attempts = endpoint_health.latest_attempts(TENANT, "ep-shop")
    assert [a.event_id for a in attempts] == ["e1"]
    assert "sekrit123" not in attempts[0].response
    assert "tok_9f8e7d6c5b" not in attempts[0].response
    minutes = endpoint_health.health_minutes(TENANT, "ep-shop", minutes=5, now=now)
    assert len(minutes) == 5 and minutes[-1].failed == 1
    for read in (endpoint_health.latest_attempts, endpoint_health.health_minutes):
        with pytest.raises(NotFound):
            read(TENANT, "ep-other")
    assert endpoint_health.last_hour(TENANT) is None


def test_the_disabled_index_lists_every_disabled_endpoint_and_drops_stale_members(
        redis_client) -> None:
    registry = EndpointRegistry()
    for n in range(5):
        registry.add(f"ep-{n}", "https://example.com/hook")
    registry.disable("ep-1", "broken receiver")
    registry.disable("ep-3")
    # A 410 disables inside settle.lua; the gate indexes it right after.
    gate = Gate()
    gate.admit("ep-4", "evt", "tok")
    gate.settle("ep-4", "evt", "tok", "gone", reason="gone: the receiver answered 410 Gone",
                record=record(time.time(), 410, 0.01))
    ids = [row["id"] for row in disabled.disabled(redis_client, limit=100)]
    assert sorted(ids) == ["ep-1", "ep-3", "ep-4"]
    troubled = endpoint_health.troubled_endpoints(ALICE)
    assert {item.endpoint_id: item.reason for item in troubled.disabled} == {
        "ep-1": "broken receiver", "ep-3": "disabled by operator",
        "ep-4": "gone: the receiver answered 410 Gone"}
    assert troubled.disabled_total == 3
    registry.enable("ep-1")
    registry.remove("ep-3")
    redis_client.zadd(disabled.DISABLED_KEY, {"ep-0": 1.0})  # left behind by a crash
    assert [row["id"] for row in disabled.disabled(redis_client, limit=100)] == ["ep-4"]
    assert disabled.count(redis_client) == 1
    # Lost from the index (a worker killed between the 410 and its index write): the
    # endpoint's next delivery, turned away, puts it back, as does a worker's start.
    redis_client.delete(disabled.DISABLED_KEY)
    assert gate.admit("ep-4", "evt-2", "tok2").verdict.value == "disabled"
    assert disabled.count(redis_client) == 1
    redis_client.delete(disabled.DISABLED_KEY)
    assert disabled.rebuild(redis_client, [f"ep-{n}" for n in range(5)]) == 1
    assert [row["id"] for row in disabled.disabled(redis_client, limit=100)] == ["ep-4"]


def test_failing_endpoints_are_those_whose_latest_error_is_newer_than_their_success(
        redis_client) -> None:
    registry = EndpointRegistry()
    gate = Gate()
    tally = HealthTally(interval=0)
    for endpoint_id, statuses in (("ep-bad", [200, 500]), ("ep-mended", [500, 200]),
                                  ("ep-fine", [200])):
        registry.add(endpoint_id, "https://example.com/hook")
        for n, status in enumerate(statuses):
            event_id = f"{endpoint_id}-{n}"
            gate.admit(endpoint_id, event_id, f"tok-{n}")
            rec = record(time.time(), status, 0.01)
            gate.settle(endpoint_id, event_id, f"tok-{n}",
                        "delivered" if status == 200 else "failed", record=rec)
            tally.observe(endpoint_id, event_id, rec)
            time.sleep(0.002)
    tally.flush()
    troubled = endpoint_health.troubled_endpoints(ALICE)
    assert [(item.endpoint_id, item.reason) for item in troubled.failing] == [
        ("ep-bad", "HTTP 500 (1 failures in a row)")]
    assert troubled.failing_total == 1


def test_the_worker_module_installs_its_observer_once() -> None:
    before = list(ATTEMPT_OBSERVERS)
    try:
        worker_health.install()
        worker_health.install()
        assert ATTEMPT_OBSERVERS.count(worker_health.HEALTH.observe) == 1
    finally:
        ATTEMPT_OBSERVERS[:] = before
