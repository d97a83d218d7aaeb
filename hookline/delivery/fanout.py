"""A published event's fan-out: one delivery per receiver, enqueued in batches, the progress
recorded after each batch (``hookline.store.fanouts``), so that a fan-out task redelivered
after a crash resumes where the last recorded batch ended.

At most one batch is enqueued twice after a crash (the batch whose progress was not yet
recorded); each of its deliveries carries the event id, so the endpoint's idempotency gate
(the done marker and the in-flight lease) sends it once. Nothing is lost: a batch is recorded
only after the broker took it.

The batch goes to the broker through one producer, in one pipelined write where the transport
allows it (kombu 5.7's ``Producer.batch``): Redis round trips grow by one per batch, not one
per endpoint.
"""

from __future__ import annotations

import json
from typing import Any

from hookline.core.logs import log_event
from hookline.core.messages import DELIVERY_QUEUE, FANOUT_TASK_NAME, shown_args
from hookline.delivery.publisher import celery_app, publish
from hookline.store.fanouts import FanoutLog, PublishedEvent

#: Deliveries enqueued per batch (one recorded step of the cursor).
FANOUT_BATCH = 500


def enqueue_fanout(app_id: str, event_id: str) -> Any:
    """Publish the fan-out task of a recorded event; its arguments are ids only."""
    return celery_app().send_task(FANOUT_TASK_NAME, args=(app_id, event_id),
                                  task_id=f"fanout:{app_id}/{event_id}", queue=DELIVERY_QUEUE)


def expand(app_id: str, event_id: str, *, batch: int = FANOUT_BATCH,
           fanouts: FanoutLog | None = None) -> int:
    """Enqueue the deliveries of published event ``event_id`` not yet enqueued; returns how
    many were enqueued now (0 when the fan-out had ended, or its record expired)."""
    fanouts = fanouts or FanoutLog()
    event = fanouts.get(app_id, event_id)
    if event is None or event.finished or event.payload is None:
        return 0
    payload = json.loads(event.payload)
    size = len(event.payload.encode())
    total, cursor, enqueued = len(event.receivers), event.cursor, 0
    app = celery_app()
    with app.producer_or_acquire() as producer:
        while cursor < total:
            chunk = event.receivers[cursor:cursor + batch]
            _enqueue_batch(producer, event, chunk, payload, size)
            enqueued += len(chunk)
            cursor = fanouts.advance(app_id, event_id, cursor + len(chunk), total)
    log_event("fanout.enqueued", app_id=app_id, event_id=event_id, event_type=event.event_type,
              receivers=total, enqueued=enqueued)
    return enqueued


def _enqueue_batch(producer: Any, event: PublishedEvent, endpoint_ids: tuple[str, ...],
                   payload: Any, size: int) -> None:
    kwargs = {"event_id": event.event_id, "deadline": event.deadline}
    with producer.batch(max_size=4 * len(endpoint_ids) + 4):
        for endpoint_id in endpoint_ids:
            # The task id names the delivery (endpoint and event): Flower shows one per
            # endpoint; the event id (the webhook-id) is the task's event_id.
            publish((endpoint_id, event.event_type, payload), kwargs,
                    task_id=f"{endpoint_id}/{event.event_id}", producer=producer,
                    argsrepr=shown_args(endpoint_id, event.event_type, None, size=size))
