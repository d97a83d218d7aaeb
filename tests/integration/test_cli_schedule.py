"""``hookline stats``, ``schedule list`` and ``releaser`` against the durable retry schedule.

Retries are parked directly with ``RetrySchedule.park`` (no worker here), with messages built as
the delivery task builds them. The releaser runs as a real process, stopped by a signal; what it
pushes onto ``hookline.retry`` is taken off again after the test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import hookline.cli.schedule
import hookline.worker.celery
from hookline.cli.schedule import describe_due, describe_lag, schedule_rows
from hookline.core.config import ConfigError
from hookline.core.messages import RETRY_QUEUE
from hookline.delivery.releaser import Releaser
from hookline.store import connection as store
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule, ScheduleStats
from hookline.transport.envelope import build_message
from tests.conftest import ROOT, wait_until
from tests.support.cli import fails, json_out, succeeds


class Parked:
    """Retries this test parked, and their messages, to take off the retry queue afterwards."""

    def __init__(self) -> None:
        self.schedule = RetrySchedule()
        self.messages: list[str] = []

    def __call__(self, endpoint_id: str, event_id: str, countdown: float, *,
                 attempts: int = 1, last_status: int | None = 503,
                 last_error: str = "503 from receiver") -> float:
        """Park a retry of ``event_id`` due in ``countdown`` seconds; returns its due time."""
        message = build_message(
            hookline.worker.celery.worker_app, task_name="hookline.deliver",
            task_id=f"t-{event_id}",
            args=[endpoint_id, "order.created", {"n": attempts}],
            kwargs={"event_id": event_id, "attempts": attempts}, retries=attempts,
            queue=RETRY_QUEUE,
        )
        self.messages.append(message)
        return self.schedule.park(endpoint_id=endpoint_id, event_id=event_id,
                                  countdown=countdown, message=message,
                                  last_status=last_status, last_error=last_error)


@pytest.fixture(autouse=True)
def quiet(quiet_redis: redis.Redis) -> redis.Redis:
    """A database of its own: the session's worker would release these retries at once."""
    return quiet_redis


@pytest.fixture
def park(quiet: redis.Redis) -> Iterator[Parked]:
    parked = Parked()
    yield parked
    for message in parked.messages:  # released ones: no later worker may deliver them
        quiet.lrem(RETRY_QUEUE, 0, message)


# -- stats ----------------------------------------------------------------------------------


def test_stats_json_reports_scheduled_retries_by_endpoint_and_the_oldest_due(
        park: Parked) -> None:
    assert json_out("stats")["schedule"] == {"total": 0, "by_endpoint": {}, "oldest_due": None,
                                             "lag": 0}
    park("shop", "e1", 90)
    soonest = park("shop", "e2", 30)
    park("crm", "e3", 60)
    scheduled = json_out("stats")["schedule"]
    assert scheduled["total"] == 3
    assert scheduled["by_endpoint"] == {"shop": 2, "crm": 1}
    assert scheduled["oldest_due"] == pytest.approx(soonest, abs=0.001)
    assert scheduled["oldest_due"] > time.time() + 20
    assert scheduled["lag"] == 0


def test_stats_text_shows_the_schedule_and_a_releaser_on_time(park: Parked) -> None:
    park("shop", "e1", 30)
    park("shop", "e2", 60)
    park("crm", "e3", 45)
    text = succeeds("stats").stdout
    assert re.search(r"^scheduled retries: +3$", text, re.M)
    assert re.search(r"^  shop: +2\n  crm: +1$", text, re.M)  # busiest first
    assert re.search(r"^oldest retry: +due in (29|30)s$", text, re.M)
    assert re.search(r"^release: +releaser on time$", text, re.M)


def test_stats_text_shows_an_overdue_retry_and_the_releaser_lag(park: Parked) -> None:
    park("shop", "late", 0)  # no releaser runs here: it stays overdue
    time.sleep(0.3)
    scheduled = json_out("stats")["schedule"]
    assert scheduled["lag"] >= 0.3
    text = succeeds("stats").stdout
    assert re.search(r"^oldest retry: +due 0s ago$", text, re.M)
    assert re.search(r"^release: +releaser behind by 0\.\ds$", text, re.M)


def test_stats_text_of_an_empty_schedule() -> None:
    text = succeeds("stats").stdout
    assert re.search(r"^scheduled retries: +0$", text, re.M)
    assert re.search(r"^oldest retry: +none scheduled$", text, re.M)
    assert re.search(r"^release: +releaser on time$", text, re.M)


def test_stats_text_names_the_ten_busiest_endpoints_and_sums_the_rest() -> None:
    counts = {f"ep{n:02}": n for n in range(1, 13)}
    found = ScheduleStats(total=sum(counts.values()), by_endpoint=counts)
    rows = schedule_rows(found, now=time.time())
    assert rows[0] == ("scheduled retries", 78)
    assert [name for name, _ in rows[1:11]] == [f"  ep{n:02}" for n in range(12, 2, -1)]
    assert rows[11] == ("  (2 more endpoint(s))", 3)


def test_due_and_lag_read_as_people_say_them() -> None:
    assert describe_due(112.0, now=100.0) == "due in 12s"
    assert describe_due(97.0, now=100.0) == "due 3s ago"
    assert describe_due(100.0 - 7200, now=100.0) == "due 2h ago"
    assert describe_lag(0) == "releaser on time"
    assert describe_lag(2.14) == "releaser behind by 2.1s"
    assert describe_lag(0.042) == "releaser behind by 42ms"
    assert describe_lag(600) == "releaser behind by 10m"


# -- schedule list --------------------------------------------------------------------------


def test_schedule_list_json_gives_every_field_soonest_due_first(park: Parked) -> None:
    park("shop", "later", 90, attempts=3, last_status=None, last_error="connection refused")
    soon = park("shop", "soon", 30, attempts=1)
    park("crm", "middle", 60, attempts=2, last_status=429, last_error="")
    listed = json_out("schedule", "list")
    assert [item["id"] for item in listed] == ["shop/soon", "crm/middle", "shop/later"]
    assert set(listed[0]) == {"id", "endpoint_id", "event_id", "event_type", "payload", "due",
                              "attempts", "first_attempt_at", "last_status", "last_error",
                              "task_id", "enqueued_at", "first_attempt_span"}
    assert listed[0] == {
        "id": "shop/soon", "endpoint_id": "shop", "event_id": "soon",
        "event_type": "order.created", "payload": {"n": 1}, "due": pytest.approx(soon, abs=0.001),
        "attempts": 1, "first_attempt_at": None, "last_status": 503,
        "last_error": "503 from receiver", "task_id": "t-soon", "enqueued_at": None,
        "first_attempt_span": None,
    }
    assert (listed[2]["attempts"], listed[2]["last_status"], listed[2]["last_error"]
            ) == (3, None, "connection refused")
    assert [item["id"] for item in json_out("schedule", "list", "--endpoint", "shop")
            ] == ["shop/soon", "shop/later"]
    assert [item["id"] for item in json_out("schedule", "list", "--limit", "2")
            ] == ["shop/soon", "crm/middle"]


def test_schedule_list_table_has_no_payload_and_says_when_it_is_cut(park: Parked) -> None:
    park("shop", "a", 30, last_error="503 from receiver " + "x" * 100)
    park("shop", "b", 60, last_status=None, last_error="")
    result = succeeds("schedule", "list", "--limit", "1")
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "DUE", "ATTEMPTS", "LAST", "STATUS", "LAST", "ERROR"]
    assert len(rows) == 1 and rows[0].startswith("shop/a ")
    assert re.search(r"\(in (29|30)s\)\s+1\s+503\s+503 from receiver x+\.\.\.$", rows[0])
    assert '"n"' not in result.stdout
    assert "showing the 1 soonest due" in result.stderr
    full = succeeds("schedule", "list").stdout.splitlines()
    assert full[2].split()[0] == "shop/b" and full[2].split()[-2:] == ["-", "-"]


def test_schedule_list_of_nothing_says_so(park: Parked) -> None:
    assert succeeds("schedule", "list").stdout == "no scheduled retries\n"
    park("shop", "a", 30)
    EndpointRegistry().add("crm", "http://127.0.0.1:9/crm")
    assert succeeds("schedule", "list", "--endpoint", "crm").stdout == (
        "no scheduled retries for endpoint crm\n")
    assert json_out("schedule", "list", "--endpoint", "crm") == []


def test_schedule_list_of_an_unknown_endpoint_is_an_error(park: Parked) -> None:
    """Known: an endpoint that exists, or one the schedule still holds a retry of (``shop``
    here has no endpoint, as after a removal that left one behind)."""
    park("shop", "a", 30)
    assert fails("schedule", "list", "--endpoint", "nope").output == "Error: no endpoint 'nope'\n"
    assert [item["id"] for item in json_out("schedule", "list", "--endpoint", "shop")
            ] == ["shop/a"]


# -- releaser -------------------------------------------------------------------------------


def test_releaser_help_says_workers_run_one_and_several_are_safe() -> None:
    text = " ".join(succeeds("releaser", "--help").stdout.split())
    assert "HOOKLINE_RELEASER=off" in text
    assert "Several releasers are safe together" in text


def test_releaser_fails_in_one_line_when_redis_does_not_answer(monkeypatch) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(store, "client", lambda: dead)
    result = fails("releaser")
    assert "(REDIS_URL) does not answer" in result.stderr
    assert "releaser started" not in result.stdout


class StuckReleaser:
    """Ignores ``stop``, like a release loop stuck in a Redis call; signals itself SIGTERM once
    running, when the command's handler is in place."""

    def __init__(self, **_: object) -> None:
        self.stopped = threading.Event()
        self.release = threading.Event()

    def run(self) -> None:
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        self.release.wait(10)

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped.set()


def test_releaser_exits_after_a_signal_even_when_the_loop_does_not_stop(monkeypatch) -> None:
    stuck = StuckReleaser()
    monkeypatch.setattr(hookline.cli.schedule, "Releaser", lambda **_: stuck)
    monkeypatch.setattr(hookline.cli.schedule, "STOP_TIMEOUT", 0.3)
    previous = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    result = succeeds("releaser")
    stuck.release.set()
    assert time.monotonic() - started < 3
    assert stuck.stopped.is_set()
    assert "did not stop within 0.3s" in result.stderr
    assert result.stdout.splitlines()[-1] == "releaser stopped"
    assert signal.getsignal(signal.SIGTERM) is previous


def test_releaser_reports_a_failing_release_loop_in_one_line(monkeypatch) -> None:
    def broken(self: Releaser) -> None:
        raise ConfigError("HOOKLINE_RELEASER_MAX_SLEEP='x' is not a number")

    monkeypatch.setattr(Releaser, "run", broken)
    result = fails("releaser")
    assert result.stderr == "Error: HOOKLINE_RELEASER_MAX_SLEEP='x' is not a number\n"
    assert "releaser stopped" not in result.stdout


def start_releaser(log: Path, redis_url: str) -> subprocess.Popen[bytes]:
    """``hookline releaser`` in its own process, on this test's Redis; waits for its start
    line."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "from hookline.cli import main; main(prog_name='hookline')",
             "releaser"],
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", "REDIS_URL": redis_url,
                           "HOOKLINE_BROKER_URL": redis_url}, stdout=out,
            stderr=subprocess.STDOUT,
        )

    def started() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the releaser exited ({process.returncode}):\n{log.read_text()}")
        return "releaser started" in log.read_text()

    wait_until(started, timeout=20)
    return process


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_releaser_releases_due_retries_and_stops_cleanly_on_a_signal(
        park: Parked, quiet: redis.Redis, tmp_path: Path, sig: int) -> None:
    park("shop", "due-now", 0)
    park("shop", "due-later", 3600)
    url = quiet.connection_pool.connection_kwargs
    process = start_releaser(tmp_path / "releaser.log",
                             f"redis://{url['host']}:{url['port']}/{url['db']}")
    try:
        wait_until(lambda: RetrySchedule().stats().total == 1, timeout=10)
        assert [retry.id for retry in RetrySchedule().scheduled()] == ["shop/due-later"]
        assert park.messages[0] in quiet.lrange(RETRY_QUEUE, 0, -1)
        started = time.monotonic()
        process.send_signal(sig)
        assert process.wait(timeout=5) == 0
        assert time.monotonic() - started < 5
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = (tmp_path / "releaser.log").read_text()
    assert output.splitlines()[0] == (
        "releaser started: releasing due retries onto hookline.retry (2 scheduled); "
        "stop with Ctrl-C or SIGTERM")
    assert output.splitlines()[-1] == "releaser stopped"
    assert "Traceback" not in output
    assert park.messages[1] not in quiet.lrange(RETRY_QUEUE, 0, -1)
