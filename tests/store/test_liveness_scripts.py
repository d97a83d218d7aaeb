"""The liveness, fair-share and cap scripts against a real Redis, no worker: heartbeat.lua
declares a silent process dead exactly once and never during a gap, settle.lua refuses an
outcome whose record was restored, admit.lua counts attempts in flight and holds the cap,
release_dead.lua frees only a dead process's lease, and consume.lua keeps a slow endpoint to
its share while others wait behind it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate, Receipt, Verdict
from hookline.store.lua import schedule
from hookline.transport.liveness import REGISTRY_KEYS, Liveness, registry
from hookline.transport.lua import CONSUME, HEARTBEAT
from hookline.transport.records import (
    UNACKED_RECORDS_KEY,
    member_owner,
    parse_member,
    record_member,
)
from tests.conftest import flushed, isolated_url
from tests.support.records import expire_lease

REGISTRY_URL = isolated_url(14)

#: The retry schedule's keys consume.lua parks in: the one shard.
ONE_SHARD = keys.schedule_shards(1)[0]


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    """A database of its own (bytes replies): no worker of the suite beats into it."""
    for _ in flushed(REGISTRY_URL):
        yield redis.Redis.from_url(REGISTRY_URL)


def beat(client: redis.Redis, token: str, *, window_ms: int = 1000, register: bool = False
         ) -> list:
    return HEARTBEAT.run(client, **REGISTRY_KEYS, token=token, window_ms=window_ms,
                         own_slots=8, description="{}", register="1" if register else "0",
                         most_dead=16)


def test_a_silent_process_is_declared_dead_once_and_a_live_one_is_not(client):
    beat(client, "aaaa", register=True)
    beat(client, "bbbb", register=True)
    client.zadd(keys.WORKERS_LIVE_KEY, {"aaaa": 0})  # its last beat long ago
    client.hset(keys.WORKERS_CLOCK_KEY, "resumed", 0)  # no gap lately
    reply = beat(client, "bbbb")
    assert [value.decode() for value in reply[3:]] == ["aaaa"]  # dead, to be restored
    assert beat(client, "aaaa") == [b"fenced"]  # it comes back: refused, must register anew
    again = beat(client, "bbbb")
    assert int(client.hget(keys.WORKERS_CLOCK_KEY, "declared")) == 1  # declared once
    assert int(again[2]) == 1  # one live process, with its slots
    assert int(again[1]) == 8


def test_nobody_is_declared_dead_within_a_window_of_a_gap_in_all_heartbeats(client):
    beat(client, "aaaa", register=True)
    beat(client, "bbbb", register=True)
    # Nobody beat for a long time (Redis was unreachable): both look silent.
    client.zadd(keys.WORKERS_LIVE_KEY, {"aaaa": 0, "bbbb": 0})
    client.hset(keys.WORKERS_CLOCK_KEY, "beat", 0)
    reply = beat(client, "bbbb")
    assert reply[3:] == [] and client.zscore(keys.WORKERS_LIVE_KEY, "aaaa") is not None


def test_a_liveness_beats_registers_and_reports_the_registry(client):
    live = Liveness(client, interval=0.2, window=1.0, slots=32)
    live.beat()
    assert live.fresh() and live.total_slots >= 32
    state = registry(client)
    assert [process["slots"] for process in state["live"]] == [32]
    live.stop()
    assert registry(client)["live"] == []


def test_a_fenced_liveness_registers_anew_under_a_new_token(client):
    live = Liveness(client, interval=0.2, window=1.0, slots=4)
    live.beat()
    old = live.current()
    client.zrem(keys.WORKERS_LIVE_KEY, old.token)  # declared dead meanwhile
    live.beat()
    assert live.current().token != old.token and live.current().generation == 2
    assert client.zscore(keys.WORKERS_LIVE_KEY, live.current().token) is not None


class _Holder:
    """A channel's QoS as Liveness sees it: whether it is closed, what it holds, and the
    calls to restore this process's records nobody holds."""

    def __init__(self) -> None:
        self.closed = False
        self.restore_calls: list[str] = []

    def reap(self, owner: str) -> tuple[int, int]:
        return 0, 0

    def held_members(self) -> set[bytes]:
        return set()

    def restore_own(self, owner: str, held: set[bytes], older_than: float) -> int:
        self.restore_calls.append(owner)
        return 0


def test_a_channel_replacing_a_closed_one_starts_the_watch_for_orphans(client):
    """kombu restores a closing channel's messages (and so starts the watch) only if it held
    some: a reconnect after a failover, with nothing held, must start it all the same, or a
    reject's requeue lost with the old master leaves its record until the minute's scan."""
    live = Liveness(client, interval=0.2, window=1.0, slots=4)
    first = _Holder()
    live.add_holder(first)
    live.beat()
    assert first.restore_calls == []  # no channel closed: no look at every beat
    first.closed = True
    second = _Holder()
    live.add_holder(second)
    live.beat()
    assert second.restore_calls == [live.current().token]
    live.stop()


def test_members_carry_their_owner():
    member = record_member("tag-1", '{"a": 1}', "ex", "rk", owner="0123abcd")
    assert member_owner(member) == "0123abcd"
    assert parse_member(member) == ("tag-1", '[{"a": 1},"ex","rk"]')
    assert member_owner(record_member("tag-1", "{}", "ex", "rk")) == ""


@pytest.fixture
def endpoint():
    return EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/hook")


def test_admit_counts_attempts_in_flight_and_settle_gives_them_back(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "tok-1")
    gate.admit(endpoint.id, "evt-2", "tok-2")
    assert gate.in_flight(endpoint.id) == (2, 0)
    gate.settle(endpoint.id, "evt-1", "tok-1", "delivered")
    gate.settle(endpoint.id, "evt-2", "tok-2", "failed")
    assert gate.in_flight(endpoint.id) == (0, 0)


def test_admit_holds_the_cap_across_workers():
    endpoint = EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/hook",
                                      max_in_flight=2)
    gate = Gate()
    assert gate.admit(endpoint.id, "evt-1", "a-1").verdict is Verdict.ADMITTED
    assert gate.admit(endpoint.id, "evt-2", "b-1").verdict is Verdict.ADMITTED
    capped = gate.admit(endpoint.id, "evt-3", "c-1")
    assert capped.verdict is Verdict.CAPPED
    gate.settle(endpoint.id, "evt-1", "a-1", "delivered")
    assert gate.admit(endpoint.id, "evt-3", "c-2").verdict is Verdict.ADMITTED


def test_release_dead_frees_only_the_dead_processes_lease(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "dead0001-7")
    gate.admit(endpoint.id, "evt-2", "live0002-3")
    assert gate.release_dead(endpoint.id, "evt-1", "dead0001-") is True
    assert gate.release_dead(endpoint.id, "evt-2", "dead0001-") is False
    assert gate.in_flight(endpoint.id) == (1, 0)
    assert gate.admit(endpoint.id, "evt-1", "live0002-4").verdict is Verdict.ADMITTED
    assert gate.admit(endpoint.id, "evt-2", "live0002-5").verdict is Verdict.BUSY


def test_settle_refuses_an_outcome_whose_record_was_restored(endpoint):
    gate = Gate()
    client = store.client()
    member = record_member("tag-9", "{}", "hookline", "hookline", owner="gone0001")
    client.zadd(UNACKED_RECORDS_KEY, {member: time.time()})
    gate.admit(endpoint.id, "evt-1", "gone0001-1")
    client.zrem(UNACKED_RECORDS_KEY, member)  # restored to another worker
    settlement = gate.settle(endpoint.id, "evt-1", "gone0001-1", "delivered",
                             receipt=Receipt(UNACKED_RECORDS_KEY, member.encode()))
    assert settlement.fenced
    assert not gate.is_delivered(endpoint.id, "evt-1")  # nothing written
    # With its record there, the same outcome is recorded (and acknowledged).
    client.zadd(UNACKED_RECORDS_KEY, {member: time.time()})
    settlement = gate.settle(endpoint.id, "evt-1", "gone0001-1", "delivered",
                             receipt=Receipt(UNACKED_RECORDS_KEY, member.encode()))
    assert not settlement.fenced and gate.is_delivered(endpoint.id, "evt-1")
    assert client.zscore(UNACKED_RECORDS_KEY, member) is None


def envelope(tag: str, endpoint_id: str, **headers: str) -> str:
    return json.dumps({"body": "", "headers": {"hookline_endpoint": endpoint_id,
                                               "hookline_event": tag, "id": tag, **headers},
                       "properties": {"delivery_tag": tag,
                                      "delivery_info": {"exchange": "fq", "routing_key": "fq"}}})


def consume(client: redis.Redis, endpoints: list[str], *, most: int, slots: int,
            dig_above: int, look: bool = False, max_age: float = 0) -> list:
    endpoint_keys = [key for e in endpoints for key in (
        keys.breaker_key(e), keys.schedule_endpoint_key(e), keys.fair_waiting_key(e),
        keys.leases_key(e))]
    return CONSUME.run(
        client, records=UNACKED_RECORDS_KEY, **schedule(ONE_SHARD), wake=ONE_SHARD.wake,
        waiting_set=keys.FAIR_WAITING_KEY, queues=["fq"], doorbells=["fq-bell"],
        endpoint_keys=endpoint_keys, now=repr(time.time()), park_held="1", max_total=1000,
        max_per_endpoint=1000, budget=200, queue_count=1, most=most, owner="owner01",
        slots=slots, dig_above=dig_above, look_all="1" if look else "0", max_age=max_age,
        endpoints=endpoints)


def hold_slots(client: redis.Redis, endpoint_id: str, count: int) -> None:
    """``count`` attempts in flight at the endpoint: live leases and their count."""
    until = int(client.time()[0]) * 1000 + 60_000
    client.zadd(keys.leases_key(endpoint_id), {f"held-{n}": until for n in range(count)})
    client.hset(keys.endpoint_key(endpoint_id), "inflight", count)


def taken_endpoints(reply: list) -> list[str]:
    count = int(reply[2])
    return [json.loads(parse_member(member)[1])[0]["headers"]["hookline_endpoint"]
            for member in reply[4:4 + 2 * count:2]]


@pytest.fixture
def queue() -> redis.Redis:
    client = store.client()
    client.delete("fq", "fq-bell")
    return client


def test_a_slow_endpoint_past_half_the_slots_lets_the_queue_behind_it_through(queue):
    client = queue
    EndpointRegistry().add("fq-slow", "http://127.0.0.1:9/a")
    EndpointRegistry().add("fq-fast", "http://127.0.0.1:9/b")
    hold_slots(client, "fq-slow", 300)  # of 512 slots
    for n in range(5):
        client.lpush("fq", envelope(f"s{n}", "fq-slow"))
    client.lpush("fq", envelope("f0", "fq-fast"))
    reply = consume(client, ["fq-slow", "fq-fast"], most=16, slots=512, dig_above=64)
    assert taken_endpoints(reply) == ["fq-fast"]  # the slow ones wait in their own list
    assert client.llen(keys.fair_waiting_key("fq-slow")) == 5
    assert client.sismember(keys.FAIR_WAITING_KEY, "fq-slow")
    # Nothing else queued: work-conserving, the slow endpoint takes its waiting ones, oldest
    # first.
    reply = consume(client, ["fq-slow", "fq-fast"], most=2, slots=512, dig_above=64, look=True)
    assert [json.loads(parse_member(m)[1])[0]["headers"]["hookline_event"]
            for m in reply[4:8:2]] == ["s0", "s1"]


def test_a_lone_endpoint_under_the_runnable_bound_is_never_set_waiting(queue):
    client = queue
    EndpointRegistry().add("fq-lone", "http://127.0.0.1:9/a")
    hold_slots(client, "fq-lone", 40)
    for n in range(10):
        client.lpush("fq", envelope(f"l{n}", "fq-lone"))
    reply = consume(client, ["fq-lone"], most=16, slots=512, dig_above=64)
    assert taken_endpoints(reply) == ["fq-lone"] * 10
    assert not client.exists(keys.fair_waiting_key("fq-lone"))


def test_an_endpoint_at_its_cap_waits_whatever_the_slots(queue):
    client = queue
    EndpointRegistry().add("fq-cap", "http://127.0.0.1:9/a", max_in_flight=3)
    hold_slots(client, "fq-cap", 2)
    for n in range(4):
        client.lpush("fq", envelope(f"c{n}", "fq-cap"))
    reply = consume(client, ["fq-cap"], most=16, slots=512, dig_above=64)
    assert taken_endpoints(reply) == ["fq-cap"]  # 2 in flight + 1 taken = the cap
    assert client.llen(keys.fair_waiting_key("fq-cap")) == 3


def test_settle_refuses_an_attempt_whose_lease_another_took_over(endpoint):
    """The fence on any broker (RabbitMQ redelivers a cut-off worker's messages itself): an
    attempt whose lease ran out and was taken by another writes nothing."""
    gate = Gate()
    client = store.client()
    gate.admit(endpoint.id, "evt-1", "late-1")
    expire_lease(client, endpoint.id, "evt-1")
    assert gate.admit(endpoint.id, "evt-1", "other-1").verdict is Verdict.ADMITTED
    assert gate.settle(endpoint.id, "evt-1", "late-1", "delivered").fenced
    assert not gate.is_delivered(endpoint.id, "evt-1")
    assert gate.in_flight(endpoint.id) == (1, 0)  # the taking attempt's count, not two
    assert not gate.settle(endpoint.id, "evt-1", "other-1", "delivered").fenced
    assert gate.is_delivered(endpoint.id, "evt-1") and gate.in_flight(endpoint.id) == (0, 0)


def test_a_batch_filled_by_one_endpoint_sets_its_backlog_aside_for_whoever_is_behind(queue):
    """The consumer fills a batch from one endpoint's backlog, then sets the rest of the
    queue aside per endpoint; the next call serves the endpoint with the fewest in flight:
    the one queued behind the backlog goes long before the backlog has drained."""
    client = queue
    EndpointRegistry().add("fq-a", "http://127.0.0.1:9/a")
    EndpointRegistry().add("fq-b", "http://127.0.0.1:9/b")
    hold_slots(client, "fq-a", 12)  # its batch was admitted
    for n in range(100):
        client.lpush("fq", envelope(f"a{n}", "fq-a"))
    client.lpush("fq", envelope("b0", "fq-b"))
    first = consume(client, ["fq-a", "fq-b"], most=8, slots=512, dig_above=64)
    assert taken_endpoints(first) == ["fq-a"] * 8
    assert client.llen("fq") == 0  # the rest set aside, in each endpoint's own list
    assert client.llen(keys.fair_waiting_key("fq-a")) == 92
    second = consume(client, ["fq-a", "fq-b"], most=8, slots=512, dig_above=64, look=True)
    assert taken_endpoints(second)[0] == "fq-b"
    events = [json.loads(parse_member(m)[1])[0]["headers"]["hookline_event"]
              for m in second[4:4 + 2 * int(second[2]):2]]
    assert events[1:] == [f"a{n}" for n in range(8, 15)]  # the backlog in its order


def test_a_delivery_held_behind_an_open_breaker_past_its_max_age_goes_to_a_worker(queue):
    """consume.lua parks a failing endpoint's deliveries without a worker, but not for ever:
    one waiting since longer than the endpoint's max age is taken, and the worker dead-letters
    it as expired; a younger one is parked; a paused endpoint holds them whatever their age."""
    client = queue
    EndpointRegistry().add("fq-dead", "http://127.0.0.1:9/a", retry_policy={"max_age": 60})
    EndpointRegistry().add("fq-paused", "http://127.0.0.1:9/b")
    now = int(client.time()[0])
    client.hset(keys.endpoint_key("fq-dead"), mapping={
        "state": "open", "open_until": now * 1000 + 600_000})
    client.hset(keys.endpoint_key("fq-paused"), "paused_at", now - 5)
    client.lpush("fq", envelope("young", "fq-dead", hookline_since=str(now - 30)),
                 envelope("old", "fq-dead", hookline_since=str(now - 61)),
                 envelope("paused-old", "fq-paused", hookline_since=str(now - 10_000)))
    reply = consume(client, ["fq-dead", "fq-paused"], most=16, slots=512, dig_above=64,
                    max_age=3600)
    taken = [json.loads(parse_member(m)[1])[0]["headers"]["hookline_event"]
             for m in reply[4:4 + 2 * int(reply[2]):2]]
    parked = [json.loads(entry)[1] for entry in reply[3 + 2 * int(reply[2]):]]
    assert taken == ["old"]
    assert sorted(parked) == ["paused-old", "young"]
