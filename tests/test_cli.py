"""The ``hookline`` command against the real Redis of the tests (no worker here).

Dead letters are written directly with ``DeadLetterQueue.add``; what ``send`` and ``dlq replay``
publish to the broker is recorded through Celery's ``after_task_publish`` signal and taken off
the ``hookline`` list after each test.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from redis.backoff import NoBackoff
from redis.retry import Retry

import app.cli
import app.cli_dlq
import app.deadletter
import app.gates
from app import store
from app.celery import DELIVERY_QUEUE
from app.cli import main
from app.cli_dlq import parse_time
from app.config import settings
from app.deadletter import DeadLetter, DeadLetterQueue
from app.endpoints import EndpointRegistry
from app.gates import Gate
from tests.conftest import Publications

SECRET_PATTERN = re.compile(r"whsec_[A-Za-z0-9+/=]{40,}")


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def succeeds(*args: str, input: str | None = None) -> Result:
    result = run(*args, input=input)
    assert result.exit_code == 0, result.output
    return result


def fails(*args: str, code: int = 1, input: str | None = None) -> Result:
    """The command ends with a one-line error (exit ``code``), not an unhandled exception."""
    result = run(*args, input=input)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    return result


def json_out(*args: str) -> Any:
    return json.loads(succeeds(*args, "--json").stdout)


def new_secret(size: int = 32) -> str:
    return "whsec_" + base64.b64encode(os.urandom(size)).decode()


#: Cool-down the breaker tests open with: the test setting (1.5s) could run out mid-test.
COOLDOWN = 60.0


@pytest.fixture
def long_cooldown(monkeypatch: pytest.MonkeyPatch) -> None:
    long = dataclasses.replace(settings(), breaker_cooldown=COOLDOWN,
                               breaker_max_cooldown=10 * COOLDOWN)
    monkeypatch.setattr(app.gates, "settings", lambda: long)


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


# -- dead letters ---------------------------------------------------------------------------


def test_parse_time_reads_unix_seconds_iso_8601_and_relative_ages() -> None:
    now = 1_800_000_000.0
    assert parse_time("15m", now=now) == now - 900
    assert parse_time("2h", now=now) == now - 7200
    assert parse_time("1d", now=now) == now - 86400
    assert parse_time("1700000000") == 1_700_000_000.0
    assert parse_time("2026-01-01T00:00:00+00:00") == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    for bad in ("yesterday", "nan", "15x", ""):
        with pytest.raises(ValueError, match="is not a time"):
            parse_time(bad)


def test_dlq_list_shows_every_entry_oldest_first(dead_letters: DeadLetterQueue) -> None:
    table = succeeds("dlq", "list").stdout.splitlines()
    assert table[0].split() == ["ID", "REASON", "ATTEMPTS", "LAST", "STATUS", "LAST", "ERROR",
                                "DEAD-LETTERED", "AT"]
    assert [line.split()[0] for line in table[1:]] == [
        "shop/ev-old", "crm/ev-a", "shop/ev-mid", "shop/ev-new", "crm/ev-b"]
    assert "2h ago" in table[1]
    entries = json_out("dlq", "list")
    assert ids_of(entries) == ["shop/ev-old", "crm/ev-a", "shop/ev-mid", "shop/ev-new",
                               "crm/ev-b"]
    assert entries[0]["payload"] == {"order": "ev-old"}


def test_dlq_list_filters_by_endpoint_reason_and_time(dead_letters: DeadLetterQueue) -> None:
    assert ids_of(json_out("dlq", "list", "--endpoint", "crm")) == ["crm/ev-a", "crm/ev-b"]
    assert ids_of(json_out("dlq", "list", "--reason", "exhausted")) == [
        "shop/ev-old", "shop/ev-new", "crm/ev-b"]
    assert ids_of(json_out("dlq", "list", "--since", "15m")) == [
        "shop/ev-mid", "shop/ev-new", "crm/ev-b"]
    assert ids_of(json_out("dlq", "list", "--until", "1h")) == ["shop/ev-old"]
    hour_ago = datetime.fromtimestamp(time.time() - 3600, tz=UTC).isoformat()
    assert ids_of(json_out("dlq", "list", "--endpoint", "shop", "--reason", "exhausted",
                           "--since", hour_ago)) == ["shop/ev-new"]
    assert ids_of(json_out("dlq", "list", "--limit", "2")) == ["shop/ev-old", "crm/ev-a"]
    assert "no dead letters match" in succeeds("dlq", "list", "--endpoint", "nope").stdout


def test_dlq_list_rejects_an_unknown_reason_and_a_bad_time(dead_letters: DeadLetterQueue
                                                           ) -> None:
    assert "'lost' is not one of" in fails("dlq", "list", "--reason", "lost", code=2).stderr
    assert "is not a time" in fails("dlq", "list", "--since", "last week", code=2).stderr


def test_dlq_show_prints_the_whole_entry_with_its_payload(dead_letters: DeadLetterQueue
                                                          ) -> None:
    entry = json_out("dlq", "show", "crm/ev-a")
    assert entry["id"] == "crm/ev-a"
    assert entry["reason"] == "endpoint_removed"
    assert entry["payload"] == {"order": "ev-a"}
    assert entry["last_status"] == 503
    text = succeeds("dlq", "show", "crm/ev-a").stdout
    assert '"order": "ev-a"' in text
    assert "endpoint_removed (the endpoint does not exist" in text
    assert "no dead letter 'crm/nope'" in fails("dlq", "show", "crm/nope").stderr


def test_dlq_purge_dry_run_lists_what_it_would_delete_and_deletes_nothing(
        dead_letters: DeadLetterQueue) -> None:
    result = succeeds("dlq", "purge", "--reason", "exhausted", "--dry-run")
    assert result.stdout.splitlines() == ["would purge 3 dead letter(s)", "shop/ev-old",
                                          "shop/ev-new", "crm/ev-b"]
    assert dead_letters.count() == 5


def test_dlq_purge_deletes_exactly_the_selection_after_confirmation(
        dead_letters: DeadLetterQueue) -> None:
    fails("dlq", "purge", "--endpoint", "shop", input="n\n")
    assert dead_letters.count() == 5
    result = succeeds("dlq", "purge", "--endpoint", "shop", "--reason", "exhausted",
                      input="y\n")
    assert "purged 2 dead letter(s)" in result.stdout
    assert ids_of(json_out("dlq", "list")) == ["crm/ev-a", "shop/ev-mid", "crm/ev-b"]
    succeeds("dlq", "purge", "crm/ev-a", "ev-b", "--yes")
    assert ids_of(json_out("dlq", "list")) == ["shop/ev-mid"]


def test_dlq_replay_and_purge_refuse_an_empty_selection_without_all(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    for verb in ("replay", "purge"):
        refused = fails("dlq", verb, "--yes" if verb == "purge" else "--dry-run", code=2)
        assert "refusing to act on every dead letter" in refused.stderr
        mixed = fails("dlq", verb, "--all", "--endpoint", "shop", code=2)
        assert "--all selects every dead letter" in mixed.stderr
    assert dead_letters.count() == 5
    assert published.events == []


def test_dlq_replay_dry_run_counts_exactly_the_filtered_entries_and_keeps_them(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    result = succeeds("dlq", "replay", "--endpoint", "shop", "--since", "1h", "--dry-run")
    assert result.stdout.splitlines() == ["would replay 2 dead letter(s)", "shop/ev-mid",
                                          "shop/ev-new"]
    everything = succeeds("dlq", "replay", "--all", "--dry-run")
    assert everything.stdout.splitlines()[0] == "would replay 5 dead letter(s)"
    assert dead_letters.count() == 5
    assert published.events == []


def test_dlq_replay_enqueues_the_selection_with_its_event_ids_and_removes_it(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    result = succeeds("dlq", "replay", "--endpoint", "shop", "--reason", "exhausted")
    assert "replayed 2 dead letter(s)" in result.stdout
    assert "warning" not in result.stderr  # shop exists and is enabled
    assert published.events == [(DELIVERY_QUEUE, "shop", "ev-old"),
                                (DELIVERY_QUEUE, "shop", "ev-new")]
    assert ids_of(json_out("dlq", "list")) == ["crm/ev-a", "shop/ev-mid", "crm/ev-b"]


def test_dlq_replay_warns_when_the_endpoint_cannot_receive(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    result = succeeds("dlq", "replay", "crm/ev-a", "crm/missing")
    assert "endpoint 'crm' does not exist" in result.stderr
    assert "not in the dead-letter queue: crm/missing" in result.stderr
    assert published.events == [(DELIVERY_QUEUE, "crm", "ev-a")]
    assert dead_letters.get("crm/ev-a") is None


def test_dlq_restore_spool_moves_spooled_entries_into_redis(monkeypatch, tmp_path) -> None:
    spool_settings = dataclasses.replace(settings(), dlq_spool_path=str(tmp_path / "spool"))
    for module in (app.deadletter, app.cli_dlq):
        monkeypatch.setattr(module, "settings", lambda: spool_settings)
    spooled = [DeadLetter(endpoint_id="shop", event_id=f"ev-{n}", event_type="order.paid",
                          payload={}, reason="exhausted") for n in range(2)]
    (tmp_path / "spool").write_text("".join(entry.to_json() + "\n" for entry in spooled))
    assert "moved 2 dead letter(s)" in succeeds("dlq", "restore-spool").stdout
    assert sorted(ids_of(json_out("dlq", "list"))) == ["shop/ev-0", "shop/ev-1"]
    assert not (tmp_path / "spool").exists()
    assert "nothing to restore" in succeeds("dlq", "restore-spool").stdout


# -- breakers -------------------------------------------------------------------------------


@pytest.mark.usefixtures("long_cooldown")
def test_breaker_status_shows_an_open_breaker_and_reset_closes_it() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    succeeds("endpoint", "add", "crm", "--url", "https://crm.example/")
    threshold = open_breaker("shop")
    status = json_out("breaker", "status", "shop")
    assert set(status) == {"endpoint_id", "state", "failures", "open_until", "blocked_until",
                           "cooldown"}
    assert (status["state"], status["failures"]) == ("open", threshold)
    assert status["open_until"] > time.time()
    assert status["blocked_until"] is None
    assert status["cooldown"] == COOLDOWN
    assert [(item["endpoint_id"], item["state"]) for item in json_out("breaker", "status")
            ] == [("crm", "closed"), ("shop", "open")]
    table = {line.split()[0]: line for line in succeeds("breaker", "status").stdout.splitlines()}
    assert table["ENDPOINT"].split()[:3] == ["ENDPOINT", "STATE", "FAILURES"]
    assert table["shop"].split()[1:3] == ["open", str(threshold)]
    assert re.search(r"\(in \d+s\)", table["shop"])
    assert table["crm"].split()[1:3] == ["closed", "0"]
    assert re.search(r"^state: +open$", succeeds("breaker", "status", "shop").stdout, re.M)

    reset = succeeds("breaker", "reset", "shop")
    assert reset.stdout == "breaker of shop reset: closed, no Retry-After block\n"
    status = json_out("breaker", "status", "shop")
    assert (status["state"], status["failures"], status["open_until"]) == ("closed", 0, None)
    assert Gate().admit("shop", "after-reset", "t").verdict == "admitted"


def test_breaker_status_shows_a_retry_after_block_and_reset_lifts_it() -> None:
    succeeds("endpoint", "add", "shop", "--url", "https://shop.example/")
    block_with_retry_after("shop", 30)
    status = json_out("breaker", "status", "shop")
    assert status["state"] == "closed"
    assert time.time() + 20 < status["blocked_until"] <= time.time() + 31
    assert re.search(r"^blocked until: .*\(in \d+s\)$",
                     succeeds("breaker", "status", "shop").stdout, re.M)
    succeeds("breaker", "reset", "shop")
    assert json_out("breaker", "status", "shop")["blocked_until"] is None


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
    assert set(report) == {"endpoints", "queues", "schedule", "dead_letters", "breakers"}
    assert report["endpoints"] == {"total": 2, "enabled": 1, "disabled": 1}
    assert set(report["queues"]) == {"hookline", "hookline.retry"}
    assert all(isinstance(depth, int) for depth in report["queues"].values())
    assert report["dead_letters"] == {
        "total": 5, "by_reason": {"exhausted": 3, "rejected": 1, "endpoint_removed": 1}}
    assert report["breakers"] == []
    text = succeeds("stats").stdout
    assert "2 (1 enabled, 1 disabled)" in text
    assert "all closed, none blocked" in text


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
    monkeypatch.setattr(app.cli, "DELIVERY_QUEUE", first)
    monkeypatch.setattr(app.cli, "RETRY_QUEUE", retry)
    redis_client.lpush(first, "m1", "m2", "m3")
    redis_client.lpush(retry, "m4")
    assert json_out("stats")["queues"] == {first: 3, retry: 1}
    redis_client.delete(first, retry)
