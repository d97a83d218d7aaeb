"""Publishing to an application: a real worker fans each event out to the endpoints whose
subscription matches, over real HTTP, once each, under one webhook-id; a republished id adds
nothing; the event catalog's schema refuses a bad payload by its path."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from examples.receiver import Reply, always
from hookline import PublishedEventConflict, SchemaViolation, publish
from hookline.store.apps import AppRegistry
from hookline.store.catalog import EventCatalog
from hookline.store.endpoints import EndpointRegistry
from hookline.store.fanouts import FanoutLog
from hookline.store.gates import Gate
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


def new_app(receiver, subscriptions: dict[str, dict[str, str]]) -> str:
    """An application whose endpoints (name -> ``events``/``channels`` options) answer 204
    on the receiver at ``/<app>/<name>``."""
    app_id = f"app-{uuid.uuid4().hex[:8]}"
    AppRegistry().add(app_id, name="test tenant")
    registry = EndpointRegistry()
    for name, options in subscriptions.items():
        url = receiver.route(f"/{app_id}/{name}", always(Reply(204)))
        registry.add(f"{app_id}-{name}", url, app=app_id, **options)
    return app_id


def wait_fanned_out(app_id: str, event_id: str, expected: set[str]) -> None:
    """Wait until the fan-out of ``event_id`` ended and each expected endpoint's delivery was
    recorded."""
    log, gate = FanoutLog(), Gate()
    wait_until(lambda: (record := log.get(app_id, event_id)) is not None and record.finished,
               timeout=20, what=f"the fan-out of {event_id}")
    wait_until(lambda: all(gate.is_delivered(f"{app_id}-{name}", event_id)
                           for name in expected), timeout=20,
               what=f"{event_id} delivered to {sorted(expected)}")


def test_each_published_event_reaches_exactly_the_endpoints_that_subscribed(receiver):
    app_id = new_app(receiver, {
        "exact": {"event_types": "order.created"},
        "wildcard": {"event_types": "order.*"},
        "channel": {"channels": "eu"},
        "everything": {},
        "both": {"event_types": "invoice.*", "channels": "us,apac"},
    })
    expected = {
        ("order.created", ("eu",)): {"exact", "wildcard", "channel", "everything"},
        ("order.item.added", ()): {"wildcard", "everything"},
        ("invoice.paid", ("us",)): {"everything", "both"},
        ("invoice.paid", ("eu",)): {"channel", "everything"},
        ("user.deleted", ()): {"everything"},
        ("order", ("apac",)): {"everything"},
    }
    sent = {}
    for (event_type, channels), names in expected.items():
        event_id = publish(app_id, event_type, {"type": event_type}, channels=channels)
        sent[event_id] = names
    for event_id, names in sent.items():
        assert set(FanoutLog().get(app_id, event_id).receivers) == {
            f"{app_id}-{name}" for name in names}
        wait_fanned_out(app_id, event_id, names)
    received = Counter((r.path.rsplit("/", 1)[1], r.headers["webhook-id"])
                       for r in receiver.received)
    assert received == Counter({(name, event_id): 1 for event_id, names in sent.items()
                                for name in names})


def test_a_disabled_endpoint_is_left_out_of_the_fan_out(receiver):
    app_id = new_app(receiver, {"on": {}, "off": {}})
    EndpointRegistry().disable(f"{app_id}-off")
    event_id = publish(app_id, "order.created", {"order": 1})
    assert FanoutLog().get(app_id, event_id).receivers == (f"{app_id}-on",)
    wait_fanned_out(app_id, event_id, {"on"})


def test_republishing_an_event_id_adds_nothing_and_other_content_is_refused(
        receiver, published):
    app_id = new_app(receiver, {"a": {}, "b": {"event_types": "order.*"}})
    event_id = publish(app_id, "order.created", {"order": 7}, event_id="evt-republished")
    assert publish(app_id, "order.created", {"order": 7}, event_id=event_id) == event_id
    wait_fanned_out(app_id, event_id, {"a", "b"})
    before = len(published.task_ids)
    # Published again once the fan-out ended: nothing is recorded, nothing enqueued.
    assert publish(app_id, "order.created", {"order": 7}, event_id=event_id) == event_id
    assert len(published.task_ids) == before
    with pytest.raises(PublishedEventConflict, match="different event type, payload"):
        publish(app_id, "order.created", {"order": 8}, event_id=event_id)
    with pytest.raises(PublishedEventConflict):
        publish(app_id, "order.created", {"order": 7}, event_id=event_id, channels=["eu"])
    # An endpoint added afterwards does not receive the event: receivers are fixed at publish.
    EndpointRegistry().add(f"{app_id}-late", receiver.route(f"/{app_id}/late",
                                                            always(Reply(204))), app=app_id)
    assert publish(app_id, "order.created", {"order": 7}, event_id=event_id) == event_id
    assert len(published.task_ids) == before
    webhook_ids = Counter(r.path.rsplit("/", 1)[1] for r in receiver.received
                          if r.headers["webhook-id"] == event_id)
    assert webhook_ids == Counter({"a": 1, "b": 1})


def test_a_payload_breaking_its_types_schema_is_refused_with_the_failing_path(receiver):
    EventCatalog().add("order.created", schema={
        "type": "object", "required": ["order"],
        "properties": {"order": {"type": "object", "properties": {
            "total": {"type": "number"},
            "items": {"type": "array", "items": {"type": "string"}}}}}})
    app_id = new_app(receiver, {"a": {"event_types": "order.*"}})
    with pytest.raises(SchemaViolation, match=r"\$\.order\.total: 'x' is not of type 'number'"
                       ) as refused:
        publish(app_id, "order.created", {"order": {"total": "x"}})
    assert refused.value.path == "$.order.total"
    with pytest.raises(SchemaViolation, match=r"\$\.order\.items\[1\]"):
        publish(app_id, "order.created", {"order": {"total": 1, "items": ["a", 2]}})
    with pytest.raises(SchemaViolation, match=r"\$: 'order' is a required property"):
        publish(app_id, "order.created", {})
    event_id = publish(app_id, "order.created", {"order": {"total": 9.5, "items": ["a"]}})
    wait_fanned_out(app_id, event_id, {"a"})


def test_a_fan_out_a_dead_publisher_never_queued_is_delivered_by_the_workers(receiver):
    """The publisher recorded the event and died before queueing its fan-out task (here: the
    record written, the task never sent, its look due now). A worker's releaser finds it and
    queues the fan-out: every receiver gets the event, once."""
    from hookline.store.fanouts import PublishedEvent

    app_id = new_app(receiver, {"a": {}, "b": {}, "c": {}})
    log = FanoutLog()
    receivers = tuple(f"{app_id}-{name}" for name in ("a", "b", "c"))
    log.mark_pending(app_id, "orphan-1", 0.0)  # its time has come
    log.record(PublishedEvent(app_id=app_id, event_id="orphan-1", event_type="order.created",
                              payload='{"n":1}', channels=(), deadline=None,
                              receivers=receivers, cursor=0, published_at=0.0,
                              finished_at=None), "digest-orphan")
    wait_fanned_out(app_id, "orphan-1", {"a", "b", "c"})
    got = Counter(r.path for r in receiver.received if r.webhook_id == "orphan-1")
    assert got == {f"/{app_id}/{name}": 1 for name in ("a", "b", "c")}
