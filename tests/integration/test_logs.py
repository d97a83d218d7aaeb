"""Worker log lines: JSON when configured, with stable event names, one line per attempt with
its fields, and never a secret, signature, payload or response body."""

from __future__ import annotations

import json
import logging

import pytest
from celery import Celery

from examples.receiver import Reply, always, fail_first
from hookline.core.logs import log_event
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import emptied, isolated_url, wait_until

#: A database of its own, so that only the JSON-logging worker sees this test's events.
ISOLATED_URL = isolated_url(5)
#: The fields of every line that reports an HTTP attempt.
ATTEMPT_FIELDS = {"time", "level", "event", "endpoint_id", "event_id", "event_type", "attempt",
                  "latency"}


def test_json_log_lines_name_the_event_and_never_show_the_secret(receiver, start_worker):
    client = emptied(ISOLATED_URL)
    worker = start_worker("json-logs", extra_env={"HOOKLINE_LOG_FORMAT": "json",
                                                  "REDIS_URL": ISOLATED_URL})
    registry = EndpointRegistry(client)
    endpoint = registry.add("logged", receiver.route("/logged", fail_first(1, Reply(500))))
    registry.add("logged-bad", receiver.route(
        "/logged-bad", always(Reply(400, body=b"receiver-said-no-7731"))))
    celery = Celery(broker=ISOLATED_URL)
    for endpoint_id, event_id in (("logged", "evt-logged"), ("logged-bad", "evt-rejected")):
        celery.send_task("hookline.deliver",
                         args=[endpoint_id, "order.created", {"card": "4111-secret-payload"}],
                         kwargs={"event_id": event_id}, queue="hookline")
    celery.close()
    wait_until(lambda: client.exists(keys.done_key("logged", "evt-logged")), timeout=20)
    wait_until(lambda: "delivery.succeeded" in worker.output()
               and "delivery.dead_lettered" in worker.output(), timeout=10)
    text = worker.output()
    assert endpoint.secrets[0].removeprefix("whsec_") not in text
    assert "4111-secret-payload" not in text
    assert "receiver-said-no-7731" not in text
    assert "webhook-signature" not in text and "v1," not in text
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    ours = [r for r in records if r.get("event_id") == "evt-logged"]
    assert [r["event"] for r in ours] == ["delivery.retry_scheduled", "delivery.succeeded"]
    assert [(r["attempt"], r["status"]) for r in ours] == [(1, 500), (2, 204)]
    for record in ours:
        assert record["endpoint_id"] == "logged" and record["level"] == "info"
        assert set(record) >= ATTEMPT_FIELDS, record
        assert isinstance(record["latency"], float) and record["latency"] >= 0
    assert ours[0]["countdown"] > 0

    rejected = [r for r in records if r.get("event_id") == "evt-rejected"]
    assert [r["event"] for r in rejected] == ["delivery.rejected", "delivery.dead_lettered"]
    attempt, dead_letter = rejected
    assert set(attempt) >= ATTEMPT_FIELDS, attempt
    assert (attempt["status"], attempt["reason"], attempt["level"]) == (400, "rejected",
                                                                        "warning")
    assert (dead_letter["reason"], dead_letter["attempt"]) == ("rejected", 1)


@pytest.mark.parametrize("field", ["secret", "secrets", "signature", "payload", "body",
                                   "headers", "url", "response"])
def test_fields_that_could_hold_secrets_are_redacted(caplog, field):
    with caplog.at_level(logging.INFO, logger="hookline"):
        log_event("delivery.succeeded", endpoint_id="ep", **{field: "whsec_leak"})
    [record] = caplog.records
    assert "whsec_leak" not in record.getMessage()
    assert record.hookline[field] == "[redacted]"  # type: ignore[attr-defined]
    assert record.hookline["endpoint_id"] == "ep"  # type: ignore[attr-defined]
