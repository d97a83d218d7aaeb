"""An endpoint's attempts in flight are leases: a count never outlives what it counts.

An attempt whose settle never comes (Redis restarted under it, its worker gone) holds a lease
that runs out; whoever decides by the count prunes it and mends the count, and the worker's
reconciler drops its own leases of attempts it no longer runs at once."""

from __future__ import annotations

import uuid

import pytest

from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate, Verdict
from hookline.store.leases import Leases, unheld
from hookline.worker.reconciler import Reconciler, RunningAttempts
from tests.support.records import expire_lease


@pytest.fixture
def endpoint(quiet_redis):
    """On a database no session worker uses: its consumer would take the doorbell's token."""
    return EndpointRegistry().add(f"ls-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/hook",
                                  max_in_flight=2)


def counted(endpoint_id: str) -> tuple[int, int]:
    """(the hash's count, the leases held)."""
    client = store.client()
    return (int(client.hget(keys.endpoint_key(endpoint_id), "inflight") or 0),
            client.zcard(keys.leases_key(endpoint_id)))


def test_admit_and_settle_keep_the_count_and_the_leases_in_step(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "p1-1")
    gate.admit(endpoint.id, "evt-2", "p1-2")
    assert counted(endpoint.id) == (2, 2)
    gate.settle(endpoint.id, "evt-1", "p1-1", "delivered")
    assert counted(endpoint.id) == (1, 1)


def test_a_lease_whose_settle_never_came_frees_its_slot_at_the_cap_when_it_runs_out(endpoint):
    gate = Gate()
    for n in (1, 2):
        assert gate.admit(endpoint.id, f"evt-{n}", f"lost-{n}").verdict is Verdict.ADMITTED
    assert gate.admit(endpoint.id, "evt-3", "p2-1").verdict is Verdict.CAPPED
    expire_lease(store.client(), endpoint.id, "evt-1")  # its settle was lost with Redis
    assert gate.admit(endpoint.id, "evt-3", "p2-1").verdict is Verdict.ADMITTED
    assert counted(endpoint.id) == (2, 2)
    # The lost attempt's late settle (its worker came back) counts nothing out twice.
    gate.settle(endpoint.id, "evt-1", "lost-1", "failed")
    assert counted(endpoint.id) == (2, 2)


def test_a_taken_over_lease_hands_its_count_to_the_attempt_that_took_it(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "late-1")
    expire_lease(store.client(), endpoint.id, "evt-1")
    assert gate.admit(endpoint.id, "evt-1", "other-1").verdict is Verdict.ADMITTED
    assert counted(endpoint.id) == (1, 1)
    assert gate.settle(endpoint.id, "evt-1", "late-1", "delivered").fenced
    gate.settle(endpoint.id, "evt-1", "other-1", "delivered")
    assert counted(endpoint.id) == (0, 0)


def test_unheld_names_only_this_process_s_tokens_it_no_longer_runs() -> None:
    holders = {"a": ["me-1", "me-2", "other-7"], "b": ["me-3"], "c": ["old-4"]}
    found = unheld(holders, own={"me", "old"}, running={"me-2"})
    assert found == {"a": ["me-1"], "b": ["me-3"], "c": ["old-4"]}


def test_the_reconciler_gives_back_the_slots_of_attempts_this_process_no_longer_runs(endpoint):
    """Redis came back without the settles of two attempts this process ran: the sweep drops
    their leases at once (no wait for them to run out), keeps the one still running and
    another process's, and wakes a consumer for the deliveries waiting for a slot."""
    gate, client = Gate(), store.client()
    running = RunningAttempts()
    for token, event in (("me-1", "evt-1"), ("me-2", "evt-2")):
        running.start(token, endpoint.id)
        gate.admit(endpoint.id, event, token)
        running.finish(token)  # its settle failed: Redis was away
    running.start("me-3", endpoint.id)
    client.hset(keys.endpoint_key(endpoint.id), "max_in_flight", 5)
    gate.admit(endpoint.id, "evt-3", "me-3")
    gate.admit(endpoint.id, "evt-4", "them-1")
    client.hset(keys.endpoint_key(endpoint.id), "waiting", "1")
    bell = keys.doorbell_key("hookline")
    client.delete(bell)
    mended = Reconciler(Leases(client), interval=30, running=running).sweep()
    assert [(m.before, m.after) for m in mended] == [(4, 2)]
    assert sorted(client.zrange(keys.leases_key(endpoint.id), 0, -1)) == ["me-3", "them-1"]
    assert counted(endpoint.id) == (2, 2)
    assert client.lrange(bell, 0, -1) == ["w"]
    client.delete(bell)
    assert Reconciler(Leases(client), interval=30, running=running).sweep(full=True) == []


def test_where_the_broker_is_elsewhere_a_slot_given_back_rings_no_doorbell_here(endpoint):
    """Without the doorbell (``BrokerFace.doorbell``: the broker is apart from this Redis, its
    consumers wait there), the gate and the reconciliation keep to the endpoint's keys."""
    client = store.client()
    Gate(doorbell=False).admit(endpoint.id, "evt-1", "me-1")
    client.hset(keys.endpoint_key(endpoint.id), "waiting", "1")
    bell = keys.doorbell_key("hookline")
    client.delete(bell)
    running = RunningAttempts()
    running.start("me-1", endpoint.id)
    running.finish("me-1")  # its settle was lost
    mended = Reconciler(Leases(client, doorbell=False), interval=30, running=running).sweep()
    assert [(m.before, m.after) for m in mended] == [(1, 0)]
    assert client.llen(bell) == 0


def test_a_count_whose_leases_all_ran_out_is_mended_by_the_full_sweep(endpoint):
    gate, client = Gate(), store.client()
    gate.admit(endpoint.id, "evt-1", "gone-1")
    expire_lease(client, endpoint.id, "evt-1")
    client.hset(keys.endpoint_key(endpoint.id), "inflight", 7)  # an older count, restored
    mended = Reconciler(Leases(client), interval=30, running=RunningAttempts()).sweep(full=True)
    assert [(m.endpoint_id, m.before, m.after) for m in mended] == [(endpoint.id, 7, 0)]
    assert counted(endpoint.id) == (0, 0)
