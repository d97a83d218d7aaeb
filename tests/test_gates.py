"""The admit and settle scripts against a real Redis (no worker needed)."""

import uuid

import pytest

from app import store
from app.endpoints import EndpointRegistry
from app.gates import Gate, Verdict


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
    ttl = store.client().ttl(store.done_key(endpoint.id, "evt-1"))
    assert ttl > 7 * 86400  # retry window plus the replay horizon


def test_failed_attempt_releases_the_lease(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "token-a")
    gate.settle(endpoint.id, "evt-1", "token-a", "failed")
    assert gate.admit(endpoint.id, "evt-1", "token-b").verdict is Verdict.ADMITTED


def test_settle_does_not_release_a_lease_it_no_longer_holds(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "token-a")
    store.client().delete(store.lease_key(endpoint.id, "evt-1"))  # expired meanwhile
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
        store.client().delete(store.lease_key(endpoint.id, "evt-1"))  # the lease ran out
    assert gate.admit(endpoint.id, "evt-1", "t3").verdict is Verdict.POISON


def test_settling_resets_the_crash_counter(endpoint):
    gate = Gate()
    for n in range(5):
        assert gate.admit(endpoint.id, "evt-1", f"t{n}").verdict is Verdict.ADMITTED
        gate.settle(endpoint.id, "evt-1", f"t{n}", "failed")


def test_every_key_of_one_endpoint_shares_a_cluster_slot(endpoint):
    from redis.crc import key_slot

    keys = [store.endpoint_key(endpoint.id), store.done_key(endpoint.id, "e"),
            store.lease_key(endpoint.id, "e")]
    assert len({key_slot(key.encode()) for key in keys}) == 1
