"""Deliveries put straight on a test database's delivery queue, and counted once delivered:
for the fault tests that start their own workers on that database."""

from __future__ import annotations

import redis

from hookline.store import delivery
from hookline.transport.envelope import build_message
from hookline.worker.celery import worker_app


def enqueue(client: redis.Redis, endpoint_id: str, count: int, prefix: str = "evt", *,
            ordering_keys: int = 0) -> list[str]:
    """Put ``count`` first deliveries (event ids ``<prefix>-00000``...) on the ``hookline``
    queue of ``client``'s database in one pipeline. ``ordering_keys``: spread them over that
    many ordering keys (``k0``, ``k1``...), for an ordered endpoint."""
    event_ids = [f"{prefix}-{n:05d}" for n in range(count)]
    pipe = client.pipeline(transaction=False)
    for n, event_id in enumerate(event_ids):
        kwargs: dict[str, object] = {"event_id": event_id}
        if ordering_keys:
            kwargs["ordering_key"] = f"k{n % ordering_keys}"
        pipe.lpush("hookline", build_message(
            worker_app, task_name="hookline.deliver", task_id=event_id,
            args=[endpoint_id, "order.created", {"id": event_id}],
            kwargs=kwargs, retries=0, queue="hookline"))
    pipe.execute()
    return event_ids


def delivered(client: redis.Redis, endpoint_id: str, event_ids: list[str]) -> int:
    """How many of ``event_ids`` are recorded delivered to the endpoint (done markers)."""
    return sum(delivery.delivered(client, [(endpoint_id, event_id) for event_id in event_ids]))
