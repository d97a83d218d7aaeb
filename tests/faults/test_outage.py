"""Redis itself fails mid-delivery: the event is not lost, and not dead-lettered either.

A private Redis (AOF on) serves one worker. It is shut down while the worker waits on a
receiver that then answers 503: settling fails, parking the retry fails. The message is still
recorded as unacknowledged in that Redis (its AOF), so the worker does not acknowledge it and
writes no dead letter; after Redis restarts the message comes back and the event is attempted
again, then retried on the schedule as usual.
"""

from __future__ import annotations

import shutil

import pytest
from celery import Celery

from examples.receiver import Reply, always
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import DUE_KEY
from tests.conftest import PrivateRedis, wait_until

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")


def test_redis_down_at_retry_time_leaves_the_message_for_redelivery(tmp_path, receiver,
                                                                    start_worker):
    server = PrivateRedis(tmp_path)
    client = server.start()
    spool = tmp_path / "spool.jsonl"
    try:
        endpoint = EndpointRegistry(client).add("outage", receiver.route(
            "/outage", always(Reply(503, delay=1.0))))
        worker = start_worker("outage", concurrency=2, extra_env={
            "REDIS_URL": server.url, "HOOKLINE_DLQ_SPOOL": str(spool),
            "CELERY_VISIBILITY_TIMEOUT": "20"})
        producer = Celery(broker=server.url)
        producer.send_task("hookline.deliver", args=[endpoint.id, "order.created", {"n": 1}],
                           kwargs={"event_id": "evt-outage"}, queue="hookline")
        assert receiver.wait_for(lambda got: len(got) == 1, timeout=20)
        server.shutdown()  # while the receiver still holds the request
        wait_until(lambda: "schedule.park_failed" in worker.output(), timeout=60)
        client = server.start()
        # The same event comes back (same webhook-id) and, failing again, is parked.
        assert receiver.wait_for(lambda got: len(got) >= 2, timeout=60)
        assert {r.webhook_id for r in receiver.received} == {"evt-outage"}
        wait_until(lambda: client.zcard(DUE_KEY) == 1, timeout=20)
        assert DeadLetterQueue(client).get("outage/evt-outage") is None
        assert not spool.exists()
    finally:
        server.stop()
