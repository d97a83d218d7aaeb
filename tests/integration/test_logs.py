"""Worker log lines: JSON when configured (Celery's own lines too), with stable event names, one
line per attempt with its fields, and never a secret, signature, payload or response body; and
no URL token in any log line of any level, Redis record or CLI output."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import redis
from celery import Celery

from examples.receiver import Receiver, Reply, always, fail_first
from hookline.core.logs import log_event
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.delivery import delivered
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import ROOT, emptied, free_port, isolated_url, wait_until

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
    wait_until(lambda: delivered(client, [("logged", "evt-logged")])[0], timeout=20)
    wait_until(lambda: "delivery.succeeded" in worker.output()
               and "delivery.dead_lettered" in worker.output(), timeout=10)
    text = worker.output()
    assert endpoint.secrets[0].removeprefix("whsec_") not in text
    assert "4111-secret-payload" not in text
    assert "receiver-said-no-7731" not in text
    assert "webhook-signature" not in text and "v1," not in text
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    # Celery's own lines are JSON too: no text-format line ("[time: LEVEL/MainProcess] ...").
    assert "/MainProcess]" not in text
    assert {"celery.apps.worker", "celery.app.trace"} <= {r["logger"] for r in records}
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


# -- no URL credential or token anywhere --------------------------------------------------------

#: What the endpoints' URLs carry that nobody may read back: a path token and a query value.
TOKEN, SIGNATURE = "t0k3nABC123", "s3cr3t"
#: A token in a task's arguments (Celery's unknown-task error line quotes them).
ARGUMENT_TOKEN = "arg70k3nXYZ"
SECRET_PATH = f"/in/{TOKEN}?sig={SIGNATURE}"


def _cli(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "hookline"), *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    return result.stdout + result.stderr


def _redis_text(client: redis.Redis) -> dict[str, str]:
    """Every key of the database but the endpoints' own hashes (which hold the URL to send
    to), with its whole value as text."""
    found = {}
    for key in client.scan_iter(count=1000):
        if key.endswith(":endpoint"):
            continue
        kind = client.type(key)
        value: object = {"string": client.get, "hash": client.hgetall,
                         "list": lambda k: client.lrange(k, 0, -1),
                         "set": client.smembers,
                         "zset": lambda k: client.zrange(k, 0, -1)}.get(kind, str)(key)
        found[key] = str(value)
    return found


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_url_token_in_debug_logs_records_or_cli_output(start_worker, log_format):
    """A worker at -l debug (urllib3's own DEBUG lines on) delivers to URLs whose path and
    query carry a token: a success, a refused connection, a timeout, a receiver echoing the
    path in its 400 body, an address the SSRF guard refuses; plus a message for an unknown
    task (Celery's error line with its traceback). The token is in no log line, no Redis
    record but the endpoint's own, and no CLI output."""
    client = emptied(ISOLATED_URL)
    # The worker may send to 127.0.0.2 only: the receivers live there, and 127.0.0.1 (which
    # the test process lets register) is refused by the worker's SSRF guard at send time.
    worker = start_worker(f"redaction-{log_format}", loglevel="debug", extra_env={
        "REDIS_URL": ISOLATED_URL, "HOOKLINE_LOG_FORMAT": log_format,
        "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.2/32", "HOOKLINE_MAX_ATTEMPTS": "2"})
    with Receiver(host="127.0.0.2") as receiver:
        echo = f"no route for {SECRET_PATH} (token {TOKEN})".encode()
        closed = free_port()
        base = f"http://127.0.0.2:{receiver.port}"  # Receiver.route's URLs name 127.0.0.1
        receiver.route(SECRET_PATH, always(Reply(200)))
        receiver.route(f"/echo/{TOKEN}?sig={SIGNATURE}", always(Reply(400, body=echo)))
        receiver.route(f"/slow/{TOKEN}?sig={SIGNATURE}", always(Reply(200, delay=2.5)))
        urls = {
            "tok-ok": f"{base}{SECRET_PATH}",
            "tok-echo": f"{base}/echo/{TOKEN}?sig={SIGNATURE}",
            "tok-slow": f"{base}/slow/{TOKEN}?sig={SIGNATURE}",
            "tok-refused": f"http://127.0.0.2:{closed}{SECRET_PATH}",
            "tok-ssrf": f"http://127.0.0.1:{closed}{SECRET_PATH}",
        }
        registry = EndpointRegistry(client)
        for endpoint_id, url in urls.items():
            registry.add(endpoint_id, url)
        celery = Celery(broker=ISOLATED_URL)
        for endpoint_id in urls:
            celery.send_task("hookline.deliver", args=[endpoint_id, "order.created", {"n": 1}],
                             kwargs={"event_id": f"evt-{endpoint_id}"}, queue="hookline")
        # Its arguments are the message's payload, which the dead-letter queue keeps as it
        # came (payloads are data, never redacted): a token of its own, kept out of the logs.
        celery.send_task("hookline.no_such_task", queue="hookline",
                         args=[f"http://127.0.0.2/in/{ARGUMENT_TOKEN}?sig={SIGNATURE}"])
        celery.close()
        dlq = DeadLetterQueue(client)
        dead = [f"{e}/evt-{e}" for e in ("tok-echo", "tok-slow", "tok-refused", "tok-ssrf")]
        wait_until(lambda: delivered(client, [("tok-ok", "evt-tok-ok")])[0]
                   and all(dlq.get(entry) for entry in dead), timeout=40)
        wait_until(lambda: "unknown task" in worker.output().lower()
                   or "unregistered task" in worker.output().lower(), timeout=10)

    assert {dlq.get(entry).reason for entry in dead} == {  # type: ignore[union-attr]
        "rejected", "exhausted", "refused"}
    assert "refused" in dlq.get("tok-ssrf/evt-tok-ssrf").last_error  # type: ignore[union-attr]
    text = worker.output()
    # urllib3's own DEBUG lines were written, with the target redacted.
    assert 'POST /in/***?*** HTTP/1.1' in text
    assert "Traceback (most recent call last)" in text  # Celery's unknown-task error line
    if log_format == "json":
        [unknown] = [json.loads(line) for line in text.splitlines()
                     if line.startswith("{") and "no_such_task" in line
                     and '"logger": "celery.worker.consumer.consumer"' in line]
        assert "KeyError" in unknown["traceback"]
        assert any(json.loads(line)["logger"] == "urllib3.connectionpool"
                   for line in text.splitlines() if line.startswith("{"))
    records = _redis_text(client)
    env = {**os.environ, "REDIS_URL": ISOLATED_URL}
    cli = [_cli("endpoint", "list", env=env), _cli("dlq", "list", env=env),
           *(_cli("endpoint", "show", e, env=env) for e in urls),
           *(_cli("event", "show", f"evt-{e}", "--endpoint", e, env=env) for e in urls),
           *(_cli("dlq", "show", entry, env=env) for entry in dead),
           _cli("dlq", "list", "--json", env=env), _cli("endpoint", "list", "--json", env=env)]
    assert "echo/***" in cli[0] and "127.0.0.2" in cli[0]  # the receiver is still named
    assert "no route for /in/***" in "".join(cli)  # the echoed body, scrubbed
    for where, seen in [("worker log", text), ("redis", str(records)), ("cli", "".join(cli))]:
        for secret in (TOKEN, "t0k3n", *((ARGUMENT_TOKEN, SIGNATURE) if where == "worker log"
                                         else ())):
            assert secret not in seen, f"{secret} in the {where}"
    assert SIGNATURE not in str({key: value for key, value in records.items()
                                 if "{dlq}" not in key})
