"""A worker killed with SIGKILL in the middle of fanning 500 published events out to 20
endpoints loses no (event, endpoint) delivery, and sends a second copy only of deliveries that
were in flight, under the same webhook-id (the fan-out resumes from its recorded cursor; a
batch enqueued twice is absorbed by each endpoint's idempotency gate).

Own Redis database and workers, visibility timeout 20 s, so the killed worker's unacknowledged
fan-out tasks come back within the test."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from examples.receiver import Reply, always
from hookline import publish
from hookline.core import config
from hookline.store import delivery
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from hookline.store.fanouts import FanoutLog
from tests.conftest import emptied, isolated_url, wait_until

URL = isolated_url(13)
ENV = {"REDIS_URL": URL, "CELERY_VISIBILITY_TIMEOUT": "20"}
EVENTS, ENDPOINTS = 500, 20


@pytest.fixture
def isolated():
    """The test process publishes to the isolated database too."""
    client = emptied(URL)
    config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL})
    yield client
    config.configure()
    emptied(URL).close()
    client.close()


def finished_fanouts(log: FanoutLog, event_ids: list[str]) -> int:
    return sum(1 for event_id in event_ids if (record := log.get("crash-app", event_id))
               and record.finished)


def delivered(client, endpoint_ids: list[str], event_ids: list[str]) -> int:
    return sum(delivery.delivered(client, [(endpoint_id, event_id)
                                           for endpoint_id in endpoint_ids
                                           for event_id in event_ids]))


def test_sigkill_during_fan_out_loses_no_delivery_and_duplicates_only_in_flight_ones(
        isolated, receiver, start_worker):
    started = time.monotonic()
    AppRegistry().add("crash-app")
    registry = EndpointRegistry()
    endpoint_ids = [f"crash-ep-{n:02d}" for n in range(ENDPOINTS)]
    for endpoint_id in endpoint_ids:
        registry.add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))),
                     app="crash-app")
    event_ids = [publish("crash-app", "order.created", {"n": n}, event_id=f"evt-{n:04d}")
                 for n in range(EVENTS)]
    log = FanoutLog()
    first = start_worker("fanout-1", concurrency=16, extra_env=ENV)
    wait_until(lambda: finished_fanouts(log, event_ids) >= 50, timeout=30,
               what="the first fan-outs to end")
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    fanned = finished_fanouts(log, event_ids)
    assert fanned < EVENTS, "the fan-out ended before the kill: nothing was interrupted"
    start_worker("fanout-2", concurrency=16, extra_env=ENV)
    total = EVENTS * ENDPOINTS
    wait_until(lambda: delivered(isolated, endpoint_ids, event_ids) == total, timeout=120,
               what="every (event, endpoint) delivered")
    assert finished_fanouts(log, event_ids) == EVENTS
    received = Counter((r.path.lstrip("/"), r.headers["webhook-id"]) for r in receiver.received)
    expected = {(endpoint_id, event_id) for endpoint_id in endpoint_ids
                for event_id in event_ids}
    assert set(received) == expected  # every pair, and no request under another webhook-id
    duplicates = {pair: n for pair, n in received.items() if n > 1}
    print(f"\nSIGKILL after {fanned}/{EVENTS} fan-outs: {total} delivered, "
          f"{len(duplicates)} sent twice (in flight), {time.monotonic() - started:.0f}s")
    assert len(duplicates) <= 16 and max(received.values()) <= 2
