"""The ``hookline`` command against the real Redis of the tests (no worker here).

Dead letters are written directly with ``DeadLetterQueue.add``; what ``send`` publishes to the
broker is recorded through Celery's ``after_task_publish`` signal and taken off the ``hookline``
list after each test. The ``dlq`` commands are tested in test_cli_dlq.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import hookline.cli
import hookline.service.stats
import hookline.store.gates
from hookline.core.config import settings
from hookline.core.messages import DELIVERY_QUEUE
from hookline.store import connection as store
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import ROOT, Publications, wait_until
from tests.support.cli import fails, json_out, succeeds

SECRET_PATTERN = re.compile(r"whsec_[A-Za-z0-9+/=]{40,}")


def new_secret(size: int = 32) -> str:
    return "whsec_" + base64.b64encode(os.urandom(size)).decode()


#: Cool-down the breaker tests open with: the test setting (1.5s) could run out mid-test.
COOLDOWN = 60.0


@pytest.fixture
def long_cooldown(monkeypatch: pytest.MonkeyPatch) -> None:
    long = dataclasses.replace(settings(), breaker_cooldown=COOLDOWN,
                               breaker_max_cooldown=10 * COOLDOWN)
    monkeypatch.setattr(hookline.store.gates, "settings", lambda: long)


def open_breaker(endpoint_id: str) -> int:
    """Open the breaker of ``endpoint_id`` as a worker would: threshold failed attempts."""
    gate, threshold = Gate(), settings().breaker_threshold
    for n in range(threshold):
        assert gate.admit(endpoint_id, f"e{n}", f"t{n}").verdict == "admitted"
        gate.settle(endpoint_id, f"e{n}", f"t{n}", "failed")
    return threshold


def block_with_retry_after(endpoint_id: str, seconds: float = 30) -> None:
    gate = Gate()
    gate.admit(endpoint_id, "x", "t")
    gate.settle(endpoint_id, "x", "t", "throttled", retry_after=seconds)


@pytest.fixture
def dead_letters() -> DeadLetterQueue:
    """Five dead letters: ``shop`` 2h, 10m and 10s ago, ``crm`` 30m and 5s ago."""
    queue = DeadLetterQueue()
    now = time.time()
    for endpoint_id, event_id, reason, age in [
        ("shop", "ev-old", "exhausted", 7200),
        ("shop", "ev-mid", "rejected", 600),
        ("shop", "ev-new", "exhausted", 10),
        ("crm", "ev-a", "endpoint_removed", 1800),
        ("crm", "ev-b", "exhausted", 5),
    ]:
        queue.add(DeadLetter(
            endpoint_id=endpoint_id, event_id=event_id, event_type="order.paid",
            payload={"order": event_id}, reason=reason, attempts=3, last_status=503,
            last_error="503 from receiver", dead_lettered_at=now - age,
        ))
    return queue


def ids_of(entries: list[dict[str, Any]]) -> list[str]:
    return [entry["id"] for entry in entries]


# -- endpoints ------------------------------------------------------------------------------


def test_add_prints_a_generated_secret_once_and_masks_it_everywhere_else() -> None:
    result = succeeds("endpoint", "add", "shop", "--url", "https://shop.example/hooks")
    printed = SECRET_PATTERN.findall(result.stdout)
    assert len(printed) == 1
    assert "will not be shown again" in result.stdout
    assert EndpointRegistry().require("shop").secrets == (printed[0],)

    listed = json_out("endpoint", "list")
    shown = json_out("endpoint", "show", "shop")
    assert ids_of(listed) == ["shop"]
    assert listed[0]["secrets"] == shown["secrets"] == ["whsec_...****"]
    for args in (["endpoint", "list"], ["endpoint", "show", "shop"],
                 ["endpoint", "list", "--json"], ["endpoint", "show", "shop", "--json"]):
        assert printed[0] not in succeeds(*args).output


def test_add_with_a_given_padded_secret_stores_it_without_echoing_it() -> None:
    secret = new_secret(32)  # 44 base64 characters ending in '=', like generated ones
    result = succeeds("endpoint", "add", "shop", "--url", "https://shop.example/hooks",
                      "--secret", secret, "--timeout", "2.5",
                      "--retry-policy", '{"max_attempts": 2}')
    assert secret not in result.output
    assert "will not be shown again" not in result.output
    stored = EndpointRegistry().require("shop")
    assert stored.secrets == (secret,)
    assert stored.timeout == 2.5
    assert dict(stored.retry_policy) == {"max_attempts": 2}


def test_add_refuses_an_endpoint_that_exists() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/a")
    result = fails("endpoint", "add", "shop", "--url", "https://shop.example/b")
    assert "exists already" in result.stderr
    assert EndpointRegistry().require("shop").url == "https://shop.example/a"


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://files.example/hook", "only http and https"),
    ("http://", "has no host"),
    ("https://user:password@shop.example/hook", "must not carry credentials"),
])
def test_add_rejects_a_bad_url_with_the_reason(url: str, message: str) -> None:
    result = fails("endpoint", "add", "shop", "--url", url)
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert EndpointRegistry().get("shop") is None


@pytest.mark.parametrize("timeout", ["0", "121", "nan"])
def test_add_rejects_a_timeout_out_of_range(timeout: str) -> None:
    result = fails("endpoint", "add", "shop", "--url", "https://shop.example/", "--timeout",
                   timeout)
    assert "must be between 0.1 and 120 seconds" in result.stderr
    assert EndpointRegistry().get("shop") is None


def test_add_rejects_a_timeout_that_is_not_a_number_as_a_usage_error() -> None:
    result = fails("endpoint", "add", "shop", "--url", "https://shop.example/", "--timeout",
                   "soon", code=2)
    assert "'soon' is not a valid float" in result.stderr


def test_add_rejects_an_unknown_retry_setting_and_a_policy_that_is_not_an_object() -> None:
    unknown = fails("endpoint", "add", "shop", "--url", "https://shop.example/",
                    "--retry-policy", '{"retries": 3}')
    assert "unknown retry setting(s) ['retries']" in unknown.stderr
    not_object = fails("endpoint", "add", "shop", "--url", "https://shop.example/",
                       "--retry-policy", "[3]", code=2)
    assert "must be a JSON object" in not_object.stderr
    assert EndpointRegistry().get("shop") is None


def test_update_changes_the_url_and_replaces_the_secret_without_echoing_it() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/old")
    secret = new_secret()
    result = succeeds("endpoint", "update", "shop", "--url", "https://shop.example/new",
                      "--secret", secret)
    assert secret not in result.output
    assert "url, secret" in result.stdout
    assert json_out("endpoint", "show", "shop")["url"] == "https://shop.example/new"
    assert EndpointRegistry().require("shop").secrets == (secret,)


def test_update_needs_a_change_and_an_existing_endpoint() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    assert "nothing to update" in fails("endpoint", "update", "shop", code=2).stderr
    missing = fails("endpoint", "update", "nope", "--url", "https://x.example/")
    assert "no endpoint 'nope'" in missing.stderr
    bad = fails("endpoint", "update", "shop", "--url", "ftp://shop.example/")
    assert "only http and https" in bad.stderr
    assert EndpointRegistry().require("shop").url == "https://shop.example/"


def test_disable_records_the_reason_and_enable_clears_it() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    succeeds("endpoint", "disable", "shop", "--reason", "receiver migration")
    shown = json_out("endpoint", "show", "shop")
    assert (shown["enabled"], shown["disabled_reason"]) == (False, "receiver migration")
    assert "disabled (receiver migration)" in succeeds("endpoint", "list").stdout
    succeeds("endpoint", "enable", "shop")
    shown = json_out("endpoint", "show", "shop")
    assert (shown["enabled"], shown["disabled_reason"]) == (True, None)


def test_remove_asks_first_unless_yes_is_given() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    declined = fails("endpoint", "remove", "shop", input="n\n")
    assert "Remove endpoint shop?" in declined.output
    assert EndpointRegistry().get("shop") is not None
    succeeds("endpoint", "remove", "shop", input="y\n")
    assert EndpointRegistry().get("shop") is None
    succeeds("endpoint", "add", "crm", "--url", "https://crm.example/")
    succeeds("endpoint", "remove", "crm", "--yes")
    assert json_out("endpoint", "list") == []
    assert "no endpoint 'crm'" in fails("endpoint", "remove", "crm", "--yes").stderr


def test_show_of_an_unknown_endpoint_fails_with_a_hint() -> None:
    result = fails("endpoint", "show", "nope", "--json")
    assert "no endpoint 'nope'" in result.stderr
    assert result.stdout == ""


def test_a_rate_and_burst_show_in_list_show_and_json_and_rate_none_removes_them() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/", "--rate", "50/s",
             "--burst", "5")
    succeeds("endpoint", "add", "crm", "--url", "https://crm.example/")
    rows = {line.split()[0]: line for line in succeeds("endpoint", "list").stdout.splitlines()}
    assert "RATE" in rows["ID"]
    assert "50/s burst 5" in rows["shop"]
    assert [item["rate"] for item in json_out("endpoint", "list")] == [None, "50/s"]
    shown = json_out("endpoint", "show", "shop")
    assert (shown["rate"], shown["burst"]) == ("50/s", 5)
    text = succeeds("endpoint", "show", "shop").stdout
    assert re.search(r"^rate: +50/s$", text, re.M) and re.search(r"^burst: +5$", text, re.M)

    assert "rate, burst" in succeeds("endpoint", "update", "crm", "--rate", "3000/m",
                                     "--burst", "2").stdout
    assert (EndpointRegistry().require("crm").rate, EndpointRegistry().require("crm").burst
            ) == ("3000/m", 2)
    succeeds("endpoint", "update", "shop", "--rate", "none")
    shown = json_out("endpoint", "show", "shop")
    assert shown["rate"] is None
    assert "no limit" in succeeds("endpoint", "show", "shop").stdout
    rows = {line.split()[0]: line for line in succeeds("endpoint", "list").stdout.splitlines()}
    assert "burst" not in rows["shop"]


@pytest.mark.parametrize("rate", ["fast", "0/s", "10/d", "²/s"])
def test_an_invalid_rate_is_refused_with_the_accepted_format(rate: str) -> None:
    added = fails("endpoint", "add", "shop", "--url", "https://shop.example/", "--rate", rate)
    assert added.stderr.startswith(f"Error: rate {rate!r} is invalid: use N/s, N/m or N/h")
    assert EndpointRegistry().get("shop") is None
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/", "--rate", "5/s")
    updated = fails("endpoint", "update", "shop", "--rate", rate)
    assert f"rate {rate!r} is invalid" in updated.stderr
    assert EndpointRegistry().require("shop").rate == "5/s"


def test_a_burst_out_of_range_is_refused() -> None:
    result = fails("endpoint", "add", "shop", "--url", "https://shop.example/", "--burst", "0")
    assert "burst 0 must be an integer from 1" in result.stderr
    assert EndpointRegistry().get("shop") is None


def test_an_unreachable_redis_gives_one_line_naming_redis_url(monkeypatch) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(store, "client", lambda: dead)
    result = fails("endpoint", "list")
    assert "(REDIS_URL) does not answer" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# -- send -----------------------------------------------------------------------------------


def test_send_to_an_unknown_endpoint_fails_and_enqueues_nothing(
        published: Publications) -> None:
    result = fails("send", "nope")
    assert "no endpoint 'nope'" in result.stderr
    assert published.events == []


def test_send_enqueues_a_test_event_and_prints_its_id(published: Publications) -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    result = succeeds("send", "shop", "--event-id", "evt-cli-1", "--payload", '{"n": 1}')
    assert result.stdout.strip() == "evt-cli-1"
    assert published.events == [(DELIVERY_QUEUE, "shop", "evt-cli-1")]
    generated = succeeds("send", "shop").stdout.strip()
    assert published.events[1] == (DELIVERY_QUEUE, "shop", generated)


def test_send_rejects_a_payload_that_is_not_json(published: Publications) -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    assert "is not valid JSON" in fails("send", "shop", "--payload", "{oops", code=2).stderr
    assert published.events == []


# -- breakers -------------------------------------------------------------------------------


@pytest.mark.usefixtures("long_cooldown")
def test_breaker_status_shows_an_open_breaker_and_reset_closes_it() -> None:
    # Endpoints of their own: the session worker may still be failing the send test's event
    # to "shop" (https://shop.example/ is not reachable), which would count on its breaker.
    succeeds("endpoint", "add", "brk-shop", "--url", "https://shop.example/")
    succeeds("endpoint", "add", "brk-crm", "--url", "https://crm.example/")
    threshold = open_breaker("brk-shop")
    status = json_out("breaker", "status", "brk-shop")
    assert set(status) == {"endpoint_id", "state", "failures", "open_until", "blocked_until",
                           "cooldown"}
    assert (status["state"], status["failures"]) == ("open", threshold)
    assert status["open_until"] > time.time()
    assert status["blocked_until"] is None
    assert status["cooldown"] == COOLDOWN
    assert [(item["endpoint_id"], item["state"]) for item in json_out("breaker", "status")
            ] == [("brk-crm", "closed"), ("brk-shop", "open")]
    table = {line.split()[0]: line for line in succeeds("breaker", "status").stdout.splitlines()}
    assert table["ENDPOINT"].split()[:3] == ["ENDPOINT", "STATE", "FAILURES"]
    assert table["brk-shop"].split()[1:3] == ["open", str(threshold)]
    assert re.search(r"\(in \d+s\)", table["brk-shop"])
    assert table["brk-crm"].split()[1:3] == ["closed", "0"]
    assert re.search(r"^state: +open$", succeeds("breaker", "status", "brk-shop").stdout, re.M)

    reset = succeeds("breaker", "reset", "brk-shop")
    assert reset.stdout == "breaker of brk-shop reset: closed, no Retry-After block\n"
    status = json_out("breaker", "status", "brk-shop")
    assert (status["state"], status["failures"], status["open_until"]) == ("closed", 0, None)
    assert Gate().admit("brk-shop", "after-reset", "t").verdict == "admitted"


def test_breaker_status_shows_a_retry_after_block_and_reset_lifts_it() -> None:
    succeeds("endpoint", "add", "brk-shop", "--url", "https://shop.example/")
    block_with_retry_after("brk-shop", 30)
    status = json_out("breaker", "status", "brk-shop")
    assert status["state"] == "closed"
    assert time.time() + 20 < status["blocked_until"] <= time.time() + 31
    assert re.search(r"^blocked until: .*\(in \d+s\)$",
                     succeeds("breaker", "status", "brk-shop").stdout, re.M)
    succeeds("breaker", "reset", "brk-shop")
    assert json_out("breaker", "status", "brk-shop")["blocked_until"] is None


def test_breaker_commands_refuse_an_unknown_endpoint() -> None:
    assert "no endpoint 'nope'" in fails("breaker", "status", "nope").stderr
    assert "no endpoint 'nope'" in fails("breaker", "reset", "nope").stderr
    assert json_out("breaker", "status") == []
    assert "no endpoints" in succeeds("breaker", "status").stdout


# -- stats ----------------------------------------------------------------------------------


def test_stats_json_reports_endpoints_queues_and_dead_letters(
        dead_letters: DeadLetterQueue) -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    succeeds("endpoint", "add", "crm", "--url", "https://crm.example/")
    succeeds("endpoint", "disable", "crm")
    report = json_out("stats")
    assert set(report) == {"at", "endpoints", "paused", "queues", "schedule", "dead_letters",
                           "breakers", "throttled", "in_flight", "workers", "ordered", "outbox"}
    assert report["ordered"] == []  # no ordered endpoint
    assert report["outbox"] is None  # the outbox is off
    assert set(report["workers"]) == {"live", "dead_restoring", "declared_dead", "restored"}
    assert abs(report["at"] - time.time()) < 5
    assert report["endpoints"] == {"total": 2, "enabled": 1, "disabled": 1, "paused": 0}
    assert report["paused"] == []
    assert set(report["queues"]) == {"hookline", "hookline.retry"}
    assert all(isinstance(depth, int) for depth in report["queues"].values())
    assert set(report["schedule"]) == {"total", "by_endpoint", "oldest_due", "lag"}
    assert report["dead_letters"] == {
        "total": 5, "by_reason": {"exhausted": 3, "rejected": 1, "endpoint_removed": 1},
        "oldest": dead_letters.get("shop/ev-old").dead_lettered_at}
    assert report["breakers"] == report["throttled"] == []
    text = succeeds("stats").stdout
    assert "2 (1 enabled, 1 disabled, 0 paused)" in text
    assert re.search(r"^dead letters: +5, oldest .*\(2h ago\)$", text, re.M)
    assert re.search(r"^  exhausted: +3$", text, re.M)
    assert "all closed, none blocked" in text
    assert re.search(r"^throttled: +none$", text, re.M)


@pytest.mark.usefixtures("long_cooldown")
def test_stats_lists_breakers_that_are_open_or_blocked() -> None:
    for endpoint_id in ("shop", "crm", "quiet"):
        succeeds("endpoint", "add", endpoint_id, "--url", f"https://{endpoint_id}.example/")
    threshold = open_breaker("shop")
    block_with_retry_after("crm")
    breakers = {item["endpoint_id"]: item for item in json_out("stats")["breakers"]}
    assert set(breakers) == {"shop", "crm"}
    assert set(breakers["shop"]) == {"endpoint_id", "state", "failures", "open_until",
                                     "blocked_until"}
    assert (breakers["shop"]["state"], breakers["shop"]["failures"]) == ("open", threshold)
    assert breakers["shop"]["open_until"] > time.time()
    assert (breakers["crm"]["state"], breakers["crm"]["open_until"]) == ("closed", None)
    assert breakers["crm"]["blocked_until"] > time.time()
    text = succeeds("stats").stdout
    assert "2 not closed or blocked" in text
    assert re.search(rf"^  shop: +open, {threshold} failure\(s\), until ", text, re.M)
    assert re.search(r"^  crm: +closed, .*Retry-After block until ", text, re.M)
    assert "quiet" not in text
    succeeds("breaker", "reset", "shop")
    assert [item["endpoint_id"] for item in json_out("stats")["breakers"]] == ["crm"]


def test_stats_counts_the_messages_waiting_in_each_queue(monkeypatch,
                                                         redis_client: redis.Redis) -> None:
    # Scratch lists stand in for the queues: a worker sharing this Redis may drain the real ones.
    first, retry = "hookline:test-cli:first", "hookline:test-cli:retry"
    monkeypatch.setattr(hookline.service.stats, "DELIVERY_QUEUE", first)
    monkeypatch.setattr(hookline.service.stats, "RETRY_QUEUE", retry)
    redis_client.lpush(first, "m1", "m2", "m3")
    redis_client.lpush(retry, "m4")
    assert json_out("stats")["queues"] == {first: 3, retry: 1}
    redis_client.delete(first, retry)


def test_stats_lists_endpoints_whose_events_wait_for_rate_slots() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/", "--rate", "6/m",
             "--burst", "1")
    succeeds("endpoint", "add", "crm", "--url", "https://crm.example/", "--rate", "6/m")
    gate = Gate()
    assert gate.admit("shop", "e1", "t1").verdict == "admitted"
    deferred = gate.admit("shop", "e2", "t2")  # over budget: books the next slot, 10s ahead
    assert deferred.detail == "rate_limited"
    [throttled] = json_out("stats")["throttled"]
    assert (throttled["endpoint_id"], throttled["rate"]) == ("shop", "6/m")
    assert throttled["booked_until"] == pytest.approx(deferred.rate_slot / 1000)
    assert time.time() + 5 < throttled["booked_until"] < time.time() + 11
    text = succeeds("stats").stdout
    assert re.search(r"^throttled: +1 endpoint\(s\) waiting for rate slots$", text, re.M)
    assert re.search(r"^  shop: +6/m, slots booked until .*\(in \d+s\)$", text, re.M)


def test_stats_watch_refreshes_until_stopped() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    text = succeeds("stats", "--watch", "--interval", "0.2", "--iterations", "3").stdout
    assert len(re.findall(r"^hookline stats .* every 0.2s, Ctrl-C to stop$", text, re.M)) == 3
    assert len(re.findall(r"^endpoints: +1 \(1 enabled", text, re.M)) == 3
    lines = succeeds("stats", "--watch", "--json", "--interval", "0.1", "--iterations",
                     "2").stdout.splitlines()
    reports = [json.loads(line) for line in lines]
    assert len(reports) == 2
    assert reports[0]["endpoints"]["total"] == 1
    assert reports[1]["at"] > reports[0]["at"]


def test_stats_watch_shows_an_unreachable_redis_and_keeps_going(monkeypatch) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(store, "client", lambda: dead)
    result = succeeds("stats", "--watch", "--interval", "0.1", "--iterations", "2")
    errors = re.findall(r"Error: Redis at .* \(REDIS_URL\) does not answer.*\(retrying\)$",
                        result.stdout, re.M)
    assert len(errors) == 2
    assert "(REDIS_URL) does not answer" in fails("stats").stderr


def test_stats_watch_stops_cleanly_on_ctrl_c(tmp_path) -> None:
    output = tmp_path / "stats.out"
    with open(output, "w") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-c", "from hookline.cli import main; main()", "stats", "--watch",
             "--interval", "0.2"],
            cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_until(lambda: output.read_text().count("hookline stats ") >= 2, timeout=30)
        finally:
            process.send_signal(signal.SIGINT)
            # A clean stop, not a fast one: under the full suite's load one exit took over 10 s.
            _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err


def test_max_in_flight_is_set_shown_and_removed() -> None:
    succeeds("endpoint", "add", "tiny", "--url", "https://tiny.example/", "--max-in-flight", "5")
    shown = json_out("endpoint", "show", "tiny")
    assert (shown["max_in_flight"], shown["in_flight"], shown["waiting"]) == (5, 0, 0)
    assert re.search(r"^max in flight: +5$", succeeds("endpoint", "show", "tiny").stdout, re.M)
    gate = Gate()
    assert gate.admit("tiny", "e1", "t1").verdict == "admitted"
    assert json_out("endpoint", "show", "tiny")["in_flight"] == 1
    [busy] = json_out("stats")["in_flight"]
    assert busy == {"endpoint_id": "tiny", "in_flight": 1, "waiting": 0, "max_in_flight": 5}
    assert re.search(r"^  tiny: +1 in flight, 0 waiting \(cap 5\)$", succeeds("stats").stdout,
                     re.M)
    succeeds("endpoint", "update", "tiny", "--max-in-flight", "0")
    assert json_out("endpoint", "show", "tiny")["max_in_flight"] is None


@pytest.mark.parametrize("value", ["0", "-3", "many", "100001"])
def test_a_bad_max_in_flight_is_refused_in_one_line(value: str) -> None:
    result = fails("endpoint", "add", "tiny", "--url", "https://tiny.example/",
                   "--max-in-flight", value, code=1 if value == "100001" else 2)
    assert "max-in-flight" in result.output.replace("_", "-")
    assert "Traceback" not in result.output
