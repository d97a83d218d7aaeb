"""Redis itself fails mid-delivery: the event is not lost.

A private Redis (AOF on) serves one worker. It is shut down while the worker waits on a
receiver that then answers 503: settling fails, publishing the retry fails, and the task's
retry() dead-letters the event with reason ``retry_failed``; Redis being down, the entry goes to
the spool file. After Redis restarts the spool is restored into the dead-letter queue.
"""

from __future__ import annotations

import shutil

import pytest
from celery import Celery

from app.deadletter import DeadLetterQueue, restore_spool
from app.endpoints import EndpointRegistry
from examples.receiver import Reply, always
from tests.conftest import PrivateRedis, wait_until

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")


def test_redis_down_at_retry_time_spools_the_dead_letter(tmp_path, receiver, start_worker):
    server = PrivateRedis(tmp_path)
    client = server.start()
    spool = tmp_path / "spool.jsonl"
    try:
        endpoint = EndpointRegistry(client).add("outage", receiver.route(
            "/outage", always(Reply(503, delay=1.0))))
        start_worker("outage", concurrency=2, extra_env={
            "REDIS_URL": server.url, "HOOKLINE_DLQ_SPOOL": str(spool)})
        producer = Celery(broker=server.url)
        producer.send_task("hookline.deliver", args=[endpoint.id, "order.created", {"n": 1}],
                           kwargs={"event_id": "evt-outage"}, queue="hookline")
        assert receiver.wait_for(lambda got: len(got) == 1, timeout=20)
        server.shutdown()  # while the receiver still holds the request
        wait_until(spool.exists, timeout=60)
        client = server.start()
        queue = DeadLetterQueue(client)
        assert restore_spool(queue, str(spool)) == 1
        entry = queue.get("outage/evt-outage")
        assert entry is not None
        assert entry.reason == "retry_failed"
        assert entry.payload == {"n": 1} and entry.event_type == "order.created"
    finally:
        server.stop()
