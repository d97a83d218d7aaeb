"""End to end, with the session worker and a real receiver: an event id is an idempotency key
(a different content under a used id is refused at enqueue, dead-lettered as ``conflict`` in
the worker, never silently dropped); the body is byte-identical on every attempt, retry and
replay; a receiver's answer with unreadable headers is recorded as what it is.

Worker settings (tests/conftest.py): 4 attempts, backoff from 0.2 s, read timeout 1 s.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import pytest
from standardwebhooks import Webhook

from examples.receiver import Reply, always, fail_first
from hookline import EventIdConflict, deliver, send_webhook
from hookline.delivery.replay import replay_entries
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.history import AttemptHistory
from tests.support.cli import fails, json_out, succeeds
from tests.support.endpoints import dead_letter, new_endpoint, wait_delivered

pytestmark = pytest.mark.usefixtures("worker")


def test_a_retry_sends_the_same_body_bytes_signed_again(receiver):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(503)))
    event_id = deliver.delay(endpoint.id, "order.created", {"order": 1, "note": "é"}).id
    wait_delivered(endpoint.id, event_id)
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert first.body == second.body
    for request in (first, second):
        Webhook(endpoint.secrets[0]).verify(request.body, request.headers)
    # The timestamp is the publish time, before the first attempt reached the receiver.
    when = datetime.fromisoformat(json.loads(first.body)["timestamp"]).timestamp()
    assert when <= first.at


def test_a_replayed_dead_letter_sends_the_same_body_bytes(receiver):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(400)))
    event_id = send_webhook(endpoint.id, "order.created", {"order": 2})
    entry = dead_letter(endpoint.id, event_id)
    assert entry.reason == "rejected" and entry.enqueued_at is not None
    replay_entries(DeadLetterQueue(), [entry])
    wait_delivered(endpoint.id, event_id)
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert second.status == 204
    assert first.body == second.body
    Webhook(endpoint.secrets[0]).verify(second.body, second.headers)


def test_same_id_different_payload_through_delay_is_a_conflict_dead_letter(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = f"evt-{uuid.uuid4().hex}"
    deliver.delay(endpoint.id, "order.created", {"total": "10.00"}, event_id=event_id)
    wait_delivered(endpoint.id, event_id)
    deliver.delay(endpoint.id, "order.created", {"total": "10.00"}, event_id=event_id)
    deliver.delay(endpoint.id, "order.created", {"total": "99.00"}, event_id=event_id)
    conflict = dead_letter(endpoint.id, event_id + "#conflict")
    assert conflict.reason == "conflict" and conflict.payload == {"total": "99.00"}
    marker = deliver.delay(endpoint.id, "order.created", {}).id  # queued after them
    wait_delivered(endpoint.id, marker)
    sent = [json.loads(r.body)["data"] for r in receiver.requests_to(f"/{endpoint.id}")
            if r.webhook_id == event_id]
    assert sent == [{"total": "10.00"}]  # once, with the first content
    # An operator finds it by the event's id.
    [shown] = json_out("event", "show", event_id)["deliveries"]
    assert shown["state"] == "delivered" and shown["conflict"]["reason"] == "conflict"
    text = succeeds("event", "show", event_id).output
    assert "conflict" in text and f"{endpoint.id}/{event_id}#conflict" in text
    assert json_out("dlq", "list", "--reason", "conflict")[0]["event_id"] == event_id


def test_hookline_send_refuses_a_used_id_with_other_content(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    succeeds("send", endpoint.id, "--type", "order.created", "--payload", '{"n": 1}',
             "--event-id", "order-7")
    succeeds("send", endpoint.id, "--type", "order.created", "--payload", '{"n": 1}',
             "--event-id", "order-7")  # the same event again: fine, sent once
    result = fails("send", endpoint.id, "--type", "order.created", "--payload", '{"n": 2}',
                   "--event-id", "order-7")
    assert result.output.startswith("Error: event id 'order-7' was already sent to endpoint")
    with pytest.raises(EventIdConflict):
        send_webhook(endpoint.id, "order.shipped", {"n": 1}, "order-7")
    wait_delivered(endpoint.id, "order-7")


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ({f"X-H{n}": "v" for n in range(200)},
         "malformed_response: too many headers (over 100) after status 200"),
        ({"X-Big": "v" * 70_000},
         "malformed_response: header line too long (over 65536 bytes) after status 200"),
    ],
    ids=["200-headers", "70KB-header"],
)
def test_an_answer_with_unreadable_headers_is_recorded_as_malformed_and_retried(
        receiver, headers, error):
    endpoint = new_endpoint(receiver, always(Reply(200, headers=headers)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    entry = dead_letter(endpoint.id, event_id)
    # A receiver fault, retried like a broken connection until the attempts are used up; what
    # is recorded says what happened.
    assert (entry.reason, entry.attempts, entry.last_status) == ("exhausted", 4, None)
    assert entry.last_error == error
    attempts = AttemptHistory().attempts(endpoint.id, event_id)
    assert [(record.error, record.status) for record in attempts] == [(error, None)] * 4
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 4
