"""Worker log lines: JSON when configured, with stable event names, and never a secret."""

import json

import redis
from celery import Celery

from app import store
from app.endpoints import EndpointRegistry
from examples.receiver import Reply, fail_first
from tests.conftest import TEST_ENV, wait_until

#: A database of its own, so that only the JSON-logging worker sees this test's event.
ISOLATED_URL = TEST_ENV["REDIS_URL"].rsplit("/", 1)[0] + "/14"


def test_json_log_lines_name_the_event_and_never_show_the_secret(receiver, start_worker):
    client = redis.Redis.from_url(ISOLATED_URL, decode_responses=True)
    client.delete(store.endpoint_key("logged"), "hookline", "hookline.retry")
    for key in client.scan_iter("hookline:{logged}:*"):
        client.delete(key)
    worker = start_worker("json-logs", extra_env={"HOOKLINE_LOG_FORMAT": "json",
                                                  "REDIS_URL": ISOLATED_URL})
    endpoint = EndpointRegistry(client).add(
        "logged", receiver.route("/logged", fail_first(1, Reply(500))))
    Celery(broker=ISOLATED_URL).send_task(
        "hookline.deliver", args=["logged", "order.created", {"card": "4111-secret-payload"}],
        kwargs={"event_id": "evt-logged"}, queue="hookline")
    wait_until(lambda: client.exists(store.done_key("logged", "evt-logged")), timeout=20)
    wait_until(lambda: "delivery.succeeded" in worker.output(), timeout=5)
    text = worker.output()
    assert endpoint.secrets[0].removeprefix("whsec_") not in text
    assert "4111-secret-payload" not in text
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    ours = [r for r in records if r.get("event_id") == "evt-logged"]
    assert [r["event"] for r in ours] == ["delivery.retry_scheduled", "delivery.succeeded"]
    assert [r["status"] for r in ours] == [500, 204]
    for record in ours:
        assert record["endpoint_id"] == "logged" and record["level"] == "info"
        assert {"attempt", "latency", "time"} <= set(record)
