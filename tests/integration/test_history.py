"""Attempt history and recent records, written by settle.lua; ``hookline event show`` and the
recent record in ``hookline endpoint show``.

The first tests call the gate directly (no worker); the others run real deliveries through the
session worker and a real receiver.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result

import hookline.core.config
from examples.receiver import Reply, always, fail_first
from hookline import send_webhook
from hookline.cli import main
from hookline.core.config import load_settings, settings
from hookline.delivery.retries import disable_endpoint
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from hookline.store.events import EventView
from hookline.store.gates import Gate
from hookline.store.history import AttemptHistory, AttemptRecord, excerpt
from tests.conftest import wait_until
from tests.support.endpoints import dead_letter, new_endpoint, wait_delivered


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def succeeds(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def record(attempt: int, outcome: str, status: int | None, **fields: Any) -> AttemptRecord:
    return AttemptRecord(attempt=attempt, at=time.time(), outcome=outcome, status=status,
                         latency=0.0123, **fields)


@pytest.fixture
def endpoint():
    return EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/hook")


def settle(endpoint_id: str, event_id: str, outcome: str, entry: AttemptRecord) -> None:
    gate = Gate()
    token = uuid.uuid4().hex
    gate.admit(endpoint_id, event_id, token)
    gate.settle(endpoint_id, event_id, token, outcome, record=entry)


def test_settle_appends_each_attempt_to_the_event_history(endpoint):
    settle(endpoint.id, "evt-1", "failed", record(1, "failed", 503, response="busy"))
    settle(endpoint.id, "evt-1", "failed", record(2, "failed", None, error="read_timeout"))
    settle(endpoint.id, "evt-1", "delivered", record(3, "delivered", 204))
    attempts = AttemptHistory().attempts(endpoint.id, "evt-1")
    assert [(a.attempt, a.outcome, a.status) for a in attempts] == [
        (1, "failed", 503), (2, "failed", None), (3, "delivered", 204)]
    assert attempts[0].response == "busy" and attempts[1].error == "read_timeout"
    assert attempts[2].latency == pytest.approx(0.0123)


def test_history_expires_after_the_retention_and_keeps_the_latest_attempts(endpoint,
                                                                              monkeypatch):
    limited = load_settings({**os.environ, "HOOKLINE_HISTORY_ATTEMPTS": "3",
                             "HOOKLINE_HISTORY_RETENTION": "3600"})
    monkeypatch.setattr(hookline.core.config, "_configured", limited)
    for attempt in range(1, 6):
        settle(endpoint.id, "evt-1", "failed", record(attempt, "failed", 500))
    attempts = AttemptHistory().attempts(endpoint.id, "evt-1")
    assert [a.attempt for a in attempts] == [3, 4, 5]
    assert 3590 < store.client().ttl(keys.history_key(endpoint.id, "evt-1")) <= 3600


def test_a_retention_of_zero_keeps_no_history_but_the_recent_record(endpoint, monkeypatch):
    off = load_settings({**os.environ, "HOOKLINE_HISTORY_RETENTION": "0"})
    monkeypatch.setattr(hookline.core.config, "_configured", off)
    settle(endpoint.id, "evt-1", "failed", record(1, "failed", 500))
    assert not store.client().exists(keys.history_key(endpoint.id, "evt-1"))
    assert AttemptHistory().recent(endpoint.id).outcomes == "f"


def test_recent_record_gives_the_success_rate_and_last_error(endpoint):
    before = time.time()
    settle(endpoint.id, "evt-1", "delivered", record(1, "delivered", 200))
    settle(endpoint.id, "evt-2", "failed", record(1, "failed", 503))
    settle(endpoint.id, "evt-3", "rejected", record(1, "rejected", 400))
    settle(endpoint.id, "evt-4", "delivered", record(1, "delivered", 204))
    recent = AttemptHistory().recent(endpoint.id)
    assert recent.success_rate == 0.5
    assert recent.counts() == {"delivered": 2, "failed": 1, "rejected": 1}
    assert (recent.last_error, recent.last_error_event) == ("HTTP 400", "evt-3")
    assert recent.last_error_at is not None and before - 1 < recent.last_error_at < time.time() + 1
    assert recent.last_success_at is not None and recent.last_success_at >= recent.last_error_at


def test_recent_record_counts_only_the_latest_hundred_attempts(endpoint):
    for n in range(100):
        settle(endpoint.id, f"evt-f{n}", "failed", record(1, "failed", 500))
    for n in range(30):
        settle(endpoint.id, f"evt-d{n}", "delivered", record(1, "delivered", 200))
    recent = AttemptHistory().recent(endpoint.id)
    assert recent.attempts == 100
    assert recent.success_rate == pytest.approx(0.3)
    # Fields of the breaker hash, which settle reads anyway: they live with the endpoint.
    assert len(store.client().hget(keys.breaker_key(endpoint.id), "outcomes")) == 100


def test_settle_without_a_record_leaves_no_history(endpoint):
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "t")
    gate.settle(endpoint.id, "evt-1", "t", "failed")
    assert AttemptHistory().attempts(endpoint.id, "evt-1") == []
    assert AttemptHistory().recent(endpoint.id).outcomes == ""
    assert not store.client().exists(keys.history_key(endpoint.id, "evt-1"))


def test_by_default_the_history_lives_in_the_delivery_record(endpoint):
    """No list of its own: settle writes the attempts into the record it writes anyway, which
    lives as long as the done marker (HOOKLINE_MAX_AGE + HOOKLINE_REPLAY_HORIZON)."""
    assert settings().history_in_record
    for attempt in range(1, 4):
        settle(endpoint.id, "evt-1", "failed", record(attempt, "failed", 500))
    client = store.client()
    assert not client.exists(keys.history_key(endpoint.id, "evt-1"))
    assert [a.attempt for a in AttemptHistory().attempts(endpoint.id, "evt-1")] == [1, 2, 3]
    ttl = client.ttl(keys.delivery_key(endpoint.id, "evt-1"))
    assert settings().record_ttl - 2 <= ttl <= settings().record_ttl


def test_a_0_2_recent_record_is_read_until_settle_writes_the_new_one(endpoint):
    client = store.client()
    client.hset(keys.recent_key(endpoint.id), mapping={"outcomes": "ddf", "last_error": "HTTP 500"})
    assert AttemptHistory().recent(endpoint.id).outcomes == "ddf"
    settle(endpoint.id, "evt-1", "delivered", record(1, "delivered", 200))
    assert AttemptHistory().recent(endpoint.id).outcomes == "d"


def test_excerpt_cuts_at_a_byte_limit_without_splitting_a_character():
    assert excerpt("héllo", 2) == "h"
    assert excerpt("héllo", 3) == "hé"
    assert excerpt("x" * 1000, 256) == "x" * 256


# -- through the worker -----------------------------------------------------------------------


@pytest.mark.usefixtures("worker")
def test_event_show_lists_each_attempt_of_an_event_that_failed_twice(receiver):
    endpoint = new_endpoint(receiver, fail_first(2, Reply(503, body=b"try later"),
                                                 then=Reply(200, body=b'{"ok": true}')))
    event_id = f"evt-{uuid.uuid4().hex[:8]}"
    send_webhook(endpoint.id, "order.created", {"order": 1}, event_id=event_id)
    wait_delivered(endpoint.id, event_id)
    wait_until(lambda: len(AttemptHistory().attempts(endpoint.id, event_id)) == 3)

    text = succeeds("event", "show", event_id)
    assert f"endpoint:      {endpoint.id}" in text
    assert "state:         delivered" in text
    rows = [line.split() for line in text.splitlines() if line[:1].isdigit()]
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert [row[5] for row in rows] == ["failed", "failed", "delivered"]
    assert [row[6] for row in rows] == ["503", "503", "200"]
    assert "try later" in text and '{"ok": true}' in text

    shown = json.loads(succeeds("event", "show", event_id, "--endpoint", endpoint.id, "--json"))
    [delivery] = shown["deliveries"]
    assert (delivery["endpoint_id"], delivery["state"]) == (endpoint.id, "delivered")
    assert [(a["attempt"], a["status"], a["response"]) for a in delivery["attempts"]] == [
        (1, 503, "try later"), (2, 503, "try later"), (3, 200, '{"ok": true}')]
    assert all(a["latency"] > 0 and a["at"] > 0 for a in delivery["attempts"])
    first, second, third = (a["at"] for a in delivery["attempts"])
    assert first < second < third


@pytest.mark.usefixtures("worker")
def test_endpoint_show_gives_the_recent_success_rate_last_error_and_breaker(receiver):
    endpoint = new_endpoint(receiver, fail_first(2, Reply(503)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_delivered(endpoint.id, event_id)
    wait_until(lambda: AttemptHistory().recent(endpoint.id).attempts == 3)

    text = succeeds("endpoint", "show", endpoint.id)
    assert "recent attempts: 33% delivered of the last 3 attempts (2 failed, 1 delivered)" in text
    assert "last error:      HTTP 503, " in text and f"event {event_id}" in text
    assert "breaker:         closed, 0 failure(s)" in text
    shown = json.loads(succeeds("endpoint", "show", endpoint.id, "--json"))
    assert shown["recent"]["success_rate"] == pytest.approx(1 / 3, abs=1e-3)
    assert shown["recent"]["by_outcome"] == {"delivered": 1, "failed": 2}
    assert shown["recent"]["last_error"] == "HTTP 503"
    assert shown["breaker"]["state"] == "closed"


@pytest.mark.usefixtures("worker")
def test_event_show_says_a_rejected_event_was_dead_lettered_with_a_capped_body(receiver):
    endpoint = new_endpoint(receiver, always(Reply(400, body=b"e" * 5000)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    dead_letter(endpoint.id, event_id)
    shown = json.loads(succeeds("event", "show", event_id, "--json"))
    [delivery] = shown["deliveries"]
    assert delivery["state"] == "dead_lettered"
    assert delivery["dead_letter"]["reason"] == "rejected"
    assert "payload" not in delivery["dead_letter"]
    [attempt] = delivery["attempts"]
    assert (attempt["outcome"], attempt["status"]) == ("rejected", 400)
    assert attempt["response"] == "e" * 256
    text = succeeds("event", "show", event_id)
    assert "dead-lettered (rejected)" in text and f"hookline dlq show {endpoint.id}/" in text


@pytest.mark.usefixtures("worker")
def test_event_show_finds_a_scheduled_retry_and_an_event_never_attempted(receiver):
    waiting = new_endpoint(receiver, always(Reply(503)),
                           retry_policy={"initial_backoff": 30, "max_backoff": 30})
    disabled = new_endpoint(receiver, always(Reply(204)))
    disable_endpoint(EndpointRegistry(), disabled.id, reason="maintenance")
    retried = send_webhook(waiting.id, "order.created", {})
    refused = send_webhook(disabled.id, "order.created", {})
    wait_until(lambda: EventView().delivery(waiting.id, retried).state == "scheduled")
    dead_letter(disabled.id, refused)

    scheduled = json.loads(succeeds("event", "show", retried, "--json"))["deliveries"][0]
    assert len(scheduled["attempts"]) == 1
    assert 20 < scheduled["retry_due"] - time.time() <= 30
    assert "retry scheduled, due" in succeeds("event", "show", retried)
    never = json.loads(succeeds("event", "show", refused, "--json"))["deliveries"][0]
    assert (never["state"], never["attempts"]) == ("dead_lettered", [])
    assert never["dead_letter"]["reason"] == "endpoint_disabled"


def test_event_show_of_an_unknown_event_fails_in_one_line():
    result = run("event", "show", "no-such-event")
    assert result.exit_code == 1
    assert "nothing recorded for event 'no-such-event'" in result.stderr
    assert "HOOKLINE_HISTORY_RETENTION" in result.stderr


def test_event_show_matches_event_ids_with_glob_characters_literally(endpoint):
    settle(endpoint.id, "evt-[1]*", "delivered", record(1, "delivered", 204))
    settle(endpoint.id, "evt-1x", "delivered", record(1, "delivered", 204))
    shown = json.loads(succeeds("event", "show", "evt-[1]*", "--json"))
    assert [d["event_id"] for d in shown["deliveries"]] == ["evt-[1]*"]
    assert run("event", "show", "evt-?x").exit_code == 1
