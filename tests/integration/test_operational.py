"""Operational events back to the host: a 410 disables the endpoint and fires the disabled
event once, to the callbacks in the worker (connected through HOOKLINE_WORKER_IMPORTS), and as
one signed operational webhook to the operator endpoint; each dead letter is reported with its
reason; a receiver that raises changes nothing. In-process, the same 410 fires the Django and
Flask signals. Real Redis, a real worker, real HTTP receivers on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from standardwebhooks import Webhook

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.core import config, operational_events
from hookline.delivery.engine import GONE_REASON, DeliveryEngine, DeliveryRequest, Finished
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import emptied, isolated_url, wait_until
from tests.support.cli import succeeds

#: A database of its own, for a worker whose environment names the operator endpoint.
URL = isolated_url(10)


@pytest.fixture
def private() -> Iterator[redis.Redis]:
    client = emptied(URL)
    config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL,
                      "HOOKLINE_OPERATIONAL_ENDPOINT": "ops"})
    yield client
    config.configure()
    emptied(URL).close()


def recorded(kind: str) -> list[dict[str, Any]]:
    """What tests/support/operational_hooks.py recorded in the worker (not imported here: its
    callbacks would connect in this process too)."""
    items = [json.loads(item) for item in config_client().lrange("hookline:test:operational",
                                                                 0, -1)]
    return [item for item in items if item["kind"] == kind]


def config_client() -> redis.Redis:
    return redis.Redis.from_url(URL, decode_responses=True)


def operational_webhooks(receiver: Any, event_type: str) -> list[Any]:
    return [r for r in receiver.requests_to("/ops") if r.json()["type"] == event_type]


def test_a_410_fires_the_disabled_event_once_to_callbacks_and_as_one_webhook(
        receiver, start_worker, private):
    worker = start_worker("operational", extra_env={
        "REDIS_URL": URL, "HOOKLINE_OPERATIONAL_ENDPOINT": "ops",
        "HOOKLINE_WORKER_IMPORTS": "tests.support.operational_hooks"})
    ops = EndpointRegistry().add("ops", receiver.route("/ops", always(Reply(204))))
    EndpointRegistry().add("gone-ep", receiver.route("/gone", always(Reply(410))))
    # Five events at once (eight worker threads): several may meet the 410 together.
    sent = [send_webhook("gone-ep", "order.created", {"n": n}) for n in range(5)]

    # Six webhooks delivered by eight threads at once: the disabled one may come in last.
    wait_until(lambda: len(operational_webhooks(receiver, "message.attempt.exhausted")) == 5
               and operational_webhooks(receiver, "endpoint.disabled"),
               timeout=30, what=lambda: [r.json() for r in receiver.requests_to("/ops")])
    [disabled] = operational_webhooks(receiver, "endpoint.disabled")
    assert disabled.json()["data"] == {"endpoint_id": "gone-ep", "reason": "gone",
                                       "detail": GONE_REASON, "status": 410}
    Webhook(ops.secrets[0]).verify(disabled.body, disabled.headers)  # signed like any other
    exhausted = [r.json()["data"] for r in
                 operational_webhooks(receiver, "message.attempt.exhausted")]
    assert sorted(d["event_id"] for d in exhausted) == sorted(sent)
    assert {d["reason"] for d in exhausted} <= {"endpoint_gone", "endpoint_disabled"}
    assert all(d["endpoint_id"] == "gone-ep" for d in exhausted)

    # The callbacks ran in the worker: one disabled, five dead letters; the broken one was
    # logged and changed nothing.
    [heard] = recorded("endpoint_disabled")
    assert heard["reason"] == "gone" and heard["event_id"] == disabled.webhook_id
    assert sorted(d["event_id"] for d in recorded("dead_lettered")) == sorted(sent)
    assert "operational.callback_failed" in worker.output()
    assert DeadLetterQueue().stats().total == 5
    assert len(operational_webhooks(receiver, "endpoint.disabled")) == 1

    # An operator's disable is reported too, with its reason.
    EndpointRegistry().add("other-ep", receiver.route("/other", always(Reply(204))))
    succeeds("endpoint", "disable", "other-ep", "--reason", "customer left")
    wait_until(lambda: len(operational_webhooks(receiver, "endpoint.disabled")) == 2)
    assert operational_webhooks(receiver, "endpoint.disabled")[1].json()["data"] == {
        "endpoint_id": "other-ep", "reason": "operator", "detail": "customer left",
        "status": None}


def test_a_410_fires_the_django_and_flask_signals_and_the_callbacks_in_process(receiver):
    from hookline.contrib import django as django_hooks
    from hookline.contrib import flask as flask_hooks

    EndpointRegistry().add("gone-signals", receiver.route("/gone-signals", always(Reply(410))))
    heard: list[tuple[str, Any, dict[str, Any]]] = []

    def on_django(sender: Any, **kwargs: Any) -> None:
        heard.append(("django", sender, kwargs))

    def on_django_broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("a receiver with a bug")

    def on_flask(sender: Any, **kwargs: Any) -> None:
        heard.append(("flask", sender, kwargs))

    def on_callback(event: operational_events.OperationalEvent) -> None:
        heard.append(("callback", event.endpoint_id, dict(event.data)))

    django_hooks.endpoint_disabled.connect(on_django_broken, weak=False)
    django_hooks.endpoint_disabled.connect(on_django, weak=False)
    flask_hooks.endpoint_disabled.connect(on_flask, weak=False)
    operational_events.connect(operational_events.ENDPOINT_DISABLED, on_callback)
    try:
        outcome = DeliveryEngine().attempt(
            DeliveryRequest("gone-signals", "order.created", {"n": 1}, "evt-signals"),
            token="t")
    finally:
        django_hooks.endpoint_disabled.disconnect(on_django_broken)
        django_hooks.endpoint_disabled.disconnect(on_django)
        flask_hooks.endpoint_disabled.disconnect(on_flask)
        operational_events.disconnect(operational_events.ENDPOINT_DISABLED, on_callback)
    assert outcome == Finished("dead_lettered", reason="endpoint_gone", status=410)
    assert sorted(name for name, _, _ in heard) == ["callback", "django", "flask"]
    for name, sender, kwargs in heard:
        assert sender == "gone-signals", name
        assert kwargs["reason"] == "gone" and kwargs["status"] == 410, name
    django_kwargs = next(kwargs for name, _, kwargs in heard if name == "django")
    assert django_kwargs["event"].kind == "endpoint_disabled"
    assert json.dumps(django_kwargs["event"].payload())  # what the webhook would carry


def test_a_breaker_opening_and_closing_is_reported_as_failing_then_recovered(receiver):
    EndpointRegistry().add("flaky-ops", receiver.route("/flaky", always(Reply(503))))
    heard: list[operational_events.OperationalEvent] = []
    operational_events.connect("*", heard.append)
    engine = DeliveryEngine()
    try:
        for n in range(5):  # HOOKLINE_BREAKER_THRESHOLD=5 in the tests
            engine.attempt(DeliveryRequest("flaky-ops", "order.created", {}, f"f-{n}"),
                           token=f"t{n}")
        assert [e.kind for e in heard] == ["endpoint_failing"]
        assert heard[0].data == {"event_id": "f-4", "attempt": 1}
        receiver.route("/flaky", always(Reply(204)))
        # Once the cool-down is over the next attempt is the probe; it succeeds and closes.
        wait_until(lambda: isinstance(engine.attempt(
            DeliveryRequest("flaky-ops", "order.created", {}, "f-probe"), token="probe"),
            Finished), timeout=10)
    finally:
        operational_events.disconnect("*", heard.append)
    assert [e.kind for e in heard] == ["endpoint_failing", "endpoint_recovered"]
    assert heard[1].data == {"event_id": "f-probe", "attempt": 1}
