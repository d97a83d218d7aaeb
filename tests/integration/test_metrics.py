"""Prometheus metrics: a real worker's /metrics after a real run (its own counters only, on
loopback), the prefork pool through PROMETHEUS_MULTIPROC_DIR, series bounded under made-up and
removed endpoints and past the cap, the Redis gauges, and ``hookline metrics`` serving them.

Each worker here has a Redis database of its own (7), so that only it consumes this module's
events and its counters hold nothing else.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from examples.receiver import Reply, always, fail_first
from hookline.core.metrics import status_class
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.delivery import delivered
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import DUE_KEY, RetrySchedule
from hookline.transport.gauges import RedisStateCollector
from tests.conftest import ROOT, emptied, free_port, isolated_url, wait_until

ISOLATED_URL = isolated_url(7)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def isolated() -> Iterator[redis.Redis]:
    """Database 7, emptied: no worker but this module's uses it."""
    client = emptied(ISOLATED_URL)
    yield client
    client.close()


@pytest.fixture
def broker() -> Iterator[Celery]:
    celery = Celery(broker=ISOLATED_URL)
    yield celery
    celery.close()


def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def listens(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, port)) == 0


def by_endpoint(samples: Samples) -> dict[str, list[str]]:
    """Endpoint label value -> the names of its samples."""
    found: dict[str, list[str]] = {}
    for name, labels in samples:
        endpoint = dict(labels).get("endpoint")
        if endpoint is not None:
            found.setdefault(endpoint, []).append(name)
    return found


def send(broker: Celery, endpoint_id: str, event_id: str) -> None:
    broker.send_task("hookline.deliver", args=[endpoint_id, "order.created", {"n": 1}],
                     kwargs={"event_id": event_id}, queue="hookline")


def test_status_classes():
    assert [status_class(s) for s in (200, 204, 301, 404, 429, 503, None, 99)] == [
        "2xx", "2xx", "3xx", "4xx", "4xx", "5xx", "none", "none"]


def test_worker_serves_counts_of_a_real_run(receiver, start_worker, isolated, broker):
    port = free_port()
    worker = start_worker("metrics", extra_env={"HOOKLINE_METRICS_PORT": str(port),
                                                "REDIS_URL": ISOLATED_URL})
    registry = EndpointRegistry(isolated)
    registry.add("m-ok", receiver.route("/m-ok", always(Reply(204))))
    registry.add("m-flaky", receiver.route("/m-flaky", fail_first(1, Reply(503))))
    registry.add("m-bad", receiver.route("/m-bad", always(Reply(400))))
    registry.add("m-rated", receiver.route("/m-rated", always(Reply(204))), rate="2/s",
                 burst=1)
    for event_id in ("ok-1", "ok-2"):
        send(broker, "m-ok", event_id)
    send(broker, "m-flaky", "flaky-1")
    send(broker, "m-bad", "bad-1")
    for n in range(3):
        send(broker, "m-rated", f"rated-{n}")
    done = [("m-ok", "ok-1"), ("m-ok", "ok-2"), ("m-flaky", "flaky-1"),
            *(("m-rated", f"rated-{n}") for n in range(3))]
    wait_until(lambda: all(delivered(isolated, done)), 30)
    send(broker, "m-ok", "ok-1")  # already delivered: a duplicate
    wait_until(lambda: value(scrape(port), "hookline_duplicates_total", endpoint="m-ok") == 1)
    assert "metrics.serving" in worker.output()

    samples = scrape(port)
    # Final outcomes only: their sum is the number of events finished (6 delivered, 1 dead).
    deliveries = {(dict(labels)["endpoint"], dict(labels)["outcome"], dict(labels)["reason"]):
                  count for (name, labels), count in samples.items()
                  if name == "hookline_deliveries_total"}
    assert deliveries == {
        ("m-ok", "delivered", ""): 2, ("m-flaky", "delivered", ""): 1,
        ("m-bad", "dead_lettered", "rejected"): 1, ("m-rated", "delivered", ""): 3,
    }
    assert value(samples, "hookline_retries_scheduled_total", endpoint="m-flaky") == 1
    assert value(samples, "hookline_retries_scheduled_total", endpoint="m-ok") == 0
    assert value(samples, "hookline_duplicates_total", endpoint="m-ok") == 1
    responses = {(dict(labels)["endpoint"], dict(labels)["status_class"]): count
                 for (name, labels), count in samples.items()
                 if name == "hookline_responses_total"}
    assert responses == {("m-ok", "2xx"): 2, ("m-flaky", "5xx"): 1, ("m-flaky", "2xx"): 1,
                         ("m-bad", "4xx"): 1, ("m-rated", "2xx"): 3}
    # Histograms have no endpoint label; the time per endpoint is a counter.
    assert value(samples, "hookline_attempt_duration_seconds_count") == 8
    assert value(samples, "hookline_attempt_duration_seconds_bucket", le="+Inf") == 8
    assert 0 < value(samples, "hookline_endpoint_attempt_seconds_total", endpoint="m-ok") < 2
    # Lag: publish to the successful attempt, for the 6 events delivered; m-flaky's includes
    # its backoff (0.2 s, jitter 0.2).
    assert value(samples, "hookline_delivery_lag_seconds_count") == 6
    assert value(samples, "hookline_delivery_lag_seconds_sum") >= 0.15
    assert value(samples, "hookline_deferrals_total", endpoint="m-rated",
                 reason="rate_limited") >= 2
    assert value(samples, "hookline_deferrals_total", endpoint="m-ok",
                 reason="rate_limited") == 0
    names = {name for name, _ in samples}
    # The Redis gauges are the exporter's (hookline metrics), not every worker's.
    assert not names & {"hookline_redis_up", "hookline_dead_letters", "hookline_queue_depth",
                        "hookline_breaker_state"}
    assert not [name for name in names if name.startswith("hookline_")
                and name.endswith("_created")]
    # Series per endpoint (docs/operations/metrics.md, "Series budget"): one per counter and
    # label set moved.
    assert {endpoint: len(series) for endpoint, series in by_endpoint(samples).items()} == {
        "m-ok": 4,  # delivered, duplicate, responses 2xx, attempt seconds
        "m-flaky": 5,  # delivered, retry, responses 5xx and 2xx, attempt seconds
        "m-bad": 3,  # dead_lettered rejected, responses 4xx, attempt seconds
        "m-rated": 4,  # delivered, responses 2xx, attempt seconds, deferrals rate_limited
    }
    # On loopback only (HOOKLINE_METRICS_ADDRESS defaults to 127.0.0.1): 127.0.0.2 is this
    # host too, but not the address the server is bound to.
    assert listens("127.0.0.1", port) and not listens("127.0.0.2", port)


def test_series_stay_bounded_under_made_up_removed_and_too_many_endpoints(
        receiver, start_worker, isolated, broker):
    port = free_port()
    start_worker("metrics-bounded", extra_env={"HOOKLINE_METRICS_PORT": str(port),
                                               "REDIS_URL": ISOLATED_URL,
                                               "HOOKLINE_METRICS_MAX_ENDPOINTS": "2"})
    # 20 deliveries to endpoint ids nobody registered: one label value between them.
    for n in range(20):
        send(broker, f"made-up-{n}", f"made-up-event-{n}")
    wait_until(lambda: value(scrape(port), "hookline_deliveries_total", endpoint="_unknown",
                             outcome="dead_lettered", reason="endpoint_removed") == 20)
    registry = EndpointRegistry(isolated)
    for endpoint_id in ("b-1", "b-2", "b-3"):
        registry.add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))))
    for endpoint_id in ("b-1", "b-2", "b-3"):  # one at a time: b-3 is the one past the cap
        send(broker, endpoint_id, f"{endpoint_id}-event")
        wait_until(lambda endpoint_id=endpoint_id: delivered(
            isolated, [(endpoint_id, f"{endpoint_id}-event")])[0])
    wait_until(lambda: value(scrape(port), "hookline_deliveries_total", endpoint="_other",
                             outcome="delivered", reason="") == 1)
    samples = scrape(port)
    assert set(by_endpoint(samples)) == {"_unknown", "b-1", "b-2", "_other"}
    assert value(samples, "hookline_deliveries_total", endpoint="b-1", outcome="delivered",
                 reason="") == 1
    assert value(samples, "hookline_responses_total", endpoint="_other",
                 status_class="2xx") == 1

    # A removed endpoint's series go at the next scrape, and its events count as unknown.
    registry.remove("b-1")
    samples = scrape(port)
    assert set(by_endpoint(samples)) == {"_unknown", "b-2", "_other"}
    send(broker, "b-1", "b-1-after")
    wait_until(lambda: value(scrape(port), "hookline_deliveries_total", endpoint="_unknown",
                             outcome="dead_lettered", reason="endpoint_removed") == 21)
    assert "b-1" not in by_endpoint(scrape(port))
    # Series budget: per endpoint, at most what docs/operations/metrics.md says (here: 3 each).
    assert all(len(series) <= 3 for series in by_endpoint(scrape(port)).values())


def test_prefork_pool_processes_are_added_up_through_the_multiprocess_dir(
        receiver, start_worker, isolated, broker, tmp_path):
    port = free_port()
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"")  # an earlier run's file: removed
    # Celery reads "-P prefork" as "the default pool" and takes the configured one instead.
    worker = start_worker("metrics-prefork", pool="prefork", concurrency=3, extra_env={
        "CELERY_WORKER_POOL": "prefork", "HOOKLINE_METRICS_PORT": str(port),
        "REDIS_URL": ISOLATED_URL, "PROMETHEUS_MULTIPROC_DIR": str(directory)})
    EndpointRegistry(isolated).add("m-pre", receiver.route("/m-pre", always(Reply(204,
                                                                                  delay=0.2))))
    for n in range(9):
        send(broker, "m-pre", f"pre-{n}")
    wait_until(lambda: all(delivered(isolated, [("m-pre", f"pre-{n}") for n in range(9)])),
               30)
    wait_until(lambda: value(scrape(port), "hookline_deliveries_total", endpoint="m-pre",
                             outcome="delivered", reason="") == 9)
    samples = scrape(port)
    assert value(samples, "hookline_attempt_duration_seconds_count") == 9
    assert value(samples, "hookline_responses_total", endpoint="m-pre", status_class="2xx") == 9
    writers = {path.name for path in directory.glob("*.db")}
    assert "counter_999999.db" not in writers
    assert len([name for name in writers if name.startswith("counter_")]) >= 2  # children
    assert "(prefork)" in worker.output()
    assert "metrics.incomplete" not in worker.output()


def test_redis_gauges_read_queues_schedule_dead_letters_and_breakers(isolated):
    registry = EndpointRegistry(isolated)
    for endpoint_id in ("g-closed", "g-half", "g-open"):
        registry.add(endpoint_id, "http://127.0.0.1:9/hook")
    now_ms = int(time.time() * 1000)
    isolated.hset(keys.breaker_key("g-half"), mapping={"state": "half_open"})
    isolated.hset(keys.breaker_key("g-open"), mapping={"state": "open",
                                                        "blocked_until": now_ms + 30_000})
    isolated.rpush("hookline", "message-1", "message-2")
    isolated.rpush("hookline.retry", "message-3")
    schedule = RetrySchedule(isolated)
    schedule.park(endpoint_id="g-open", event_id="e1", countdown=0, message="{}")
    isolated.zadd(DUE_KEY, {"g-open/e1": now_ms - 5000})  # due 5 s ago, not released yet
    schedule.park(endpoint_id="g-open", event_id="e2", countdown=600, message="{}")
    schedule.park(endpoint_id="g-half", event_id="e3", countdown=600, message="{}")
    DeadLetterQueue(isolated).add(DeadLetter(endpoint_id="g-open", event_id="e0",
                                             event_type="t", payload={}, reason="rejected"))

    families = {family.name: family for family in
                RedisStateCollector(isolated, isolated).collect()}

    def gauge(name: str, **labels: str) -> float:
        [found] = [s.value for s in families[name].samples if s.labels == labels]
        return found

    assert gauge("hookline_redis_up") == 1
    assert gauge("hookline_queue_depth", queue="hookline") == 2
    assert gauge("hookline_queue_depth", queue="hookline.retry") == 1
    assert gauge("hookline_scheduled_retries") == 3
    assert gauge("hookline_scheduled_retries_by_endpoint", endpoint="g-open") == 2
    assert gauge("hookline_scheduled_retries_by_endpoint", endpoint="g-half") == 1
    assert 4 <= gauge("hookline_scheduled_retry_lag_seconds") < 15
    assert abs(gauge("hookline_oldest_scheduled_retry_due_timestamp_seconds")
               - (time.time() - 5)) < 10
    assert gauge("hookline_dead_letters") == 1
    assert [gauge("hookline_breaker_state", endpoint=e)
            for e in ("g-closed", "g-half", "g-open")] == [0, 1, 2]
    assert 20 < gauge("hookline_endpoint_blocked_seconds", endpoint="g-open") <= 30
    assert gauge("hookline_endpoint_blocked_seconds", endpoint="g-closed") == 0


def test_redis_gauges_say_so_when_redis_does_not_answer():
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    families = list(RedisStateCollector(unreachable, unreachable).collect())
    assert [(f.name, [s.value for s in f.samples]) for f in families] == [
        ("hookline_redis_up", [0])]


def test_hookline_metrics_serves_the_redis_gauges_alone(isolated):
    EndpointRegistry(isolated).add("cli-ep", "http://127.0.0.1:9/hook")
    port = free_port()
    env: dict[str, Any] = {**os.environ, "REDIS_URL": ISOLATED_URL}
    process = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "hookline"), "metrics", "--port",
         str(port), "--address", "127.0.0.2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        samples = wait_until(lambda: _try_scrape(port, "127.0.0.2"), timeout=15)
        assert not listens("127.0.0.1", port)  # only on the address it was given
        names = {name for name, _ in samples}
        assert value(samples, "hookline_breaker_state", endpoint="cli-ep") == 0
        assert "hookline_dead_letters" in names and "hookline_queue_depth" in names
        assert not any(name.startswith(("hookline_deliveries", "python_", "process_"))
                       for name in names)
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert "metrics server stopped" in out
    assert "http://127.0.0.2:" in out


def test_hookline_metrics_refuses_an_address_that_is_not_one():
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "hookline"), "metrics", "--address",
         "everywhere"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "--address" in result.stderr and "must be an IP address" in result.stderr


def _try_scrape(port: int, host: str = "127.0.0.1") -> Samples | None:
    try:
        return scrape(port, host)
    except OSError:
        return None
