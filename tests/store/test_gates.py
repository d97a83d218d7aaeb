"""The admit and settle scripts against a real Redis (no worker needed)."""

import uuid

import pytest

from hookline.core.config import settings
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate, Verdict
from tests.conftest import wait_until
from tests.support.records import expire_lease


@pytest.fixture
def endpoint():
    return EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/hook")


def test_admit_returns_the_endpoint_and_takes_the_lease(endpoint):
    admission = Gate().admit(endpoint.id, "evt-1", "token-a")
    assert admission.verdict is Verdict.ADMITTED
    assert admission.endpoint.url == endpoint.url
    assert admission.endpoint.secrets == endpoint.secrets
    second = Gate().admit(endpoint.id, "evt-1", "token-b")
    assert second.verdict is Verdict.BUSY and second.wait > 0


def test_settled_delivery_makes_later_attempts_duplicates(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "token-a")
    assert gate.settle(endpoint.id, "evt-1", "token-a", "delivered").held_lease is True
    assert gate.admit(endpoint.id, "evt-1", "token-b").verdict is Verdict.DUPLICATE
    ttl = store.client().ttl(keys.delivery_key(endpoint.id, "evt-1"))
    assert ttl > 7 * 86400  # retry window plus the replay horizon
    assert Gate().is_delivered(endpoint.id, "evt-1")


def test_failed_attempt_releases_the_lease(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "token-a")
    gate.settle(endpoint.id, "evt-1", "token-a", "failed")
    assert gate.admit(endpoint.id, "evt-1", "token-b").verdict is Verdict.ADMITTED


def test_settle_does_not_release_a_lease_it_no_longer_holds(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "token-a")
    expire_lease(store.client(), endpoint.id, "evt-1")  # expired meanwhile
    assert gate.admit(endpoint.id, "evt-1", "token-b").verdict is Verdict.ADMITTED
    assert gate.settle(endpoint.id, "evt-1", "token-a", "failed").held_lease is False
    assert gate.admit(endpoint.id, "evt-1", "token-c").verdict is Verdict.BUSY


def test_gone_disables_the_endpoint(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "token-a")
    gate.settle(endpoint.id, "evt-1", "token-a", "gone", reason="gone: 410")
    admission = gate.admit(endpoint.id, "evt-2", "token-b")
    assert (admission.verdict, admission.detail) == (Verdict.DISABLED, "gone: 410")


def test_unknown_endpoint_is_missing():
    assert Gate().admit("never-added", "evt-1", "t").verdict is Verdict.MISSING


def test_attempts_started_and_never_settled_make_a_poison_message(endpoint):
    """A worker that dies mid-send never settles; its lease expires and the message returns.
    After HOOKLINE_MAX_UNSETTLED_STARTS (3) such starts the event is given up."""
    gate = Gate()
    for n in range(3):
        assert gate.admit(endpoint.id, "evt-1", f"t{n}").verdict is Verdict.ADMITTED
        expire_lease(store.client(), endpoint.id, "evt-1")  # the lease ran out
    assert gate.admit(endpoint.id, "evt-1", "t3").verdict is Verdict.POISON


def test_settling_resets_the_crash_counter(endpoint):
    gate = Gate()
    for n in range(5):
        assert gate.admit(endpoint.id, "evt-1", f"t{n}").verdict is Verdict.ADMITTED
        gate.settle(endpoint.id, "evt-1", f"t{n}", "failed")


def test_every_key_of_one_endpoint_shares_a_cluster_slot(endpoint):
    from redis.crc import key_slot

    names = [keys.endpoint_key(endpoint.id), keys.delivery_key(endpoint.id, "e"),
             keys.done_key(endpoint.id, "e"), keys.digest_key(endpoint.id, "e"),
             keys.breaker_key(endpoint.id), keys.rate_key(endpoint.id),
             keys.history_key(endpoint.id, "e"), keys.recent_key(endpoint.id)]
    assert len({key_slot(key.encode()) for key in names}) == 1


def redis_now_ms() -> int:
    seconds, micros = store.client().time()
    return seconds * 1000 + micros // 1000


def test_rate_limit_books_consecutive_slots_for_deferred_events():
    # 1/s: each step below has half a second to run in, even on a loaded machine.
    endpoint = EndpointRegistry().add("limited", "http://127.0.0.1:9/", rate="1/s", burst=1)
    gate = Gate()
    assert gate.admit(endpoint.id, "e1", "t1").verdict is Verdict.ADMITTED
    second = gate.admit(endpoint.id, "e2", "t2")
    third = gate.admit(endpoint.id, "e3", "t3")
    assert (second.verdict, second.detail) == (Verdict.DEFERRED, "rate_limited")
    assert 0.5 < second.wait <= 1.0
    assert third.rate_slot - second.rate_slot == 1000  # one emission interval apart
    early = gate.admit(endpoint.id, "e2", "t2", rate_slot=second.rate_slot)
    assert (early.verdict, early.rate_slot) == (Verdict.DEFERRED, second.rate_slot)
    wait_until(lambda: redis_now_ms() >= second.rate_slot)
    assert gate.admit(endpoint.id, "e2", "t2", rate_slot=second.rate_slot).verdict is (
        Verdict.ADMITTED)
    # A new event does not jump the queue of booked ones: it books after the last.
    fourth = gate.admit(endpoint.id, "e4", "t4")
    assert fourth.verdict is Verdict.DEFERRED and fourth.rate_slot == third.rate_slot + 1000


def test_default_burst_is_a_tenth_of_a_second_of_requests():
    registry = EndpointRegistry()
    assert registry.add("fast", "http://127.0.0.1:9/", rate="50/s").effective_burst() == 5
    assert registry.add("slow", "http://127.0.0.1:9/", rate="3/s").effective_burst() == 1
    assert registry.add("set", "http://127.0.0.1:9/", rate="50/s", burst=2).effective_burst() == 2


def test_burst_lets_that_many_requests_through_back_to_back():
    endpoint = EndpointRegistry().add("bursty", "http://127.0.0.1:9/", rate="1/s", burst=3)
    gate = Gate()
    verdicts = [gate.admit(endpoint.id, f"e{n}", f"t{n}").verdict for n in range(4)]
    assert verdicts == [Verdict.ADMITTED] * 3 + [Verdict.DEFERRED]


def open_breaker(gate: Gate, endpoint_id: str) -> None:
    for n in range(settings().breaker_threshold):
        assert gate.admit(endpoint_id, f"f{n}", f"t{n}").verdict is Verdict.ADMITTED
        gate.settle(endpoint_id, f"f{n}", f"t{n}", "failed")


def end_cooldown(endpoint_id: str) -> None:
    store.client().hset(keys.breaker_key(endpoint_id), "open_until", redis_now_ms() - 1)


def test_breaker_opens_at_the_threshold_and_lets_one_probe_through(endpoint):
    gate = Gate()
    open_breaker(gate, endpoint.id)
    status = gate.breaker_status(endpoint.id)
    assert (status.state, status.failures) == ("open", settings().breaker_threshold)
    deferred = gate.admit(endpoint.id, "e1", "a")
    assert (deferred.verdict, deferred.detail) == (Verdict.DEFERRED, "breaker_open")
    assert 0 < deferred.wait <= settings().breaker_cooldown
    end_cooldown(endpoint.id)
    probe = gate.admit(endpoint.id, "e1", "probe")
    assert (probe.verdict, probe.probe, probe.transition) == (Verdict.ADMITTED, True, "half_open")
    waiting = gate.admit(endpoint.id, "e2", "b")
    assert (waiting.verdict, waiting.detail) == (Verdict.DEFERRED, "breaker_probe")


def test_failed_probe_reopens_with_a_longer_cooldown_and_a_good_one_closes(endpoint):
    gate = Gate()
    open_breaker(gate, endpoint.id)
    end_cooldown(endpoint.id)
    gate.admit(endpoint.id, "e1", "probe")
    assert gate.settle(endpoint.id, "e1", "probe", "failed").transition == "opened"
    assert gate.breaker_status(endpoint.id).cooldown == 2 * settings().breaker_cooldown
    end_cooldown(endpoint.id)
    gate.admit(endpoint.id, "e1", "probe2")
    assert gate.settle(endpoint.id, "e1", "probe2", "delivered").transition == "closed"
    status = gate.breaker_status(endpoint.id)
    assert (status.state, status.failures, status.open_until) == ("closed", 0, None)


def test_a_dead_probers_lease_expires_and_another_worker_probes(endpoint):
    gate = Gate()
    open_breaker(gate, endpoint.id)
    end_cooldown(endpoint.id)
    gate.admit(endpoint.id, "e1", "probe")
    store.client().hset(keys.breaker_key(endpoint.id), "probe_until", redis_now_ms() - 1)
    second = gate.admit(endpoint.id, "e2", "probe-2")
    assert (second.verdict, second.probe) == (Verdict.ADMITTED, True)


def test_throttling_blocks_the_endpoint_without_counting_a_failure(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "e1", "a")
    gate.settle(endpoint.id, "e1", "a", "throttled", retry_after=30)
    blocked = gate.admit(endpoint.id, "e2", "b")
    assert (blocked.verdict, blocked.detail) == (Verdict.DEFERRED, "blocked")
    assert 29 < blocked.wait <= 30
    status = gate.breaker_status(endpoint.id)
    assert status.failures == 0 and status.blocked_until is not None
    gate.reset_breaker(endpoint.id)
    assert gate.admit(endpoint.id, "e2", "b").verdict is Verdict.ADMITTED


def test_a_success_resets_the_consecutive_failure_count(endpoint):
    gate = Gate()
    for n in range(settings().breaker_threshold - 1):
        gate.admit(endpoint.id, f"f{n}", "t")
        gate.settle(endpoint.id, f"f{n}", "t", "failed")
    gate.admit(endpoint.id, "ok", "t")
    gate.settle(endpoint.id, "ok", "t", "delivered")
    gate.admit(endpoint.id, "f9", "t")
    gate.settle(endpoint.id, "f9", "t", "failed")
    assert gate.breaker_status(endpoint.id).state == "closed"


def test_the_gates_live_in_the_endpoint_hash_and_a_removed_endpoint_stays_removed(endpoint):
    """Admit reads the endpoint and its breaker with one HGETALL; settle after a concurrent
    remove writes nothing back there, so no half endpoint (gate fields, no url) appears."""
    gate = Gate()
    registry = EndpointRegistry()
    assert gate.admit(endpoint.id, "evt-1", "t").verdict is Verdict.ADMITTED
    registry.remove(endpoint.id)
    gate.settle(endpoint.id, "evt-1", "t", "failed")
    assert not store.client().exists(keys.endpoint_key(endpoint.id))
    # Gate fields alone (a stray write) are no endpoint; adding it again starts clean.
    store.client().hset(keys.breaker_key(endpoint.id), mapping={"state": "open", "failures": 9})
    assert gate.admit(endpoint.id, "evt-2", "t").verdict is Verdict.MISSING
    assert registry.get(endpoint.id) is None and endpoint.id not in [e.id for e in registry.list()]
    registry.add(endpoint.id, endpoint.url)
    assert gate.breaker_status(endpoint.id).failures == 0
    assert gate.admit(endpoint.id, "evt-2", "t").verdict is Verdict.ADMITTED
