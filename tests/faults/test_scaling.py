"""Scaling out: two worker processes as separate nodes share one endpoint's work, and the
shared gates in Redis still hold for them together (rate limit, one delivery per event).

These workers use a Redis database of their own (11, or 12 when the tests' database is 11):
the session worker, which other test modules may have started, consumes the tests' database,
so only the two nodes started here see these events.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import DUE_KEY
from hookline.transport.records import held_count
from tests.conftest import TEST_ENV, WorkerProcess, emptied, wait_until
from tests.support.windows import busiest_window

EVENTS = 200
RATE = 20  # per second

Requests = Callable[[], list[dict[str, Any]]]


def isolated_url(test_url: str) -> str:
    """The tests' Redis server, another database."""
    kwargs = redis.connection.parse_url(test_url)
    db = 12 if int(kwargs.get("db") or 0) == 11 else 11
    base = test_url.rsplit("/", 1)[0] if re.search(r"/\d+$", test_url) else test_url.rstrip("/")
    return f"{base}/{db}"


@pytest.fixture
def isolated_redis() -> Iterator[tuple[str, redis.Redis]]:
    url = isolated_url(TEST_ENV["REDIS_URL"])
    client = emptied(url)
    yield url, client
    emptied(url).close()


@pytest.fixture
def nodes(isolated_redis, start_worker) -> tuple[WorkerProcess, WorkerProcess]:
    """Two workers as separate nodes on the isolated database (stopped after the test, before
    the database is flushed)."""
    url, _ = isolated_redis
    return (start_worker("node-a", concurrency=8, extra_env={"REDIS_URL": url}),
            start_worker("node-b", concurrency=8, extra_env={"REDIS_URL": url}))


@pytest.fixture
def producer(isolated_redis) -> Iterator[Celery]:
    """A Celery app with Hookline's settings publishing to the isolated database."""
    url, _ = isolated_redis
    app = Celery("scaling-producer", set_as_current=False)
    app.config_from_object("hookline.celeryconfig")
    # Hookline pins the read and write URLs too (a host's CELERY_BROKER_URL must not move it).
    app.conf.update(broker_url=url, broker_read_url=url, broker_write_url=url)
    yield app
    app.close()


def outcomes(node: WorkerProcess) -> Counter[str]:
    """The node's delivery outcomes, from its log: succeeded, duplicate, deferred..."""
    return Counter(re.findall(r"\bdelivery\.(\w+) endpoint_id=scaled\b", node.output()))


def test_two_nodes_share_the_work_and_the_gates_hold(isolated_redis, nodes, producer,
                                                     receiver_process):
    _, client = isolated_redis
    base_url, requests = receiver_process
    endpoint = EndpointRegistry(client).add("scaled", f"{base_url}/ok", rate=f"{RATE}/s")
    event_ids = [f"scale-{n}-{uuid.uuid4().hex[:8]}" for n in range(EVENTS)]
    for n, event_id in enumerate(event_ids):
        for _copy in range(2):  # every event enqueued twice, as by a client that retried
            producer.send_task("hookline.deliver", args=["scaled", "order.created", {"n": n}],
                               kwargs={"event_id": event_id}, task_id=event_id)

    def settled() -> bool:
        """Every event delivered and no copy left anywhere: queues, unacknowledged messages,
        the retry schedule (a deferred copy is parked under its event id, so a second copy
        deferred meanwhile joins the first one's scheduled retry)."""
        succeeded = sum(outcomes(node)["succeeded"] for node in nodes)
        left = (client.llen("hookline") + client.llen("hookline.retry") + held_count(client)
                + client.zcard(DUE_KEY))
        return succeeded >= EVENTS and left == 0

    wait_until(settled, timeout=60, interval=0.2)
    time.sleep(0.5)
    assert settled()  # still: no copy was in transit between two looks
    received = requests()

    # Idempotency: each event arrived once, although two copies of it went round two nodes.
    assert Counter(r["webhook_id"] for r in received) == Counter(event_ids)
    # Both nodes consumed: each sent a good share of the events.
    per_node = {node.name: outcomes(node) for node in nodes}
    assert sum(n["succeeded"] for n in per_node.values()) == EVENTS, per_node
    for name, counts in per_node.items():
        assert counts["succeeded"] >= EVENTS // 10, f"{name} sent too little: {per_node}"
    # The rate limit held for the two nodes together.
    times = [r["at"] for r in received]
    assert busiest_window(times) <= RATE + endpoint.effective_burst()
    assert max(times) - min(times) >= (EVENTS - 1) / RATE - 0.1

    # Copies enqueued after the delivery meet the done marker: nothing more is sent.
    duplicates_before = sum(outcomes(node)["duplicate"] for node in nodes)
    for n, event_id in enumerate(event_ids):
        producer.send_task("hookline.deliver", args=["scaled", "order.created", {"n": n}],
                           kwargs={"event_id": event_id}, task_id=event_id)
    wait_until(lambda: sum(outcomes(node)["duplicate"] for node in nodes)
               >= duplicates_before + EVENTS, timeout=30, interval=0.2)
    assert len(requests()) == EVENTS
