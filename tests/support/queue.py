"""Deliveries put straight on a test database's delivery queue, and counted once delivered:
for the fault tests that start their own workers on that database."""

from __future__ import annotations

import redis

from hookline.store import delivery
from hookline.transport.envelope import build_message
from hookline.worker.celery import app


def enqueue(client: redis.Redis, endpoint_id: str, count: int, prefix: str = "evt") -> list[str]:
    """Put ``count`` first deliveries (event ids ``<prefix>-00000``...) on the ``hookline``
    queue of ``client``'s database in one pipeline."""
    event_ids = [f"{prefix}-{n:05d}" for n in range(count)]
    pipe = client.pipeline(transaction=False)
    for event_id in event_ids:
        pipe.lpush("hookline", build_message(
            app, task_name="hookline.deliver", task_id=event_id,
            args=[endpoint_id, "order.created", {"id": event_id}],
            kwargs={"event_id": event_id}, retries=0, queue="hookline"))
    pipe.execute()
    return event_ids


def delivered(client: redis.Redis, endpoint_id: str, event_ids: list[str]) -> int:
    """How many of ``event_ids`` are recorded delivered to the endpoint (done markers)."""
    return sum(delivery.delivered(client, [(endpoint_id, event_id) for event_id in event_ids]))
