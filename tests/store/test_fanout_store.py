"""The fan-out's record and cursor on the real Redis, no worker (a database of its own): the
receivers fixed at publish, a resumed fan-out enqueuing only what its cursor had not reached,
a finished one enqueuing nothing, and Redis round trips that do not grow with the endpoints."""

from __future__ import annotations

import json

import pytest
import redis

from hookline import publish
from hookline.core.messages import DELIVERY_QUEUE, FANOUT_TASK_NAME
from hookline.delivery.fanout import expand
from hookline.store import keys
from hookline.store.apps import AppInUse, AppRegistry
from hookline.store.endpoints import EndpointRegistry
from hookline.store.fanouts import FanoutLog


def queued(client) -> list[tuple[str, str, str]]:
    """(task name, first argument, event id) of each message on the delivery queue, oldest
    first."""
    found = []
    for text in reversed(client.lrange(DELIVERY_QUEUE, 0, -1)):
        headers = json.loads(text)["headers"]
        found.append((headers["task"], headers.get("hookline_endpoint") or "",
                      headers.get("hookline_event") or ""))
    return found


@pytest.fixture
def app_of_twenty(quiet_redis):
    AppRegistry().add("tenant")
    registry = EndpointRegistry()
    for n in range(20):
        registry.add(f"ep-{n:02d}", f"http://127.0.0.1:9/{n}", app="tenant",
                     event_types="order.*" if n % 2 else None)
    return quiet_redis


def test_publish_records_the_receivers_and_enqueues_one_fanout_task(app_of_twenty):
    event_id = publish("tenant", "order.created", {"n": 1}, event_id="e-1")
    record = FanoutLog().get("tenant", event_id)
    assert record.receivers == tuple(f"ep-{n:02d}" for n in range(20))
    assert record.cursor == 0 and record.payload == '{"n":1}'
    assert queued(app_of_twenty) == [(FANOUT_TASK_NAME, "", "")]
    # Only the endpoints without a filter receive another type.
    other = publish("tenant", "user.created", {}, event_id="e-2")
    assert FanoutLog().get("tenant", other).receivers == tuple(
        f"ep-{n:02d}" for n in range(0, 20, 2))


def test_a_fan_out_resumes_after_its_last_recorded_batch(app_of_twenty):
    publish("tenant", "order.created", {"n": 1}, event_id="e-1")
    app_of_twenty.delete(DELIVERY_QUEUE)
    log = FanoutLog()
    # As if a worker had enqueued the first two batches of 3, recorded them, then died.
    log.advance("tenant", "e-1", 6, 20)
    assert expand("tenant", "e-1", batch=3) == 14
    assert [endpoint for _, endpoint, _ in queued(app_of_twenty)] == [
        f"ep-{n:02d}" for n in range(6, 20)]
    record = log.get("tenant", "e-1")
    assert record.finished and record.payload is None and record.finished_at
    assert expand("tenant", "e-1") == 0  # a redelivered fan-out task: nothing more
    assert len(queued(app_of_twenty)) == 14
    # The cursor never moves back (a slower twin of the fan-out task).
    assert log.advance("tenant", "e-1", 3, 20) == 20


def test_republishing_an_unfinished_fan_out_resumes_it_and_a_finished_one_adds_nothing(
        app_of_twenty):
    publish("tenant", "order.created", {"n": 1}, event_id="e-1")
    publish("tenant", "order.created", {"n": 1}, event_id="e-1")
    assert [name for name, _, _ in queued(app_of_twenty)] == [FANOUT_TASK_NAME] * 2
    app_of_twenty.delete(DELIVERY_QUEUE)
    assert expand("tenant", "e-1") == 20
    app_of_twenty.delete(DELIVERY_QUEUE)
    publish("tenant", "order.created", {"n": 1}, event_id="e-1")
    assert queued(app_of_twenty) == []


def test_deliveries_carry_the_event_id_and_ids_only_in_the_fanout_task(app_of_twenty):
    publish("tenant", "order.created", {"secret-looking": "x"}, event_id="e-1")
    [message] = [json.loads(text) for text in app_of_twenty.lrange(DELIVERY_QUEUE, 0, -1)]
    assert message["headers"]["argsrepr"] == repr(("tenant", "e-1"))
    app_of_twenty.delete(DELIVERY_QUEUE)
    expand("tenant", "e-1")
    events = {event for _, _, event in queued(app_of_twenty)}
    assert events == {"e-1"}


def round_trips(monkeypatch, action) -> int:
    """Requests this process writes to Redis while ``action`` runs (a pipeline is one; the
    state client's and the broker's connections alike)."""
    sent = []
    original = redis.connection.Connection.send_packed_command

    def counted(self, command, check_health=True):
        sent.append(1)
        return original(self, command, check_health)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counted)
    action()
    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", original)
    return len(sent)


def test_publish_and_fan_out_cost_round_trips_that_do_not_grow_per_endpoint(quiet_redis,
                                                                           monkeypatch):
    registry = EndpointRegistry()
    for app_id, count in (("small", 5), ("large", 400)):
        AppRegistry().add(app_id)
        for n in range(count):
            registry.add(f"{app_id}-{n:03d}", f"http://127.0.0.1:9/{n}", app=app_id)
    publish("small", "order.created", {}, event_id="warm-up")  # scripts loaded, pools open
    expand("small", "warm-up")
    cost = {app_id: round_trips(monkeypatch, lambda app_id=app_id: (
        publish(app_id, "order.created", {"n": 1}, event_id="e-1"), expand(app_id, "e-1")))
        for app_id in ("small", "large")}
    assert len(queued(quiet_redis)) == 3 + 5 + 5 + 400  # three fan-out tasks, deliveries
    print(f"\nround trips, publish + fan-out: {cost}")
    assert cost["large"] <= cost["small"] + 2, cost


def test_an_application_with_endpoints_cannot_be_removed(app_of_twenty):
    with pytest.raises(AppInUse, match="still has 20 endpoint"):
        AppRegistry().remove("tenant")
    assert app_of_twenty.sismember(keys.app_endpoints_key("tenant"), "ep-00")


def test_with_a_separate_broker_the_fan_out_goes_through_the_producer(quiet_redis):
    """A broker other than Hookline's Redis: batches are published through one producer,
    then counted; the deliveries land on that broker's queue."""
    from hookline.core import config
    from tests.conftest import emptied, isolated_url

    broker_url = isolated_url(4)  # a database no other test uses
    broker = emptied(broker_url)
    state_url = config.settings().redis_url
    config.configure({"REDIS_URL": state_url, "HOOKLINE_BROKER_URL": broker_url})
    try:
        AppRegistry().add("tenant")
        for n in range(7):
            EndpointRegistry().add(f"ep-{n}", f"http://127.0.0.1:9/{n}", app="tenant")
        publish("tenant", "order.created", {"n": 1}, event_id="e-1")
        broker.delete(DELIVERY_QUEUE)
        assert expand("tenant", "e-1", batch=3) == 7
        assert [endpoint for _, endpoint, _ in queued(broker)] == [f"ep-{n}" for n in range(7)]
        assert queued(quiet_redis) == []
        assert FanoutLog().get("tenant", "e-1").finished
    finally:
        config.configure({"REDIS_URL": state_url, "HOOKLINE_BROKER_URL": state_url})
        emptied(broker_url).close()
        broker.close()


@pytest.mark.parametrize(("arguments", "field", "message"), [
    (("nowhere", "order.created", {}), "app_id", "no application 'nowhere'"),
    (("bad app", "order.created", {}), "app_id", "application id 'bad app' is invalid"),
    (("tenant", "order\ncreated", {}), "event_type", "event type"),
    (("tenant", "order.created", {"when": object()}), "payload", "not JSON-serialisable"),
    (("tenant", "order.created", {"blob": "x" * 300_000}), "payload", "the limit is"),
    (("tenant", "order.created", float("nan")), "payload", "not JSON-serialisable"),
])
def test_publish_refuses_bad_input_naming_the_field(app_of_twenty, arguments, field, message):
    from hookline import WebhookInputError

    with pytest.raises(WebhookInputError, match=message) as refused:
        publish(*arguments)
    assert refused.value.field == field
    assert queued(app_of_twenty) == []


@pytest.mark.parametrize(("options", "field"), [
    ({"channels": ["e u"]}, "channels"),
    ({"channels": [f"c{n}" for n in range(11)]}, "channels"),
    ({"event_id": "has space"}, "event_id"),
    ({"deadline": "tomorrow"}, "deadline"),
])
def test_publish_refuses_bad_options_naming_the_field(app_of_twenty, options, field):
    from hookline import WebhookInputError

    with pytest.raises(WebhookInputError) as refused:
        publish("tenant", "order.created", {}, **options)
    assert refused.value.field == field


@pytest.mark.parametrize("event_id", ['odd"id\\with/quotes', "x@@hookline-endpoint@@y"])
def test_fan_out_messages_carry_any_event_id_exactly(app_of_twenty, event_id):
    """The deliveries' messages are filled in from one template: an event id that needs JSON
    escaping, or holds a stand-in's text, still arrives as it is."""
    from hookline.core.envelope import decode_task

    publish("tenant", "order.created", {"text": "é\"\\"}, event_id=event_id)
    app_of_twenty.delete(DELIVERY_QUEUE)
    expand("tenant", event_id)
    for number, text in enumerate(reversed(app_of_twenty.lrange(DELIVERY_QUEUE, 0, -1))):
        endpoint_id = f"ep-{number:02d}"
        task_id, args, kwargs = decode_task(text)
        headers = json.loads(text)["headers"]
        assert task_id == f"{endpoint_id}/{event_id}"
        assert args == [endpoint_id, "order.created", {"text": "é\"\\"}]
        assert kwargs["event_id"] == event_id
        assert (headers["hookline_endpoint"], headers["hookline_event"]) == (endpoint_id,
                                                                             event_id)
        assert headers["argsrepr"] == repr((endpoint_id, "order.created", "<payload: 17 bytes>"))


# -- a publisher that died between recording an event and queueing its fan-out -------------


def pending(client) -> dict[str, float]:
    return dict(client.zrange(keys.FANOUTS_PENDING_KEY, 0, -1, withscores=True))


def test_a_fan_out_is_marked_pending_until_its_task_has_queued_every_delivery(app_of_twenty):
    import time

    before = time.time()
    publish("tenant", "order.created", {"n": 1}, event_id="e-1")
    [(member, look_at)] = pending(app_of_twenty).items()
    assert json.loads(member) == ["tenant", "e-1"]
    assert before + 30 < look_at < time.time() + 120  # looked at only if still unfinished then
    expand("tenant", "e-1")
    assert pending(app_of_twenty) == {}
    # An event without receivers has ended at publish: nothing to look at.
    AppRegistry().add("empty")
    publish("empty", "order.created", {}, event_id="e-3")
    assert pending(app_of_twenty) == {}


def test_a_releaser_queues_again_the_fan_out_a_dead_publisher_never_queued(app_of_twenty):
    """As if the publisher died right after recording the event: its fan-out task was never
    queued. When the event's time comes a releaser's sweep queues it (once, however many
    releasers look), and forgets it once the fan-out has finished."""
    from hookline.delivery.fanout import FANOUT_LOOK_AFTER, sweep_fanouts
    from hookline.store.fanouts import PublishedEvent

    log = FanoutLog()
    receivers = tuple(f"ep-{n:02d}" for n in range(20))
    log.mark_pending("tenant", "e-1", 1000.0)
    log.record(PublishedEvent(app_id="tenant", event_id="e-1", event_type="order.created",
                              payload='{"n":1}', channels=(), deadline=None,
                              receivers=receivers, cursor=0, published_at=1000.0,
                              finished_at=None), "digest-1")
    assert queued(app_of_twenty) == []
    assert sweep_fanouts(now=999.0) == 0  # not yet its time
    assert sweep_fanouts(now=1001.0) == 1
    assert sweep_fanouts(now=1001.0) == 0  # another releaser at the same moment: no twin
    assert queued(app_of_twenty) == [(FANOUT_TASK_NAME, "", "")]
    assert list(pending(app_of_twenty).values()) == [
        (1001.0 // FANOUT_LOOK_AFTER + 2) * FANOUT_LOOK_AFTER]
    app_of_twenty.delete(DELIVERY_QUEUE)
    assert expand("tenant", "e-1") == 20  # what the queued task does
    assert pending(app_of_twenty) == {}
    app_of_twenty.delete(DELIVERY_QUEUE)
    # A finished or expired fan-out marked pending is only forgotten.
    log.mark_pending("tenant", "e-1", 1000.0)
    log.mark_pending("tenant", "gone", 1000.0)
    assert sweep_fanouts(now=5000.0) == 0
    assert pending(app_of_twenty) == {} and queued(app_of_twenty) == []
