"""Deliveries to a held endpoint (circuit open, probe in flight, Retry-After block) are parked
by the broker's consume script without reaching a worker
(hookline/transport/lua/consume.lua), so a dead endpoint's backlog does not slow a healthy one;
they come back when the endpoint may take them.
Real Redis, the session's real worker, real HTTP."""

from __future__ import annotations

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from hookline.store.schedule import DUE_KEY, RetrySchedule
from tests.conftest import wait_until


def redis_ms() -> int:
    seconds, micros = store.client().time()
    return seconds * 1000 + micros // 1000


def hold(endpoint_id: str, seconds: float, *, state: str = "open") -> int:
    """Open the endpoint's circuit (as settle.lua does) until ``seconds`` from now."""
    until = redis_ms() + round(seconds * 1000)
    field = "open_until" if state == "open" else "probe_until"
    store.client().hset(keys.breaker_key(endpoint_id), mapping={"state": state, field: until})
    return until


def test_a_held_endpoint_is_parked_by_the_consumer_and_delivered_after(worker, receiver):
    held = EndpointRegistry().add("held-ep", receiver.route("/held", always(Reply(204))))
    healthy = EndpointRegistry().add("healthy-ep", receiver.route("/fine", always(Reply(204))))
    until = hold(held.id, 3.0)
    held_ids = [send_webhook(held.id, "order.created", {"n": n}) for n in range(20)]
    fine_ids = [send_webhook(healthy.id, "order.created", {"n": n}) for n in range(5)]

    # The healthy endpoint's events are delivered; the held one's wait in the schedule, due
    # no earlier than the end of the cool-down, and none reached a worker's task.
    wait_until(lambda: all(Gate().is_delivered(healthy.id, e) for e in fine_ids))
    wait_until(lambda: RetrySchedule().stats().by_endpoint.get(held.id) == 20)
    client = store.client()
    dues = [client.zscore(DUE_KEY, f"{held.id}/{event_id}") for event_id in held_ids]
    assert all(due is not None and due >= until for due in dues)
    assert receiver.requests_to("/held") == []
    # The consumer logs what its script parked once the script has returned.
    def parked_logged() -> str | None:
        log = worker.output()
        return log if f"event_id={held_ids[0]} reason=breaker_open" in log and (
            "by=consumer" in log) else None

    log = wait_until(parked_logged)
    assert not any(f"Task hookline.deliver[{e}] received" in log for e in held_ids)

    # Once the cool-down is over one of them is the probe; it succeeds and closes the circuit,
    # and every one is delivered once.
    wait_until(lambda: all(Gate().is_delivered(held.id, e) for e in held_ids), timeout=30,
               what=lambda: (sum(Gate().is_delivered(held.id, e) for e in held_ids),
                             RetrySchedule().stats().by_endpoint.get(held.id),
                             store.client().hgetall(keys.breaker_key(held.id)),
                             [(m, due - redis_ms()) for m, due in store.client().zrange(
                                 DUE_KEY, 0, 3, withscores=True)],
                             worker.output()[-3000:]))
    assert sorted(r.webhook_id for r in receiver.requests_to("/held")) == sorted(held_ids)


def test_deliveries_meeting_a_probe_in_flight_or_a_block_are_parked_too(worker, receiver):
    probing = EndpointRegistry().add("probing-ep", receiver.route("/probing", always(Reply(204))))
    blocked = EndpointRegistry().add("blocked-ep", receiver.route("/blocked", always(Reply(204))))
    hold(probing.id, 30.0, state="half_open")
    store.client().hset(keys.breaker_key(blocked.id), "blocked_until", redis_ms() + 30_000)
    send_webhook(probing.id, "order.created", {})
    send_webhook(blocked.id, "order.created", {})
    wait_until(lambda: RetrySchedule().stats().by_endpoint.get(probing.id) == 1
               and RetrySchedule().stats().by_endpoint.get(blocked.id) == 1)
    # The consumer logs what it parked once the script has returned: wait for the lines.
    wait_until(lambda: "reason=breaker_probe" in worker.output()
               and "reason=blocked" in worker.output(), timeout=5, what=worker.output)
    assert receiver.requests_to("/probing") == [] and receiver.requests_to("/blocked") == []
    schedule = RetrySchedule()
    schedule.unpark([r.id for r in schedule.scheduled() if r.endpoint_id in
                     (probing.id, blocked.id)])  # not delivered in 30 s: leave nothing behind
