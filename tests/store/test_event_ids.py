"""An event id is an idempotency key (per endpoint): the same id with the same content is one
event, with another content a conflict, refused at enqueue and dead-lettered in the worker.
And the body is fixed at publish: its timestamp is the message's ``enqueued_at``.

Real Redis; the worker side runs the engine in-process with a fake sender (the worker-process
versions are in tests/integration/test_event_ids_e2e.py and tests/faults/test_body_fixed.py)."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import redis

import hookline
import hookline.celeryconfig  # read now, as the session does: tests below reconfigure settings
from hookline import EventIdConflict, WebhookInputError, send_webhook
from hookline.api.enqueue import prepare_event
from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.envelope import decode_message
from hookline.core.event import MalformedEvent
from hookline.core.identity import canonical_json, content_digest, publish_time
from hookline.core.messages import DELIVERY_QUEUE
from hookline.core.specs import EventSpec
from hookline.delivery.engine import DeliveryEngine, DeliveryRequest, Finished, RetryDue
from hookline.delivery.replay import replay_entries
from hookline.delivery.sender import AttemptResult, WebhookEvent
from hookline.store import connection, delivery, keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.events import EventView
from hookline.store.gates import Gate, Verdict
from hookline.store.schedule import RetrySchedule


def queued(client: Any) -> list[tuple[list[Any], dict[str, Any]]]:
    """(args, kwargs) of the messages on the first-delivery queue, oldest first."""
    found = []
    for text in reversed(client.lrange(DELIVERY_QUEUE, 0, -1)):
        args, kwargs, _ = json.loads(base64.b64decode(json.loads(text)["body"]))
        found.append((args, kwargs))
    return found


@pytest.fixture
def shop(quiet_redis) -> Endpoint:
    return EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")


# -- what the content is ---------------------------------------------------------------------


def test_the_digest_covers_type_and_payload_but_not_key_order():
    digest = content_digest("order.created", {"a": 1, "b": [1, {"y": 2, "x": 1}]})
    assert digest == content_digest("order.created", {"b": [1, {"x": 1, "y": 2}], "a": 1})
    assert digest != content_digest("order.updated", {"a": 1, "b": [1, {"y": 2, "x": 1}]})
    assert digest != content_digest("order.created", {"a": 1, "b": [1, {"y": 2, "x": 2}]})
    assert digest != content_digest("order.created", {"a": "1", "b": [1, {"y": 2, "x": 1}]})
    # Keys of mixed types are compared as JSON carries them (as strings), without an error.
    assert canonical_json({1: "a", "b": 2}) == '{"1":"a","b":2}'
    assert content_digest("t", {1: "a"}) == content_digest("t", {"1": "a"})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 1e13, "2026-01-01", True])
def test_a_publish_time_that_cannot_be_a_body_timestamp_is_malformed(value):
    with pytest.raises(MalformedEvent, match="enqueued_at"):
        publish_time(value)
    assert publish_time(1_800_000_000) == 1_800_000_000.0


# -- at enqueue --------------------------------------------------------------------------------


def test_same_id_same_content_is_enqueued_again_and_different_content_is_refused(
        shop, quiet_redis):
    assert send_webhook("shop", "order.created", {"n": 1, "m": 2}, "evt-1") == "evt-1"
    # The same content (key order aside) and another deadline: the same event, queued again
    # (the worker's idempotency gate sends it once).
    send_webhook("shop", "order.created", {"m": 2, "n": 1}, "evt-1", deadline=time.time() + 60)
    with pytest.raises(EventIdConflict, match="event id 'evt-1'") as refused:
        send_webhook("shop", "order.created", {"n": 2, "m": 2}, "evt-1")
    assert "endpoint 'shop'" in str(refused.value)
    assert isinstance(refused.value, WebhookInputError)
    assert isinstance(refused.value, hookline.HooklineError)
    assert (refused.value.endpoint_id, refused.value.event_id) == ("shop", "evt-1")
    with pytest.raises(EventIdConflict):
        send_webhook("shop", "order.cancelled", {"n": 1, "m": 2}, "evt-1")
    assert [kwargs["event_id"] for _, kwargs in queued(quiet_redis)] == ["evt-1", "evt-1"]


def test_the_queued_payload_is_the_one_checked_as_json_the_callers_object_left_alone(
        shop, quiet_redis):
    """send_webhook queues the caller's payload without copying it first (its publish
    serialises it before returning): what is queued is its JSON form, as a copy's would be,
    and a change to the caller's object after the call reaches nothing."""
    payload = {"n": 1, 7: "seven", "lines": ({"sku": "a"}, {"sku": "b"}), "z": None}
    send_webhook("shop", "order.created", payload, "evt-json")
    payload["n"] = 2
    payload["lines"][0]["sku"] = "changed"
    [(args, kwargs)] = queued(quiet_redis)
    assert args[2] == {"n": 1, "7": "seven", "lines": [{"sku": "a"}, {"sku": "b"}], "z": None}
    assert list(args[2]) == ["n", "7", "lines", "z"]  # the caller's key order, kept
    assert kwargs["event_id"] == "evt-json"
    # The id is bound to that content: the same again is no conflict, a changed one is.
    send_webhook("shop", "order.created", {"n": 1, "7": "seven", "z": None,
                                           "lines": [{"sku": "a"}, {"sku": "b"}]}, "evt-json")
    with pytest.raises(EventIdConflict):
        send_webhook("shop", "order.created", payload, "evt-json")


def test_the_id_is_scoped_per_endpoint(shop, quiet_redis):
    EndpointRegistry().add("billing", "http://127.0.0.1:9/hook")
    send_webhook("shop", "order.created", {"n": 1}, "evt-2")
    send_webhook("billing", "invoice.paid", {"total": 3}, "evt-2")
    assert len(queued(quiet_redis)) == 2


def test_an_unknown_endpoint_binds_nothing(quiet_redis):
    with pytest.raises(WebhookInputError, match="no endpoint 'nobody'"):
        send_webhook("nobody", "order.created", {}, "evt-3")
    assert quiet_redis.exists(keys.delivery_key("nobody", "evt-3")) == 0
    assert queued(quiet_redis) == []


def test_checking_only_leaves_the_id_free(shop, quiet_redis):
    """What send_webhook_on_commit does at the call: a rolled-back transaction binds nothing."""
    prepare_event(EventSpec("shop", "order.created", {"n": 1}, "evt-4"), bind=False)
    assert quiet_redis.exists(keys.delivery_key("shop", "evt-4")) == 0
    send_webhook("shop", "order.created", {"n": 2}, "evt-4")  # another content: still free
    with pytest.raises(EventIdConflict):
        prepare_event(EventSpec("shop", "order.created", {"n": 1}, "evt-4"), bind=False)


class Counting(redis.Redis):
    """A client that keeps the name of every command it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(str(args[0]).upper())
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        raise AssertionError("send_webhook must not need a pipeline")


@pytest.fixture
def own_redis(tmp_path) -> Iterator[redis.Redis]:
    """A redis-server of this test's own (its counters count this test's commands alone),
    Hookline's state and broker both, as by default."""
    from hookline.core import config
    from tests.conftest import PrivateRedis

    server = PrivateRedis(tmp_path)
    client = server.start()
    config.configure({"REDIS_URL": server.url})
    yield client
    config.configure()
    client.close()
    server.stop()


def round_trips(client: redis.Redis, call: Any) -> tuple[int, dict[str, int]]:
    """Socket reads Redis served during ``call`` (one per round trip), and the commands."""
    client.config_resetstat()
    before = client.info("stats")["total_reads_processed"]
    call()
    after = client.info("stats")["total_reads_processed"]
    commands = {name.removeprefix("cmdstat_"): int(value["calls"])
                for name, value in client.info("commandstats").items()}
    for own in ("info", "config|resetstat"):
        commands.pop(own, None)
    return after - before - 1, commands  # the first INFO's own read is not the call's


def test_send_webhook_is_one_round_trip_on_the_default_broker(own_redis):
    """Claim and push in one script (claim_push.lua) when the broker is Hookline's own Redis:
    send_webhook costs the caller what a plain .delay() does (issue 15)."""
    EndpointRegistry(own_redis).add("shop", "http://127.0.0.1:9/hook")
    send_webhook("shop", "order.created", {"warm": "up"})  # connections and the script
    trips, commands = round_trips(
        own_redis, lambda: send_webhook("shop", "order.created", {"n": 1}, "evt-5"))
    assert trips == 1 and commands.get("evalsha") == 1, commands
    assert own_redis.llen(DELIVERY_QUEUE) == 2
    # Refused in the same trip, and nothing pushed: another content under the id, no endpoint.
    with pytest.raises(EventIdConflict):
        send_webhook("shop", "order.created", {"n": 2}, "evt-5")
    with pytest.raises(WebhookInputError, match="no endpoint 'nobody'"):
        send_webhook("nobody", "order.created", {"n": 1}, "evt-6")
    assert own_redis.llen(DELIVERY_QUEUE) == 2
    assert not own_redis.exists(keys.delivery_key("nobody", "evt-6"))
    # The same content again is enqueued again (and delivered once, by the worker's gate).
    send_webhook("shop", "order.created", {"n": 1}, "evt-5")
    assert own_redis.llen(DELIVERY_QUEUE) == 3


def test_send_webhook_claims_first_when_the_broker_is_elsewhere(shop, quiet_redis, monkeypatch):
    """A separate broker (here a database no worker reads): one claim round trip to
    Hookline's Redis, then the publish to the broker's."""
    from hookline.core import config
    from tests.conftest import emptied, isolated_url

    url = settings().redis_url
    broker = emptied(isolated_url(6))
    config.configure({"REDIS_URL": url, "HOOKLINE_BROKER_URL": isolated_url(6)})
    counting = Counting.from_url(url, decode_responses=True)
    monkeypatch.setattr(connection, "_client", (os.getpid(), url, counting))
    try:
        send_webhook("shop", "order.created", {"warm": "up"})  # loads the script once
        counting.commands.clear()
        send_webhook("shop", "order.created", {"n": 1}, "evt-5")
        assert counting.commands == ["EVALSHA"]
        counting.commands.clear()
        with pytest.raises(EventIdConflict):
            send_webhook("shop", "order.created", {"n": 2}, "evt-5")
        assert counting.commands == ["EVALSHA"]
        assert broker.llen(DELIVERY_QUEUE) == 2
    finally:
        config.configure({"REDIS_URL": url, "HOOKLINE_BROKER_URL": url})
        emptied(isolated_url(6)).close()
        broker.close()


def test_the_binding_lives_as_long_as_the_done_marker(shop, quiet_redis):
    send_webhook("shop", "order.created", {"n": 1}, "evt-6")
    key = keys.delivery_key("shop", "evt-6")
    assert quiet_redis.ttl(key) == pytest.approx(settings().record_ttl, abs=2)
    assert delivery.read(quiet_redis, "shop", "evt-6").digest == content_digest(
        "order.created", {"n": 1})
    engine = DeliveryEngine(Gate(), DeadLetterQueue(), sender=Recorder(ok()))
    [(args, kwargs)] = queued(quiet_redis)
    assert isinstance(engine.attempt(request_from(args, kwargs), token="t"), Finished)
    record = delivery.read(quiet_redis, "shop", "evt-6")
    assert record.done and record.digest == content_digest("order.created", {"n": 1})
    assert quiet_redis.ttl(key) == pytest.approx(settings().record_ttl, abs=2)


def test_hookline_0_2_markers_are_honoured(shop, quiet_redis):
    """An upgrade sends nothing again that 0.2 delivered, and keeps 0.2's bindings."""
    quiet_redis.set(keys.digest_key("shop", "old-1"), content_digest("order.created", {"n": 1}))
    with pytest.raises(EventIdConflict):
        send_webhook("shop", "order.created", {"n": 2}, "old-1")
    gate = Gate()
    assert gate.admit("shop", "old-1", "t", digest=content_digest(
        "order.created", {"n": 2})).verdict is Verdict.CONFLICT
    quiet_redis.set(keys.done_key("shop", "old-2"), "1")
    assert gate.admit("shop", "old-2", "t").verdict is Verdict.DUPLICATE
    assert gate.is_delivered("shop", "old-2")


# -- in the worker (deliver.delay: no enqueue check) ----------------------------------------------


class Recorder:
    """A sender that answers each attempt with the next result (the last repeats) and keeps
    the body each attempt would have sent."""

    def __init__(self, *results: AttemptResult) -> None:
        self.results = list(results)
        self.bodies: list[str] = []

    def __call__(self, endpoint: Endpoint, event: WebhookEvent) -> AttemptResult:
        self.bodies.append(event.body())
        return self.results[min(len(self.bodies), len(self.results)) - 1]


def ok() -> AttemptResult:
    return AttemptResult(status=204, latency=0.01)


def request_from(args: list[Any], kwargs: dict[str, Any]) -> DeliveryRequest:
    return DeliveryRequest(*args, event_id=kwargs["event_id"],
                           enqueued_at=kwargs.get("enqueued_at"))


def test_a_different_content_under_a_delivered_id_is_a_conflict_dead_letter(shop, quiet_redis):
    sender = Recorder(ok())
    engine = DeliveryEngine(Gate(), DeadLetterQueue(), sender=sender)
    first = DeliveryRequest("shop", "order.created", {"n": 1}, "evt-7", enqueued_at=1.0e9)
    assert engine.attempt(first, token="a") == Finished("delivered", status=204)
    # The same content again: a duplicate, not sent.
    assert engine.attempt(first, token="b") == Finished("duplicate")
    # Another payload under the same id: not sent, and not silently dropped.
    other = DeliveryRequest("shop", "order.created", {"n": 2}, "evt-7", enqueued_at=2.0e9)
    assert engine.attempt(other, token="c") == Finished("dead_lettered", reason="conflict")
    assert len(sender.bodies) == 1
    entry = DeadLetterQueue().get("shop/evt-7#conflict")
    assert entry is not None and entry.reason == "conflict" and entry.payload == {"n": 2}
    assert "different event type or payload" in entry.detail
    # Findable by the event's id.
    view = EventView()
    assert view.endpoints_of("evt-7") == ["shop"]
    found = view.delivery("shop", "evt-7")
    assert found.state == "delivered" and found.conflict is not None
    assert found.as_dict()["conflict"]["reason"] == "conflict"


def test_a_conflict_never_replaces_the_dead_letter_of_the_event_owning_the_id(shop, quiet_redis):
    engine = DeliveryEngine(Gate(), DeadLetterQueue(),
                            sender=Recorder(AttemptResult(status=400, latency=0.01)))
    owner = DeliveryRequest("shop", "order.created", {"n": 1}, "evt-8")
    assert engine.attempt(owner, token="a").reason == "rejected"
    other = DeliveryRequest("shop", "order.created", {"n": 9}, "evt-8")
    assert engine.attempt(other, token="b").reason == "conflict"
    queue = DeadLetterQueue()
    assert queue.get("shop/evt-8").payload == {"n": 1}  # the owner's, ready to replay
    assert queue.get("shop/evt-8#conflict").payload == {"n": 9}
    assert queue.stats().by_reason == {"rejected": 1, "conflict": 1}


def test_the_first_content_to_reach_a_worker_owns_a_free_id(shop, quiet_redis):
    """deliver.delay() is not checked at the call: the worker binds the id at its first admit
    (even a deferred one), and send_webhook then refuses another content."""
    engine = DeliveryEngine(Gate(), DeadLetterQueue(), sender=Recorder(ok()))
    engine.attempt(DeliveryRequest("shop", "order.created", {"n": 1}, "evt-9"), token="a")
    with pytest.raises(EventIdConflict):
        send_webhook("shop", "order.created", {"n": 2}, "evt-9")
    send_webhook("shop", "order.created", {"n": 1}, "evt-9")


def test_a_removed_endpoint_binds_nothing_in_the_worker(quiet_redis):
    engine = DeliveryEngine(Gate(), DeadLetterQueue(), sender=Recorder(ok()))
    request = DeliveryRequest("gone", "order.created", {"n": 1}, "evt-10")
    assert engine.attempt(request, token="a").reason == "endpoint_removed"
    assert quiet_redis.exists(keys.delivery_key("gone", "evt-10")) == 0


# -- the body is fixed at publish ---------------------------------------------------------------


def test_the_body_timestamp_is_the_publish_time_on_every_attempt(shop, quiet_redis):
    hookline.deliver.delay("shop", "order.created", {"n": 1}, event_id="evt-11")
    [(args, kwargs)] = queued(quiet_redis)
    published = kwargs["enqueued_at"]
    sender = Recorder(AttemptResult(status=503, latency=0.01), ok())
    engine = DeliveryEngine(Gate(), DeadLetterQueue(), sender=sender)
    request = request_from(args, kwargs)
    time.sleep(0.01)  # the attempts happen after the publish
    retry = engine.attempt(request, token="a")
    assert isinstance(retry, RetryDue) and retry.request.enqueued_at == published
    assert engine.attempt(retry.request, token="b").outcome == "delivered"
    first, second = sender.bodies
    assert first == second
    when = json.loads(first)["timestamp"]
    assert when.endswith("Z")
    assert datetime.fromisoformat(when).timestamp() == pytest.approx(published, abs=1e-6)


def test_a_replay_carries_the_publish_time_so_the_body_is_the_same(shop, quiet_redis):
    sender = Recorder(AttemptResult(status=400, latency=0.01), ok())
    engine = DeliveryEngine(Gate(), DeadLetterQueue(), sender=sender)
    request = DeliveryRequest("shop", "order.created", {"n": 1}, "evt-12",
                              enqueued_at=1_700_000_000.25)
    assert engine.attempt(request, token="a").reason == "rejected"
    queue = DeadLetterQueue()
    entry = queue.get("shop/evt-12")
    assert entry is not None and entry.enqueued_at == 1_700_000_000.25
    replay_entries(queue, [entry])  # straight onto the queue
    [(args, kwargs)] = queued(quiet_redis)
    assert kwargs["enqueued_at"] == 1_700_000_000.25
    assert engine.attempt(request_from(args, kwargs), token="b").outcome == "delivered"
    assert sender.bodies[0] == sender.bodies[1]
    assert '"timestamp":"2023-11-14T22:13:20.250000Z"' in sender.bodies[0]


def test_a_throttled_replay_parks_the_publish_time_too(shop, quiet_redis):
    entries = [DeadLetter("shop", f"evt-13-{n}", "order.created", {}, "rejected",
                          enqueued_at=1_700_000_000.0 + n) for n in range(2)]
    entries.append(DeadLetter("shop", "evt-13-old", "order.created", {}, "rejected",
                              first_attempt_at=1_600_000_000.0))  # from before enqueued_at
    queue = DeadLetterQueue()
    for entry in entries:
        queue.add(entry)
    replay_entries(queue, entries, interval=60.0)
    schedule = RetrySchedule()
    kept = {retry.event_id: retry.enqueued_at for retry in schedule.scheduled("shop")}
    assert kept == {"evt-13-0": 1_700_000_000.0, "evt-13-1": 1_700_000_001.0,
                    "evt-13-old": 1_600_000_000.0}
    message = quiet_redis.hget(keys.MESSAGES_KEY, "shop/evt-13-0")
    assert decode_message(message)[1]["enqueued_at"] == 1_700_000_000.0

