"""The console's overview at any number of endpoints: bounded figures and the breakers needing
attention among the endpoints with the most retries waiting, read in one round trip; the
breakers of many endpoints in one pipelined read (``hookline stats``); the schedule's due
counts and the applications a page at a time."""

from __future__ import annotations

from typing import Any

import pytest

from hookline.service import apps, stats
from hookline.service import schedule as service_schedule
from hookline.service.actor import Actor
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from hookline.store.schedule import RetrySchedule

ALICE = Actor(name="alice", session="s")
TENANT = Actor(name="portal:shop", session="t", app_scope="shop")


class CountingPipelines:
    """Counts the pipelines executed and the commands each held, through a real client."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.executed: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = self.real.pipeline(transaction=transaction)
        execute = pipe.execute

        def counted() -> Any:
            self.executed.append(len(pipe.command_stack))
            return execute()

        pipe.execute = counted
        return pipe


def open_breaker(endpoint_id: str, *, minutes: int = 60, state: str = "open") -> None:
    now_ms = int(store.redis_time(store.client()) * 1000)
    store.client().hset(keys.breaker_key(endpoint_id), mapping={
        "state": state, "failures": 5, "cooldown_ms": 60_000,
        "open_until": now_ms + minutes * 60_000})


def park(endpoint_id: str, count: int) -> None:
    schedule = RetrySchedule()
    for n in range(count):
        schedule.park(endpoint_id=endpoint_id, event_id=f"ev-{n}", countdown=60 + n,
                      message="{}")


@pytest.fixture
def fleet(quiet_redis) -> list[str]:
    """60 endpoints (20 of application ``shop``); the first 30 have 30 - n retries waiting;
    breakers open at ep-03, ep-10 (retries waiting) and ep-50 (none waiting)."""
    AppRegistry().add("shop")
    registry = EndpointRegistry()
    ids = [f"ep-{n:02d}" for n in range(60)]
    for n, endpoint_id in enumerate(ids):
        registry.add(endpoint_id, f"http://127.0.0.1:9/{endpoint_id}",
                     app="shop" if n % 3 == 0 else None)
    for n in range(30):
        park(ids[n], 30 - n)
    for endpoint_id in ("ep-03", "ep-10", "ep-50"):
        open_breaker(endpoint_id)
    return ids


def test_the_breakers_of_many_endpoints_are_read_in_one_round_trip(fleet) -> None:
    client = CountingPipelines(store.client())
    statuses = Gate(client).breaker_statuses(fleet)
    assert client.executed == [60]
    assert [status.endpoint_id for status in statuses] == fleet
    one_by_one = [Gate().breaker_status(endpoint_id) for endpoint_id in fleet]
    assert [(s.state, s.failures, s.open_until is not None) for s in statuses] == [
        (s.state, s.failures, s.open_until is not None) for s in one_by_one]
    assert {s.endpoint_id for s in statuses if s.state == "open"} == {"ep-03", "ep-10", "ep-50"}
    assert Gate().breaker_statuses([]) == []


def test_the_overview_samples_the_endpoints_with_retries_waiting(fleet, monkeypatch) -> None:
    monkeypatch.setattr(stats, "queue_depths", lambda: {"hookline": 0})
    monkeypatch.setattr(stats, "workers_report", lambda: {"live": []})
    seen = stats.overview(ALICE)
    assert seen.endpoints == 60 and seen.schedule.total == sum(range(1, 31))
    assert seen.sampled == 30  # the endpoints with retries waiting, no other
    assert [status.endpoint_id for status in seen.attention] == ["ep-03", "ep-10"]
    # A smaller sample takes the endpoints with the most retries first.
    troubled, sampled = stats.attention_sample(seen.schedule, sample=5)
    assert (sampled, [status.endpoint_id for status in troubled]) == (5, ["ep-03"])
    # hookline stats still reads every breaker: the one with nothing waiting too.
    full = stats.stats_snapshot(ALICE)
    assert [status.endpoint_id for status in full.troubled] == ["ep-03", "ep-10", "ep-50"]


def test_the_overview_reads_no_endpoint(fleet, monkeypatch) -> None:
    """Its cost does not grow with the endpoints: no endpoint hash is read."""
    monkeypatch.setattr(stats, "queue_depths", lambda: {})
    monkeypatch.setattr(stats, "workers_report", lambda: None)
    read: list[str] = []
    real = store.client()

    class Watching(CountingPipelines):
        def hgetall(self, key: str) -> Any:
            read.append(key)
            return real.hgetall(key)

    monkeypatch.setattr(store, "client", lambda: Watching(real))
    stats.overview(ALICE)
    assert not [key for key in read if key.startswith("hookline:{ep-")]


def test_a_tenants_overview_counts_its_own_endpoints(fleet) -> None:
    seen = stats.overview(TENANT)
    assert seen.endpoints == 20 and seen.queues is None and seen.dead_letters is None
    assert [status.endpoint_id for status in seen.attention] == ["ep-03"]  # not ep-10: not its


def test_due_counts_read_a_page_of_endpoints_in_two_round_trips(fleet, monkeypatch) -> None:
    page = service_schedule.due_counts(ALICE, limit=10)
    assert [(item.endpoint_id, item.count) for item in page.items] == [
        (f"ep-{n:02d}", 30 - n) for n in range(10)]
    assert all(item.oldest_due is not None for item in page.items)
    following = service_schedule.due_counts(ALICE, cursor=page.next_cursor, limit=25)
    assert [item.endpoint_id for item in following.items] == [
        f"ep-{n:02d}" for n in range(10, 30)] and following.next_cursor is None
    dues = service_schedule._oldest_dues(RetrySchedule(), ["ep-00", "ep-45"])
    schedule = RetrySchedule()
    shard = schedule.shard_of("ep-00")
    first = schedule.redis.zmscore(shard.due, [f"ep-00/ev-{n}" for n in range(30)])
    assert dues[0] == min(first) / 1000.0
    assert dues[1] is None
    client = CountingPipelines(store.client())
    assert len(service_schedule._oldest_dues(RetrySchedule(client), fleet[:10])) == 10
    assert len(client.executed) == 2  # whatever the page's size


def test_applications_a_page_at_a_time_with_their_counts(fleet) -> None:
    for n in range(4):
        AppRegistry().add(f"app-{n}")
    first = apps.apps_page(ALICE, limit=3)
    assert [(item.app.id, item.endpoints) for item in first.items] == [
        ("app-0", 0), ("app-1", 0), ("app-2", 0)]
    rest = apps.apps_page(ALICE, cursor=first.next_cursor, limit=3)
    assert [(item.app.id, item.endpoints) for item in rest.items] == [
        ("app-3", 0), ("shop", 20)] and rest.next_cursor is None
    assert [item.app.id for item in apps.apps_page(TENANT).items] == ["shop"]
    assert [(item.app.id, item.endpoints) for item in apps.list_apps(TENANT)] == [("shop", 20)]
