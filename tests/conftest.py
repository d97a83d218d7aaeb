"""Shared fixtures: a real Redis (its own database), real Celery worker processes, a real HTTP
receiver on loopback.

The environment below is set before ``app`` is imported, so the test process and the workers it
starts share one configuration: short backoffs so retries happen within a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent

TEST_ENV = {
    "REDIS_URL": os.environ.get("HOOKLINE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
    "HOOKLINE_INITIAL_BACKOFF": "0.2",
    "HOOKLINE_BACKOFF_MULTIPLIER": "2",
    "HOOKLINE_MAX_BACKOFF": "1.5",
    "HOOKLINE_JITTER": "0.2",
    "HOOKLINE_MAX_ATTEMPTS": "4",
    "HOOKLINE_MAX_AGE": "60",
    "HOOKLINE_RETRY_AFTER_CAP": "3",
    "HOOKLINE_CONNECT_TIMEOUT": "1",
    "HOOKLINE_READ_TIMEOUT": "1",
    # The receivers live on loopback, which the SSRF guard refuses unless allowed.
    "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
    "HOOKLINE_BREAKER_THRESHOLD": "5",
    "HOOKLINE_BREAKER_COOLDOWN": "1.5",
    "HOOKLINE_BREAKER_MAX_COOLDOWN": "4",
}
os.environ.update(TEST_ENV)
os.environ.pop("HOOKLINE_BROKER_URL", None)
os.environ.pop("HOOKLINE_REDIS_URL", None)
# Celery lets CELERY_BROKER_URL override every app's broker: a developer's own must not leak in.
os.environ.pop("CELERY_BROKER_URL", None)
os.environ["HOOKLINE_DLQ_SPOOL"] = str(ROOT / ".pytest-dlq-spool.jsonl")

from celery.signals import after_task_publish  # noqa: E402

# Hookline's Celery settings module is read once, at its import, as in a worker. Imported here,
# under the suite's own settings: imported first inside a test that switches Hookline to another
# database (quiet_redis), it kept that database for the rest of the session, and the task-event
# and Flower tests then listened there for a worker that publishes to the session's.
import hookline.celeryconfig  # noqa: E402,F401
from examples.receiver import Receiver  # noqa: E402
from hookline.core.messages import DELIVERY_QUEUE  # noqa: E402
from hookline.store import connection as store  # noqa: E402
from tests.support.servers import free_port, stop_process  # noqa: E402  (tests import them from here)


def _hookline_keys_deleted() -> None:
    client = store.client()
    keys = list(client.scan_iter("hookline:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


#: Set in every Redis database the suite uses: the suite empties only databases that are empty
#: or carry this key (its own, from this run or an earlier one), never someone else's data.
OWNER_KEY = "hookline-test-suite:owned"


def claim(client: redis.Redis, url: str) -> redis.Redis:
    """Make sure the database behind ``client`` is the suite's (empty, or marked by an earlier
    run) and mark it; stop the run, saying why, if it holds data of someone else's."""
    if client.dbsize() and not client.exists(OWNER_KEY):
        pytest.exit(f"the Redis database {url} holds data the test suite did not write; the "
                    "suite empties the databases it uses, so it leaves this one alone. Point "
                    "the tests at a Redis of their own with HOOKLINE_TEST_REDIS_URL "
                    "(databases 3-14 and the URL's own are used)", returncode=3)
    client.set(OWNER_KEY, "tests/conftest.py")
    return client


def emptied(url: str) -> redis.Redis:
    """A client on ``url`` (str replies), its database claimed by the suite and emptied."""
    client = claim(redis.Redis.from_url(url, decode_responses=True), url)
    client.flushdb()
    client.set(OWNER_KEY, "tests/conftest.py")
    return client


@pytest.fixture(scope="session")
def redis_client():
    client = store.client()
    try:
        client.ping()
    except Exception as exc:  # pragma: no cover - environment problem, said plainly
        pytest.exit(f"Redis at {TEST_ENV['REDIS_URL']} does not answer ({exc}); "
                    "run the tests with 'make test', which starts one", returncode=3)
    claim(client, TEST_ENV["REDIS_URL"])
    return client


@pytest.fixture(autouse=True)
def clean_redis(request, redis_client) -> Iterator[None]:
    """Each test starts with no Hookline state (endpoints, markers, dead letters). Broker keys
    stay: deleting kombu's bindings under a running worker would lose messages."""
    _hookline_keys_deleted()
    yield


def isolated_url(db: int) -> str:
    """The test Redis's URL with database ``db`` (one no other test shares)."""
    return TEST_ENV["REDIS_URL"].rsplit("/", 1)[0] + f"/{db}"


def flushed(url: str) -> Iterator[redis.Redis]:
    """For a fixture: a client on ``url`` (str replies), its database (the suite's own, see
    :func:`claim`) emptied before and after the test."""
    client = emptied(url)
    yield client
    emptied(url).close()
    client.close()


@pytest.fixture
def quiet_redis() -> Iterator[redis.Redis]:
    """Hookline's Redis switched, for one test, to a database no worker of the session uses
    (3): nothing parked there is released or delivered behind the test's back."""
    from hookline.core import config

    url = isolated_url(3)
    client = emptied(url)
    config.configure({"REDIS_URL": url, "HOOKLINE_BROKER_URL": url})
    yield client
    config.configure()
    emptied(url).close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


class WorkerProcess:
    """``celery -A app worker`` in a subprocess, as in production."""

    def __init__(self, name: str, *, concurrency: int = 8, pool: str = "threads",
                 extra_env: dict[str, str] | None = None, loglevel: str = "info",
                 wrapper: tuple[str, ...] = ()) -> None:
        self.name = name
        self.log_path = ROOT / f".pytest-worker-{name}.log"
        env = {**os.environ, **TEST_ENV, **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            # wrapper: a command the worker runs under (opentelemetry-instrument, ...).
            [*wrapper, sys.executable, "-m", "celery", "-A", "app", "worker", "-l", loglevel,
             "-P", pool, "-c", str(concurrency), "-n", f"{name}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 30.0) -> WorkerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited:\n{self.log_path.read_text()}")
            if " ready." in self.log_path.read_text():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"worker {self.name} not ready in {timeout}s:\n"
                           f"{self.log_path.read_text()}")

    def output(self) -> str:
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        stop_process(self.process, sig, timeout)
        self.log.close()



def purge_queues() -> None:
    """Drop messages left in Hookline's queues by an earlier run."""
    client = store.client()
    client.delete("hookline", "hookline.retry")


@pytest.fixture(scope="session")
def worker(redis_client) -> Iterator[WorkerProcess]:
    """One worker for the whole session (threads pool, 8 slots)."""
    purge_queues()
    process = WorkerProcess("session").wait_ready()
    yield process
    process.stop()


@pytest.fixture
def start_worker(redis_client) -> Iterator:
    """Start extra workers for one test; they are stopped after it."""
    started: list[WorkerProcess] = []

    def start(name: str, **options) -> WorkerProcess:
        process = WorkerProcess(name, **options)
        started.append(process)
        return process.wait_ready()

    yield start
    for process in started:
        process.stop(signal.SIGKILL)


class Publications:
    """Task messages this test published to the broker, seen by Celery's ``after_task_publish``
    (sent after kombu wrote the message to Redis). Read from the signal rather than the list:
    a worker sharing the test Redis may take a message off the list at once."""

    def __init__(self) -> None:
        self.task_ids: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def record(self, body: Any = None, routing_key: str = "", headers: Any = None,
               **_: Any) -> None:
        args, kwargs, _embed = body
        self.task_ids.append(headers["id"])
        # A delivery: (endpoint id, ...), event_id=...; a fan-out: (app id, event id).
        self.events.append((routing_key, args[0], kwargs.get("event_id") or args[1]))

    def remove_from_broker(self, client: Any) -> None:
        """Take this test's messages off the list, so that no later worker delivers them;
        for those a running worker took already, wait (briefly) for their outcome and drop a
        scheduled retry, so nothing this test started lands in the next test's Redis."""
        taken = set(self.task_ids)
        for message in client.lrange(DELIVERY_QUEUE, 0, -1):
            task_id = json.loads(message)["headers"]["id"]
            if task_id in taken:
                client.lrem(DELIVERY_QUEUE, 0, message)
                taken.discard(task_id)
        if not taken:
            return
        from hookline.store.dead_letter_queue import DeadLetterQueue
        from hookline.store.gates import Gate
        from hookline.store.schedule import RetrySchedule

        queue, gate, schedule = DeadLetterQueue(), Gate(), RetrySchedule()
        ids = [(endpoint_id, event_id) for (_, endpoint_id, event_id), task_id
               in zip(self.events, self.task_ids, strict=True) if task_id in taken]
        deadline = time.monotonic() + 5
        for endpoint_id, event_id in ids:
            key = f"{endpoint_id}/{event_id}"
            while time.monotonic() < deadline and not (
                    queue.get(key) or gate.is_delivered(endpoint_id, event_id)
                    or client.zscore("hookline:{schedule}:due", key) is not None):
                time.sleep(0.05)
            schedule.unpark([key])


@pytest.fixture
def published(redis_client: Any) -> Iterator[Publications]:
    publications = Publications()
    after_task_publish.connect(publications.record, weak=False)
    yield publications
    after_task_publish.disconnect(publications.record)
    # The broker the messages went to: the test's own database when it switched to one
    # (quiet_redis), else the session's.
    publications.remove_from_broker(store.client())


@pytest.fixture
def receiver_process(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """The receiver in a process of its own, so the test's own work (enqueueing hundreds of
    events) does not delay the requests it timestamps. It records one JSON line per request;
    yields its base URL and a function reading the requests so far."""
    record = tmp_path / "requests.jsonl"
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "examples.receiver", "--port", str(port),
                                "--record", str(record)], cwd=ROOT, stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline()  # listening
    record.touch()

    def requests() -> list[dict[str, Any]]:
        return [json.loads(line) for line in record.read_text().splitlines() if line]

    yield f"http://127.0.0.1:{port}", requests
    process.terminate()
    process.wait(10)


class PrivateRedis:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> redis.Redis:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url, decode_responses=True)
        wait_until(lambda: _answers(client), timeout=10)
        return client

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def shutdown(self) -> None:
        redis.Redis(port=self.port).shutdown(nosave=False)
        assert self.process is not None
        self.process.wait(10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False



def wait_until(condition, timeout: float = 20.0, interval: float = 0.05, what=None):
    """Poll ``condition`` until it returns something truthy; fail the test on timeout (saying
    ``what()`` if given: the state that was not reached)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f": {what()}" if what is not None else ""
            pytest.fail(f"condition not met within {timeout}s{detail}")
        time.sleep(interval)


# -- the fast tier stays worker-free --------------------------------------------------------------

#: Tiers run by ``make test-fast``: no worker processes there.
WORKER_FREE_TIERS = ("unit", "store")
#: Fixtures that start Celery worker processes.
WORKER_FIXTURES = frozenset({"worker", "start_worker"})


def pytest_collection_modifyitems(config, items) -> None:
    """Refuse to run at all when a test under tests/unit or tests/store requests a worker
    fixture, directly or through another fixture: move it to tests/integration instead."""
    tiers = [ROOT / "tests" / tier for tier in WORKER_FREE_TIERS]
    offenders = [
        f"{item.nodeid} (uses {', '.join(sorted(WORKER_FIXTURES & set(item.fixturenames)))})"
        for item in items
        if WORKER_FIXTURES & set(item.fixturenames)
        and any(Path(item.path).is_relative_to(tier) for tier in tiers)
    ]
    if offenders:
        raise pytest.UsageError(
            "tests in the worker-free tiers (tests/unit, tests/store) request a worker "
            "fixture; move them to tests/integration or tests/faults:\n  "
            + "\n  ".join(offenders)
        )
