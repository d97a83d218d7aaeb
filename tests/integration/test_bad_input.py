"""Bad input at the worker: each ends delivered, retried or dead-lettered with a reason, and the
worker keeps working. (Input refused where it enters: tests/test_enqueue.py, test_ssrf.py.)"""

from __future__ import annotations

import json
import uuid

import pytest

from examples.receiver import Reply, always, fail_first
from hookline import send_webhook
from hookline.store import connection as store
from hookline.store.deadletter import DeadLetterFilter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


def new_endpoint(receiver, behaviour):
    endpoint_id = f"ep-{uuid.uuid4().hex[:10]}"
    return EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", behaviour))


@pytest.mark.parametrize("value", ["soon", "-5", "Mon, 99 Foo 2023", "1.5"])
def test_an_invalid_retry_after_leaves_the_retry_to_the_policy(receiver, value):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(503, headers={"Retry-After": value})))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert second.at - first.at < 1.5  # the policy's 0.2 s, not a block
    assert Gate().breaker_status(endpoint.id).blocked_until is None


def test_a_receiver_closing_mid_response_is_judged_by_its_status(receiver):
    endpoint = new_endpoint(receiver, always(Reply(200, body=b"partial body", action="cut")))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 1


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"this is not json at all", "not a broker message"),
        (b'{"hello": "json, but not a kombu envelope"}', "not a broker message"),
        (b"[1, 2, 3]", "not a broker message"),
        (json.dumps({"body": "e30=", "headers": {"id": "t-unknown", "task": "no.such.task"},
                     "content-type": "application/json", "content-encoding": "utf-8",
                     "properties": {"delivery_tag": "x1", "body_encoding": "base64",
                                    "delivery_info": {"exchange": "", "routing_key": "hookline"},
                                    "priority": 0}}).encode(), "unknown task"),
    ],
)
def test_a_malformed_message_on_the_queue_is_kept_and_the_worker_goes_on(receiver, raw, problem):
    before = {entry.id for entry in DeadLetterQueue().find(DeadLetterFilter(reason="malformed"))}
    store.client().lpush("hookline", raw)
    entry = wait_until(lambda: next(
        (e for e in DeadLetterQueue().find(DeadLetterFilter(reason="malformed"))
         if e.id not in before), None))
    assert problem in entry.last_error
    if problem == "not a broker message":
        assert entry.payload == raw.decode()  # the item itself, kept as text
    wait_until(lambda: store.client().llen("hookline") == 0)  # removed once kept, not before
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
