"""End to end: a real worker process delivers to a real HTTP receiver through a real Redis.

Worker settings (tests/conftest.py): initial backoff 0.2 s doubling to 1.5 s, jitter 0.2,
4 attempts, read timeout 1 s, Retry-After capped at 3 s.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid

import pytest
from standardwebhooks import Webhook

from examples.receiver import Reply, always, fail_first
from hookline import deliver, send_webhook
from hookline.delivery.replay import replay_entries
from hookline.delivery.retries import disable_endpoint, remove_endpoint
from hookline.store.dead_letter_queue import DeadLetterFilter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until
from tests.support.endpoints import dead_letter, new_endpoint, wait_delivered

pytestmark = pytest.mark.usefixtures("worker")

INITIAL_BACKOFF, JITTER = 0.2, 0.2


def test_delivers_a_signed_standard_webhook(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {"order": 42, "total": "9.90"})
    wait_delivered(endpoint.id, event_id)
    [request] = receiver.requests_to(f"/{endpoint.id}")
    headers = request.headers
    assert headers["webhook-id"] == event_id
    assert headers["idempotency-key"] == event_id
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("hookline/")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 30
    body = Webhook(endpoint.secrets[0]).verify(request.body, headers)
    assert body["type"] == "order.created"
    assert body["data"] == {"order": 42, "total": "9.90"}
    assert body["timestamp"].endswith("Z")


def test_signature_made_with_another_secret_is_refused(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {"order": 1})
    wait_delivered(endpoint.id, event_id)
    [request] = receiver.requests_to(f"/{endpoint.id}")
    other = EndpointRegistry().add("other-secret", "http://127.0.0.1:9/").secrets[0]
    with pytest.raises(Exception, match="signature"):
        Webhook(other).verify(request.body, request.headers)


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_retryable_status_is_retried_with_the_same_event_id_and_body(receiver, status):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(status)))
    event_id = send_webhook(endpoint.id, "order.created", {"status": status})
    wait_delivered(endpoint.id, event_id)
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert (first.status, second.status) == (status, 204)
    assert first.webhook_id == second.webhook_id == event_id
    assert first.body == second.body  # the receiver can deduplicate on id and body alike
    assert second.at - first.at >= INITIAL_BACKOFF * (1 - JITTER) - 0.02


def test_retries_follow_the_backoff_schedule(receiver):
    endpoint = new_endpoint(receiver, fail_first(3, Reply(503)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_delivered(endpoint.id, event_id)
    times = [r.at for r in receiver.requests_to(f"/{endpoint.id}")]
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    nominal = [0.2, 0.4, 0.8]
    for gap, delay in zip(gaps, nominal, strict=True):
        assert delay * (1 - JITTER) - 0.02 <= gap <= delay + 1.0, (gaps, nominal)


def test_connection_refused_is_retried_until_exhausted():
    endpoint = EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/closed")
    event_id = send_webhook(endpoint.id, "order.created", {"n": 1})
    entry = dead_letter(endpoint.id, event_id)
    assert entry.reason == "exhausted"
    assert entry.attempts == 4
    assert entry.last_status is None
    assert entry.last_error.startswith("connect_error")
    assert entry.payload == {"n": 1}
    assert entry.first_attempt_at <= entry.last_attempt_at


def test_server_errors_until_exhausted_reach_the_dead_letter_queue(receiver):
    endpoint = new_endpoint(receiver, always(Reply(500, body=b"boom")))
    event_id = send_webhook(endpoint.id, "invoice.paid", {"invoice": 7})
    entry = dead_letter(endpoint.id, event_id)
    assert (entry.reason, entry.attempts, entry.last_status) == ("exhausted", 4, 500)
    assert entry.event_type == "invoice.paid"
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 4


def test_a_receiver_that_times_out_is_retried(receiver):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(204, delay=2.5)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_delivered(endpoint.id, event_id)
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 2


def test_retry_after_delays_the_retry(receiver):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(429, headers={"Retry-After": "2"})))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_delivered(endpoint.id, event_id)
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert second.at - first.at >= 2.0 - 0.05


def test_retry_after_is_capped(receiver):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(503, headers={"Retry-After": "100"})))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_delivered(endpoint.id, event_id, timeout=10)
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert 3.0 - 0.05 <= second.at - first.at < 5.0  # the test cap is 3 s


def test_gone_disables_the_endpoint_and_stops_its_other_events(receiver):
    endpoint = new_endpoint(receiver, always(Reply(410)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    assert dead_letter(endpoint.id, event_id).reason == "endpoint_gone"
    stored = EndpointRegistry().require(endpoint.id)
    assert not stored.enabled and stored.disabled_reason.startswith("gone")
    later = deliver.delay(endpoint.id, "order.created", {}).id
    assert dead_letter(endpoint.id, later).reason == "endpoint_gone"
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 1


@pytest.mark.parametrize("status", [301, 400, 401, 404, 422])
def test_other_4xx_and_3xx_are_permanent_failures(receiver, status):
    receiver.route("/elsewhere", always(Reply(204)))
    reply = Reply(status, headers={"Location": receiver.url("/elsewhere")})
    endpoint = new_endpoint(receiver, always(reply))
    event_id = send_webhook(endpoint.id, "order.created", {})
    entry = dead_letter(endpoint.id, event_id)
    assert (entry.reason, entry.last_status, entry.attempts) == ("rejected", status, 1)
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 1
    assert receiver.requests_to("/elsewhere") == []  # redirects are not followed


def test_disabled_and_removed_endpoints_send_nothing(receiver):
    registry = EndpointRegistry()
    disabled = new_endpoint(receiver, always(Reply(204)))
    disable_endpoint(registry, disabled.id, reason="maintenance")
    removed = new_endpoint(receiver, always(Reply(204)))
    remove_endpoint(registry, removed.id)
    first = deliver.delay(disabled.id, "order.created", {}).id
    second = deliver.delay(removed.id, "order.created", {}).id
    assert dead_letter(disabled.id, first).reason == "endpoint_disabled"
    assert dead_letter(removed.id, second).reason == "endpoint_removed"
    assert receiver.received == []


def test_a_changed_url_applies_to_pending_retries(receiver):
    endpoint = new_endpoint(receiver, always(Reply(503)))
    fixed = receiver.route("/fixed", always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    assert receiver.wait_for(lambda got: len(got) >= 1)
    EndpointRegistry().update(endpoint.id, url=fixed)
    wait_delivered(endpoint.id, event_id)
    assert receiver.requests_to("/fixed")[-1].webhook_id == event_id


def test_past_deadline_is_dead_lettered_as_expired(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = deliver.delay(endpoint.id, "order.created", {}, deadline=time.time() - 1).id
    entry = dead_letter(endpoint.id, event_id)
    assert (entry.reason, entry.attempts) == ("expired", 0)
    assert receiver.received == []


def test_deadline_before_the_next_retry_expires_the_event(receiver):
    endpoint = new_endpoint(receiver, always(Reply(503)),
                            retry_policy={"initial_backoff": 5, "max_backoff": 5})
    event_id = send_webhook(endpoint.id, "order.created", {}, deadline=time.time() + 2)
    entry = dead_letter(endpoint.id, event_id)
    assert (entry.reason, entry.attempts, entry.last_status) == ("expired", 1, 503)


def test_max_age_stops_retries(receiver):
    endpoint = new_endpoint(receiver, always(Reply(503)),
                            retry_policy={"max_age": 0.5, "max_attempts": 100})
    event_id = send_webhook(endpoint.id, "order.created", {})
    entry = dead_letter(endpoint.id, event_id)
    assert entry.reason == "exhausted" and "max_age" in entry.detail
    assert entry.attempts <= 3


def test_same_event_id_enqueued_twice_is_sent_once(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {"n": 1})
    wait_delivered(endpoint.id, event_id)
    send_webhook(endpoint.id, "order.created", {"n": 1}, event_id=event_id)
    marker = deliver.delay(endpoint.id, "order.created", {"n": 2}).id  # ordered after it
    wait_delivered(endpoint.id, marker)
    assert [r.webhook_id for r in receiver.requests_to(f"/{endpoint.id}")] == [event_id, marker]


def test_concurrent_copies_of_one_event_are_sent_once(receiver):
    endpoint = new_endpoint(receiver, always(Reply(204, delay=0.5)))
    event_id = f"evt-{uuid.uuid4().hex}"
    for _ in range(6):  # six copies at once: the worker runs them on six threads
        deliver.delay(endpoint.id, "order.created", {}, event_id=event_id)
    wait_delivered(endpoint.id, event_id)
    marker = deliver.delay(endpoint.id, "order.created", {}).id
    wait_delivered(endpoint.id, marker)
    ids = [r.webhook_id for r in receiver.requests_to(f"/{endpoint.id}")]
    assert ids.count(event_id) == 1


def test_two_worker_processes_send_each_event_once(receiver, start_worker):
    start_worker("second", concurrency=8)
    endpoint = new_endpoint(receiver, always(Reply(204, delay=0.05)))
    event_ids = [f"evt-{n}-{uuid.uuid4().hex[:6]}" for n in range(40)]
    for event_id in event_ids:
        for _ in range(2):
            deliver.delay(endpoint.id, "order.created", {}, event_id=event_id)
    assert receiver.wait_for(lambda got: {r.webhook_id for r in got} >= set(event_ids), 30)
    marker = deliver.delay(endpoint.id, "order.created", {}).id
    wait_delivered(endpoint.id, marker)
    ids = [r.webhook_id for r in receiver.requests_to(f"/{endpoint.id}")]
    assert sorted(ids) == sorted([*event_ids, marker])


def test_dead_letter_replay_delivers_with_the_same_event_id(receiver):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(400)))
    event_id = send_webhook(endpoint.id, "order.created", {"order": 5})
    assert dead_letter(endpoint.id, event_id).reason == "rejected"
    queue = DeadLetterQueue()
    replayed = replay_entries(queue, queue.find(DeadLetterFilter(endpoint_id=endpoint.id))
                              ).replayed
    assert [entry.event_id for entry in replayed] == [event_id]
    wait_delivered(endpoint.id, event_id)
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert first.webhook_id == second.webhook_id == event_id
    assert json.loads(second.body)["data"] == {"order": 5}
    assert DeadLetterQueue().get(f"{endpoint.id}/{event_id}") is None


def test_malformed_task_message_is_dead_lettered(receiver):
    from hookline.worker.celery import worker_app

    task_id = worker_app.send_task("hookline.deliver", args=["not a valid id!", "t", {}]).id
    assert dead_letter("invalid", task_id).reason == "malformed"
    missing_args = worker_app.send_task("hookline.deliver", args=["ep-x"]).id
    entry = dead_letter("ep-x", missing_args)
    assert entry.reason == "error" and "TypeError" in entry.last_error


def test_a_hung_endless_body_does_not_hold_the_worker(receiver):
    endpoint = new_endpoint(receiver, always(Reply(200, action="endless")))
    event_ids = [send_webhook(endpoint.id, "order.created", {}) for _ in range(3)]
    gate = Gate()
    wait_until(lambda: all(gate.is_delivered(endpoint.id, e) for e in event_ids), timeout=15)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://no-such-host.invalid/hook", "dns_error"),
        ("https://127.0.0.1:{port}/tls", "tls_error"),  # TLS to a plain-HTTP server
        ("http://127.0.0.1:{port}/close", "connection_closed"),
    ],
)
def test_network_errors_are_retried_until_exhausted(receiver, url, error):
    receiver.route("/close", always(Reply(action="close")))
    endpoint = EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}",
                                      url.format(port=receiver.port))
    event_id = send_webhook(endpoint.id, "order.created", {})
    entry = dead_letter(endpoint.id, event_id)
    assert (entry.reason, entry.attempts, entry.last_status) == ("exhausted", 4, None)
    assert entry.last_error.startswith(error), entry.last_error
