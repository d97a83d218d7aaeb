"""The shipped dashboard and alert rules against a real Prometheus (Debian's ``prometheus``,
started here on a free loopback port): it scrapes a real worker that delivers, retries, fails,
opens a breaker, dead-letters and meets a 410 Gone, and the ``hookline metrics`` exporter
beside it (the outbox on, on SQLite, with rows left waiting). Checked through Prometheus's HTTP
API: the rules load and evaluate, every query of deploy/grafana/hookline.json evaluates and
returns data, and alerts go pending and firing from that data: an endpoint disabled, the
outbox behind, and no live worker once the worker stops.

Everything runs on a Redis of its own; skips, saying why, where Prometheus is not installed
(``make test`` runs scripts/ensure-prometheus.sh first)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy.orm import Session

from examples.receiver import Reply, always, fail_first
from hookline.contrib.sqlalchemy import add_webhook
from hookline.store import keys
from hookline.store.delivery import delivered
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import ROOT, PrivateRedis, free_port, stop_process, wait_until
from tests.support.prometheus import (
    ALERT_RULES,
    PrometheusServer,
    dashboard_queries,
    prometheus_unavailable,
)
from tests.support.sql import database

pytestmark = pytest.mark.integration

#: Seconds an outbox row has waited: past HooklineOutboxBehind's 300.
OUTBOX_AGE = 900


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    reason = prometheus_unavailable()
    if reason:
        pytest.skip(reason)
    (tmp_path / "redis").mkdir()
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def exporter(tmp_path: Path, private_redis: PrivateRedis) -> Iterator[int]:
    """``hookline metrics`` on the private Redis, the outbox on with rows long due."""
    port = free_port()
    with database("sqlite", tmp_path) as db:
        with Session(db.engine) as session, session.begin():
            for n in range(3):
                add_webhook(session, "shop", "order.created", {"n": n}, f"outbox-{n}")
        with db.engine.begin() as connection:
            connection.exec_driver_sql(
                f"UPDATE hookline_outbox SET due_at = due_at - {OUTBOX_AGE}")
        env = {**os.environ, "REDIS_URL": private_redis.url, "HOOKLINE_OUTBOX": "on",
               "HOOKLINE_OUTBOX_URL": db.url}
        process = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "hookline"), "metrics", "--port",
             str(port), "--address", "127.0.0.1"], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield port
        stop_process(process)


def send(broker: Celery, endpoint_id: str, event_id: str) -> None:
    broker.send_task("hookline.deliver", args=[endpoint_id, "order.created", {"n": 1}],
                     kwargs={"event_id": event_id}, queue="hookline")


def _alerts(prometheus: PrometheusServer, name: str) -> dict[str, str]:
    """The alerts named ``name``: each one's endpoint label (or "") -> its state."""
    return {alert["labels"].get("endpoint", ""): alert["state"]
            for alert in prometheus.api("alerts")["alerts"]
            if alert["labels"]["alertname"] == name}


def _rules_not_ok(prometheus: PrometheusServer) -> list[str]:
    rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
    return [f"{rule['name']}: {rule['health']} {rule.get('lastError', '')}"
            for rule in rules if rule["health"] != "ok"] if rules else ["no rule loaded"]


def _empty_queries(prometheus: PrometheusServer) -> list[str]:
    """The dashboard's queries that return nothing yet (an error raises at once)."""
    return [f"{query.where}: {query.runnable}" for query in dashboard_queries()
            if not prometheus.query(query.runnable)]


def test_a_real_prometheus_loads_the_rules_answers_every_query_and_raises_alerts(
        tmp_path: Path, receiver: Any, start_worker: Any, private_redis: PrivateRedis,
        exporter: int) -> None:
    worker_port = free_port()
    worker = start_worker("prometheus", extra_env={
        "REDIS_URL": private_redis.url, "HOOKLINE_METRICS_PORT": str(worker_port)})
    state = redis.Redis.from_url(private_redis.url, decode_responses=True)
    registry = EndpointRegistry(state)
    registry.add("p-ok", receiver.route("/p-ok", always(Reply(204))))
    registry.add("p-flaky", receiver.route("/p-flaky", fail_first(1, Reply(503))))
    registry.add("p-bad", receiver.route("/p-bad", always(Reply(400))))
    registry.add("p-gone", receiver.route("/p-gone", always(Reply(410))))
    registry.add("p-down", receiver.route("/p-down", always(Reply(503))))
    registry.add("p-rated", receiver.route("/p-rated", always(Reply(204))), rate="2/s",
                 burst=1)
    registry.add("p-ordered", receiver.route("/p-ordered", always(Reply(204))), ordered=True)
    registry.add("p-paused", receiver.route("/p-paused", always(Reply(204))))
    registry.pause("p-paused")

    data = tmp_path / "prometheus"
    data.mkdir()
    prometheus = PrometheusServer(
        data, free_port(), {"hookline-workers": [f"127.0.0.1:{worker_port}"],
                            "hookline-exporter": [f"127.0.0.1:{exporter}"]},
        rule_files=[ALERT_RULES]).start()
    broker = Celery(broker=private_redis.url)
    try:
        for event_id in ("ok-1", "ok-2"):
            send(broker, "p-ok", event_id)
        send(broker, "p-flaky", "flaky-1")
        send(broker, "p-bad", "bad-1")
        send(broker, "p-gone", "gone-1")
        send(broker, "p-paused", "paused-1")
        for n in range(3):
            send(broker, "p-rated", f"rated-{n}")
            send(broker, "p-down", f"down-{n}")
        wait_until(lambda: all(delivered(state, [("p-ok", "ok-1"), ("p-flaky", "flaky-1")])),
                   30)
        send(broker, "p-ok", "ok-1")  # delivered already: a duplicate
        # The 410 disabled p-gone: its next event is dead-lettered at once.
        wait_until(lambda: not registry.require("p-gone").enabled, 30)
        send(broker, "p-gone", "gone-2")
        # Five failures in a row opened p-down's breaker: its next events are held back.
        wait_until(lambda: state.hget(keys.breaker_key("p-down"), "state") == "open", 30)
        for n in range(3, 5):
            send(broker, "p-down", f"down-{n}")

        assert wait_until(lambda: not _rules_not_ok(prometheus), 30,
                          what=lambda: _rules_not_ok(prometheus))
        wait_until(lambda: not _empty_queries(prometheus), 60,
                   what=lambda: "dashboard queries with no data:\n  "
                                + "\n  ".join(_empty_queries(prometheus)))

        # From the worker's counters: the 410 (endpoint_gone) and the event after it.
        wait_until(lambda: _alerts(prometheus, "HooklineEndpointDisabled").get("p-gone")
                   == "firing", 30, what=lambda: prometheus.api("alerts"))
        assert "p-ok" not in _alerts(prometheus, "HooklineEndpointDisabled")
        # From the exporter's outbox gauge: pending (its `for` is five minutes).
        wait_until(lambda: _alerts(prometheus, "HooklineOutboxBehind").get("") == "pending",
                   30, what=lambda: prometheus.api("alerts"))
        assert _alerts(prometheus, "HooklineNoLiveWorker") == {}

        # The worker stops (and leaves the registry): no live worker, pending.
        worker.stop(signal.SIGTERM)
        wait_until(lambda: _alerts(prometheus, "HooklineNoLiveWorker").get("") == "pending",
                   30, what=lambda: prometheus.api("alerts"))
        assert _alerts(prometheus, "HooklineRedisUnreachable") == {}
    finally:
        prometheus.stop()
        broker.close()
        state.close()
    assert "Evaluating rule failed" not in prometheus.log()
