"""``hookline dlq``: list, show, replay (filtered, throttled), purge, trim and restore-spool.

Dead letters are written directly with ``DeadLetterQueue.add``. Without a worker, what a replay
publishes is recorded through Celery's ``after_task_publish`` signal (and what it parks is read
from the retry schedule); the delivery tests use the session worker and a real receiver.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

import hookline.cli.dlq
import hookline.store.dead_letter_queue
import hookline.store.schedule
from examples.receiver import Receiver, Reply, always
from hookline.cli.dlq import parse_age, parse_time
from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.messages import DELIVERY_QUEUE
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import SCHEDULE_KEYS, WAKE_KEY, RetrySchedule
from hookline.transport.envelope import build_message
from hookline.worker.celery import worker_app as celery_app
from tests.conftest import Publications, wait_until
from tests.support.cli import fails, json_out, succeeds


def ids_of(entries: list[dict[str, Any]]) -> list[str]:
    return [entry["id"] for entry in entries]


def dead_letter(endpoint_id: str, event_id: str, reason: str = "exhausted", *,
                attempts: int = 3, age: float = 60.0) -> DeadLetter:
    return DeadLetter(
        endpoint_id=endpoint_id, event_id=event_id, event_type="order.paid",
        payload={"order": event_id}, reason=reason, attempts=attempts, last_status=503,
        last_error="503 from receiver", dead_lettered_at=time.time() - age,
    )


@pytest.fixture
def dead_letters() -> DeadLetterQueue:
    """Five dead letters: ``shop`` 2h, 10m and 10s ago, ``crm`` 30m and 5s ago; attempts 1-5."""
    queue = DeadLetterQueue()
    for endpoint_id, event_id, reason, age, attempts in [
        ("shop", "ev-old", "exhausted", 7200, 5),
        ("shop", "ev-mid", "rejected", 600, 1),
        ("shop", "ev-new", "exhausted", 10, 4),
        ("crm", "ev-a", "endpoint_removed", 1800, 2),
        ("crm", "ev-b", "exhausted", 5, 3),
    ]:
        queue.add(dead_letter(endpoint_id, event_id, reason, attempts=attempts, age=age))
    return queue


@pytest.fixture
def unparked(redis_client: redis.Redis) -> Iterator[None]:
    """Empty the retry schedule after the test: a worker starting for the next test must not
    release what this one parked (before that test's clean-up runs)."""
    yield
    redis_client.delete(*SCHEDULE_KEYS, WAKE_KEY)


def receiving_endpoint(receiver: Receiver) -> Endpoint:
    endpoint_id = f"ep-{uuid.uuid4().hex[:10]}"
    return EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}",
                                                              always(Reply(204))))


def arrived(receiver: Receiver, endpoint: Endpoint) -> set[str]:
    return {request.webhook_id for request in receiver.requests_to(f"/{endpoint.id}")}


# -- parsing --------------------------------------------------------------------------------


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


def test_parse_age_reads_seconds_and_units() -> None:
    assert parse_age("30d") == 30 * 86400
    assert parse_age("90m") == 5400
    assert parse_age("3600") == 3600
    for bad in ("-5", "inf", "soon", ""):
        with pytest.raises(ValueError, match="is not an age"):
            parse_age(bad)


# -- list and show --------------------------------------------------------------------------


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
    assert "no dead letters match" in succeeds("dlq", "list", "--endpoint", "crm",
                                               "--reason", "rejected").stdout


def test_dlq_list_filters_by_attempt_count(dead_letters: DeadLetterQueue) -> None:
    assert ids_of(json_out("dlq", "list", "--min-attempts", "4")) == ["shop/ev-old",
                                                                       "shop/ev-new"]
    assert ids_of(json_out("dlq", "list", "--max-attempts", "2")) == ["crm/ev-a", "shop/ev-mid"]
    assert ids_of(json_out("dlq", "list", "--min-attempts", "2", "--max-attempts", "3")) == [
        "crm/ev-a", "crm/ev-b"]
    assert ids_of(json_out("dlq", "list", "--min-attempts", "3", "--reason", "exhausted",
                           "--endpoint", "crm")) == ["crm/ev-b"]
    empty = fails("dlq", "list", "--min-attempts", "4", "--max-attempts", "2", code=2)
    assert "--min-attempts is above --max-attempts" in empty.stderr
    assert "is not in the range" in fails("dlq", "list", "--min-attempts", "-1", code=2).stderr


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


# -- purge ----------------------------------------------------------------------------------


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
    assert dead_letters.counts_by_reason() == {"rejected": 1}


def test_dlq_purge_by_attempt_count(dead_letters: DeadLetterQueue) -> None:
    succeeds("dlq", "purge", "--max-attempts", "2", "--yes")
    assert ids_of(json_out("dlq", "list")) == ["shop/ev-old", "shop/ev-new", "crm/ev-b"]


def test_dlq_replay_and_purge_refuse_an_empty_selection_without_all(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    for verb in ("replay", "purge"):
        refused = fails("dlq", verb, "--yes" if verb == "purge" else "--dry-run", code=2)
        assert "refusing to act on every dead letter" in refused.stderr
        mixed = fails("dlq", verb, "--all", "--endpoint", "shop", code=2)
        assert "--all selects every dead letter" in mixed.stderr
        mixed = fails("dlq", verb, "--all", "--min-attempts", "2", code=2)
        assert "--all selects every dead letter" in mixed.stderr
    assert dead_letters.count() == 5
    assert published.events == []


# -- replay without a worker ----------------------------------------------------------------


@pytest.mark.usefixtures("unparked")
def test_dlq_replay_dry_run_counts_exactly_the_filtered_entries_and_keeps_them(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    result = succeeds("dlq", "replay", "--endpoint", "shop", "--since", "1h", "--dry-run")
    assert result.stdout.splitlines() == [
        "would replay 2 dead letter(s) straight onto the delivery queue",
        "shop/ev-mid", "shop/ev-new"]
    everything = succeeds("dlq", "replay", "--all", "--dry-run")
    assert everything.stdout.splitlines()[0].startswith("would replay 5 dead letter(s)")
    by_attempts = succeeds("dlq", "replay", "--min-attempts", "3", "--dry-run", "--rate",
                           "2/s")
    assert by_attempts.stdout.splitlines() == [
        "would replay 3 dead letter(s) through the retry schedule, 2/s per endpoint "
        "(the last in 0.5s)",
        "shop/ev-old", "shop/ev-new", "crm/ev-b"]
    assert dead_letters.count() == 5
    assert published.events == []
    assert RetrySchedule().stats().total == 0


def test_dlq_replay_enqueues_the_selection_with_its_event_ids_and_removes_it(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    EndpointRegistry().add("shop", "https://shop.example/")
    result = succeeds("dlq", "replay", "--endpoint", "shop", "--reason", "exhausted")
    assert "replayed 2 dead letter(s) straight onto the delivery queue" in result.stdout
    assert "warning" not in result.stderr  # shop exists and is enabled
    assert published.events == [(DELIVERY_QUEUE, "shop", "ev-old"),
                                (DELIVERY_QUEUE, "shop", "ev-new")]
    assert ids_of(json_out("dlq", "list")) == ["crm/ev-a", "shop/ev-mid", "crm/ev-b"]


def test_dlq_replay_warns_when_the_endpoint_cannot_receive(
        dead_letters: DeadLetterQueue, published: Publications) -> None:
    replayed_at = time.time()
    result = succeeds("dlq", "replay", "crm/ev-a", "crm/missing")
    assert "endpoint 'crm' does not exist" in result.stderr
    assert "not in the dead-letter queue: crm/missing" in result.stderr
    assert published.events == [(DELIVERY_QUEUE, "crm", "ev-a")]
    # The old entry is gone; a worker running in the session may already have dead-lettered
    # the replayed event again (its endpoint does not exist), as a new entry.
    entry = dead_letters.get("crm/ev-a")
    assert entry is None or (entry.dead_lettered_at >= replayed_at
                             and entry.reason == "endpoint_removed")


@pytest.mark.usefixtures("unparked")
def test_dlq_replay_with_a_rate_parks_each_endpoints_events_spaced_by_the_rate(
        receiver: Receiver, published: Publications) -> None:
    # Endpoints that answer 204: a worker running in the session may take the first events.
    shop, crm = receiving_endpoint(receiver), receiving_endpoint(receiver)
    queue = DeadLetterQueue()
    for endpoint in (shop, crm):
        for n in range(3):
            queue.add(dead_letter(endpoint.id, f"ev-{n}", age=100 - n))
    queue.add(dead_letter(shop.id, "ev-other", "rejected"))
    before = time.time()
    result = succeeds("dlq", "replay", "--reason", "exhausted", "--rate", "1/m")
    assert ("replayed 6 dead letter(s) through the retry schedule, one every 60s per endpoint "
            "(the last in about 2m)") in result.stdout
    assert published.events == []  # parked, not published
    # Only this test's endpoints: a worker running in the session may still dead-letter an
    # earlier test's replayed events meanwhile.
    assert ids_of(json_out("dlq", "list", "--endpoint", shop.id)) == [f"{shop.id}/ev-other"]
    assert ids_of(json_out("dlq", "list", "--endpoint", crm.id)) == []
    # The first of each endpoint is due at once (a worker may have sent it already); the
    # others wait one interval per place in their endpoint's line.
    retries = {retry.id: retry for retry in RetrySchedule().scheduled()}
    for endpoint in (shop, crm):
        for n in (1, 2):
            due = retries[f"{endpoint.id}/ev-{n}"].due
            assert before + 60 * n - 2 < due < time.time() + 60 * n + 2
    retry = retries[f"{shop.id}/ev-2"]
    assert (retry.event_type, retry.payload, retry.attempts) == ("order.paid",
                                                                 {"order": "ev-2"}, 0)
    assert retry.last_error == "replay of a dead letter (exhausted)"


def test_dlq_replay_of_more_than_100_entries_is_throttled_by_default(
        published: Publications) -> None:
    queue = DeadLetterQueue()
    for n in range(101):
        queue.add(dead_letter("shop", f"ev-{n}"))
    text = succeeds("dlq", "replay", "--endpoint", "shop", "--dry-run").stdout
    assert text.splitlines()[0] == ("would replay 101 dead letter(s) through the retry "
                                    "schedule, 10/s per endpoint (the last in 10s)")
    bad = fails("dlq", "replay", "--endpoint", "shop", "--rate", "fast", code=2)
    assert "rate 'fast' is invalid" in bad.stderr
    assert queue.count() == 101


@pytest.mark.usefixtures("unparked")
def test_dlq_replay_keeps_what_the_full_retry_schedule_cannot_take(
        monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> None:
    capped = dataclasses.replace(settings(), schedule_max_per_endpoint=2)
    monkeypatch.setattr(hookline.store.schedule, "settings", lambda: capped)
    full, other = receiving_endpoint(receiver), receiving_endpoint(receiver)
    schedule = RetrySchedule()
    for n in range(2):  # far in the future: no releaser takes them during the test
        message = build_message(celery_app, task_name="hookline.deliver", task_id=f"t-{n}",
                                args=[full.id, "order.paid", {}], kwargs={"event_id": f"x{n}"},
                                retries=1, queue=DELIVERY_QUEUE)
        schedule.park(endpoint_id=full.id, event_id=f"x{n}", countdown=3600, message=message)
    queue = DeadLetterQueue()
    for n in range(3):
        queue.add(dead_letter(full.id, f"ev-{n}", age=100 - n))
    for n in range(2):
        queue.add(dead_letter(other.id, f"ev-{n}", age=50 - n))
    result = succeeds("dlq", "replay", "--all", "--rate", "1/m")
    assert "replayed 2 dead letter(s)" in result.stdout
    assert "3 dead letter(s) not replayed: the retry schedule is at its cap" in result.stderr
    assert ids_of(json_out("dlq", "list")) == [f"{full.id}/ev-{n}" for n in range(3)]


# -- replay delivered by a worker -----------------------------------------------------------


@pytest.mark.usefixtures("worker")
def test_dlq_replay_by_reason_delivers_exactly_those_events_with_their_event_ids(
        receiver: Receiver) -> None:
    endpoint = receiving_endpoint(receiver)
    queue = DeadLetterQueue()
    reasons = ["rejected", "exhausted", "rejected", "endpoint_gone", "rejected", "expired"]
    for n, reason in enumerate(reasons):
        queue.add(dead_letter(endpoint.id, f"ev-{n}-{reason}", reason, age=100 - n))
    chosen = {f"ev-{n}-rejected" for n, reason in enumerate(reasons) if reason == "rejected"}
    assert "would replay 3" in succeeds("dlq", "replay", "--reason", "rejected",
                                        "--dry-run").stdout
    assert len(queue.find(DeadLetterFilter(endpoint_id=endpoint.id))) == 6
    result = succeeds("dlq", "replay", "--reason", "rejected")
    assert "replayed 3 dead letter(s)" in result.stdout
    assert receiver.wait_for(lambda _: arrived(receiver, endpoint) >= chosen, 20)
    # A later event goes through the same queue: once it arrived, nothing else is coming.
    marker = str(uuid.uuid4())
    succeeds("send", endpoint.id, "--event-id", marker)
    assert receiver.wait_for(lambda _: marker in arrived(receiver, endpoint), 20)
    assert arrived(receiver, endpoint) == chosen | {marker}
    for request in receiver.requests_to(f"/{endpoint.id}"):
        if request.webhook_id != marker:
            assert request.json()["data"] == {"order": request.webhook_id}
    left = queue.find(DeadLetterFilter(endpoint_id=endpoint.id))
    assert sorted(entry.reason for entry in left) == ["endpoint_gone", "exhausted", "expired"]


@pytest.mark.usefixtures("worker")
def test_dlq_replay_by_attempt_count_delivers_only_those_entries(receiver: Receiver) -> None:
    endpoint = receiving_endpoint(receiver)
    queue = DeadLetterQueue()
    for attempts in range(1, 7):
        queue.add(dead_letter(endpoint.id, f"ev-{attempts}", attempts=attempts))
    succeeds("dlq", "replay", "--endpoint", endpoint.id, "--min-attempts", "2",
             "--max-attempts", "4")
    chosen = {"ev-2", "ev-3", "ev-4"}
    assert receiver.wait_for(lambda _: arrived(receiver, endpoint) >= chosen, 20)
    marker = str(uuid.uuid4())
    succeeds("send", endpoint.id, "--event-id", marker)
    assert receiver.wait_for(lambda _: marker in arrived(receiver, endpoint), 20)
    assert arrived(receiver, endpoint) == chosen | {marker}
    left = queue.find(DeadLetterFilter(endpoint_id=endpoint.id))
    assert sorted(entry.attempts for entry in left) == [1, 5, 6]


@pytest.mark.usefixtures("worker")
def test_a_throttled_replay_reaches_the_receiver_spread_over_time(receiver: Receiver) -> None:
    endpoint = receiving_endpoint(receiver)
    queue = DeadLetterQueue()
    event_ids = [f"ev-{n}" for n in range(30)]
    for n, event_id in enumerate(event_ids):
        queue.add(dead_letter(endpoint.id, event_id, age=100 - n))
    result = succeeds("dlq", "replay", "--endpoint", endpoint.id, "--rate", "10/s")
    assert ("replayed 30 dead letter(s) through the retry schedule, 10/s per endpoint (the "
            "last in 2.9s)") in result.stdout
    assert queue.find(DeadLetterFilter(endpoint_id=endpoint.id)) == []
    assert receiver.wait_for(lambda _: arrived(receiver, endpoint) == set(event_ids), 30)
    times = sorted(request.at for request in receiver.requests_to(f"/{endpoint.id}"))
    assert len(times) == 30  # each once
    assert times[-1] - times[0] >= 2.5
    # Spread, not bunched at the end: no second holds much more than the rate.
    assert max(sum(1 for t in times if start <= t < start + 1) for start in times) <= 13
    assert queue.find(DeadLetterFilter(endpoint_id=endpoint.id)) == []
    wait_until(lambda: endpoint.id not in RetrySchedule().stats().by_endpoint)


# -- trim -----------------------------------------------------------------------------------


@pytest.fixture
def retention(monkeypatch: pytest.MonkeyPatch) -> float:
    """A one-day retention for ``hookline dlq trim``. The automatic trim (at most once a
    minute per process, when a dead letter is added) is kept out: whether it is due depends on
    what ran before in this process, and it has tests of its own
    (tests/store/test_dead_letter_queue.py)."""
    one_day = dataclasses.replace(settings(), dlq_retention=86400.0)
    for module in (hookline.store.dead_letter_queue, hookline.cli.dlq):
        monkeypatch.setattr(module, "settings", lambda: one_day)
    monkeypatch.setattr(hookline.store.dead_letter_queue._auto_trim, "due", lambda: False)
    return 86400.0


def test_dlq_trim_removes_only_entries_older_than_the_retention(retention: float) -> None:
    queue = DeadLetterQueue()
    for event_id, age in [("ancient", 40 * 86400), ("old", retention + 60),
                          ("young", retention - 60), ("new", 5)]:
        queue.add(dead_letter("shop", event_id, age=age))
    queue._write([dead_letter("shop", "old-again", age=retention + 30)])
    dry = succeeds("dlq", "trim", "--dry-run").stdout
    assert dry.startswith("would trim 3 dead letter(s) older than 1d")
    assert queue.count() == 5
    assert succeeds("dlq", "trim").stdout.startswith("trimmed 3 dead letter(s) older than 1d")
    assert ids_of(json_out("dlq", "list")) == ["shop/young", "shop/new"]
    assert queue.counts_by_reason() == {"exhausted": 2}
    assert succeeds("dlq", "trim").stdout.startswith("nothing to trim: 0 dead letter(s)")


def test_dlq_trim_older_than_a_shorter_age_asks_first(retention: float) -> None:
    queue = DeadLetterQueue()
    for event_id, age in [("hour", 3600), ("minute", 60)]:
        queue.add(dead_letter("shop", event_id, age=age))
    fails("dlq", "trim", "--older-than", "30m", input="n\n")
    assert queue.count() == 2
    assert "trimmed 1" in succeeds("dlq", "trim", "--older-than", "30m", "--yes").stdout
    assert ids_of(json_out("dlq", "list")) == ["shop/minute"]
    assert "is not an age" in fails("dlq", "trim", "--older-than", "soon", code=2).stderr


def test_dlq_trim_with_retention_zero_needs_an_age(monkeypatch: pytest.MonkeyPatch) -> None:
    forever = dataclasses.replace(settings(), dlq_retention=0.0)
    monkeypatch.setattr(hookline.cli.dlq, "settings", lambda: forever)
    # The queue's own trim on add reads the same setting.
    monkeypatch.setattr(hookline.store.dead_letter_queue, "settings", lambda: forever)
    DeadLetterQueue().add(dead_letter("shop", "kept", age=400 * 86400))
    assert "keeps dead letters forever" in fails("dlq", "trim", code=2).stderr
    assert DeadLetterQueue().count() == 1


# -- restore-spool --------------------------------------------------------------------------


def test_dlq_restore_spool_moves_spooled_entries_into_redis(monkeypatch, tmp_path) -> None:
    spool_settings = dataclasses.replace(settings(), dlq_spool_path=str(tmp_path / "spool"))
    for module in (hookline.store.dead_letter_queue, hookline.cli.dlq):
        monkeypatch.setattr(module, "settings", lambda: spool_settings)
    spooled = [DeadLetter(endpoint_id="shop", event_id=f"ev-{n}", event_type="order.paid",
                          payload={}, reason="exhausted") for n in range(2)]
    (tmp_path / "spool").write_text("".join(entry.to_json() + "\n" for entry in spooled))
    assert "moved 2 dead letter(s)" in succeeds("dlq", "restore-spool").stdout
    assert sorted(ids_of(json_out("dlq", "list"))) == ["shop/ev-0", "shop/ev-1"]
    assert not (tmp_path / "spool").exists()
    assert "nothing to restore" in succeeds("dlq", "restore-spool").stdout


# -- the last status, the per-endpoint index, the audit log -----------------------------------


def test_dlq_list_and_purge_filter_by_the_last_status(dead_letters: DeadLetterQueue) -> None:
    dead_letters.add(dataclasses.replace(dead_letter("shop", "ev-410"), last_status=410))
    dead_letters.add(dataclasses.replace(dead_letter("crm", "ev-none"), last_status=None))
    assert ids_of(json_out("dlq", "list", "--status", "410")) == ["shop/ev-410"]
    assert ids_of(json_out("dlq", "list", "--status", "0")) == ["crm/ev-none"]
    assert len(json_out("dlq", "list", "--status", "503", "--endpoint", "shop")) == 3
    assert "is not in the range" in fails("dlq", "list", "--status", "600", code=2).stderr
    assert "purged 1 dead letter(s)" in succeeds("dlq", "purge", "--status", "410",
                                                 "--yes").stdout
    assert dead_letters.count() == 6


def test_dlq_reindex_indexes_entries_written_before_the_endpoint_index(
        dead_letters: DeadLetterQueue, redis_client: redis.Redis) -> None:
    stale = list(redis_client.scan_iter("hookline:{dlq}:by_endpoint*"))
    redis_client.delete("hookline:{dlq}:endpoint_indexed", *stale)  # as an older version left it
    assert "indexed 5 dead letter(s) by endpoint" in succeeds("dlq", "reindex").stdout
    assert redis_client.zcard("hookline:{dlq}:by_endpoint:shop") == 3
    assert ids_of(json_out("dlq", "list", "--endpoint", "crm")) == ["crm/ev-a", "crm/ev-b"]


def test_dlq_actions_are_in_the_audit_log_with_the_cli_user(dead_letters: DeadLetterQueue
                                                            ) -> None:
    from hookline.service import audit
    from hookline.service.actor import cli_actor

    succeeds("dlq", "purge", "crm/ev-a", "--yes")
    entry = audit.recent(cli_actor(), limit=1).items[0]
    assert (entry.actor, entry.action, entry.target) == (cli_actor().name, "dead_letter.purge",
                                                         "1 dead letter(s)")
    assert entry.session.startswith("cli:")


def test_an_unknown_endpoint_is_an_error_and_a_removed_one_keeps_its_dead_letters(
        dead_letters: DeadLetterQueue) -> None:
    """Known: an endpoint that exists, or one a dead letter still names (``shop`` and ``crm``
    have dead letters and no endpoint, as after a removal)."""
    for verb in (["list"], ["list", "--json"], ["replay"], ["replay", "--dry-run"],
                 ["purge", "--yes"], ["purge", "--dry-run"]):
        result = fails("dlq", *verb, "--endpoint", "nope")
        assert result.output == "Error: no endpoint 'nope'\n", verb
    assert fails("event", "show", "ev-x", "--endpoint", "nope").output == (
        "Error: no endpoint 'nope'\n")
    assert fails("event", "show", "ev-x", "--app", "nope").output == (
        "Error: no application 'nope'\n")
    assert dead_letters.count() == 5  # nothing replayed, nothing purged
    assert ids_of(json_out("dlq", "list", "--endpoint", "crm")) == ["crm/ev-a", "crm/ev-b"]
    assert "would replay 2 dead letter(s)" in succeeds(
        "dlq", "replay", "--endpoint", "crm", "--dry-run").stdout
    EndpointRegistry().add("quiet", "http://127.0.0.1:9/quiet")  # exists, no dead letter
    assert succeeds("dlq", "list", "--endpoint", "quiet").stdout == "no dead letters match\n"
    assert succeeds("dlq", "purge", "--endpoint", "quiet", "--yes").stdout == (
        "no dead letters match: nothing purged\n")
