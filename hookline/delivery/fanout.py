"""A published event's fan-out: one delivery per receiver, enqueued in batches, the progress
(a cursor over the receivers fixed at publish) recorded with each batch
(``hookline.store.fanouts``), so that a fan-out task redelivered after a crash resumes where
the last recorded batch ended.

Two ways to the broker:

- **The broker is Hookline's Redis** (the default: ``HOOKLINE_BROKER_URL`` unset, a plain
  ``redis://``): each batch's messages are built here (as kombu's Redis transport would write
  them) and pushed together with the cursor's move by one script (push_fanout.lua): a crash
  enqueues no delivery twice, and the batch costs one round trip.
- **Any other broker** (a separate Redis, Sentinel, RabbitMQ): each batch goes through one
  producer, in one pipelined write where the transport allows it (kombu 5.7's
  ``Producer.batch``), then the cursor moves. A crash between the two enqueues that batch
  again; each of its deliveries carries the event id, so the endpoint's idempotency gate (the
  done marker and the in-flight lease) sends it once.

Nothing is lost either way: a batch is counted only once the broker has it. Redis round trips
grow by one or two per batch, not one per endpoint.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from hookline.core import tracing
from hookline.core.config import Settings, settings
from hookline.core.logs import log_event
from hookline.core.messages import DELIVERY_QUEUE, FANOUT_TASK_NAME, shown_args
from hookline.delivery.publisher import enqueue_delivery, publishing_app
from hookline.store.fanouts import FanoutLog, PublishedEvent
from hookline.transport.envelope import DeliveryMessages

#: Deliveries enqueued per batch (one recorded step of the cursor).
FANOUT_BATCH = 500


def enqueue_fanout(app_id: str, event_id: str) -> Any:
    """Publish the fan-out task of a recorded event; its arguments are ids only."""
    return publishing_app().send_task(FANOUT_TASK_NAME, args=(app_id, event_id),
                                      task_id=f"fanout:{app_id}/{event_id}", queue=DELIVERY_QUEUE,
                                      headers=tracing.message_headers())


#: Seconds a published event's fan-out may take to be queued and run before a releaser looks
#: at it (and re-queues it if it is unfinished); the same again between later looks.
FANOUT_LOOK_AFTER = 60.0


def sweep_fanouts(fanouts: FanoutLog | None = None, now: float | None = None) -> int:
    """A releaser's look at the fan-outs marked pending whose time has come: a finished one
    (or one whose record expired) is forgotten; an unfinished one has its fan-out task
    queued again (one releaser does it: :meth:`FanoutLog.postpone_pending`; the fan-out
    resumes at its cursor, so a second run enqueues nothing twice). Returns how many were
    queued again."""
    fanouts = fanouts or FanoutLog()
    now = time.time() if now is None else now
    queued = 0
    for app_id, event_id in fanouts.due_pending(now):
        event = fanouts.get(app_id, event_id)
        if event is None or event.finished:
            fanouts.forget_pending(app_id, event_id)
            continue
        # Whole windows, so that releasers looking at the same moment agree on the score.
        look_at = (now // FANOUT_LOOK_AFTER + 2) * FANOUT_LOOK_AFTER
        if fanouts.postpone_pending(app_id, event_id, look_at):
            enqueue_fanout(app_id, event_id)
            log_event("fanout.requeued", level=logging.WARNING, app_id=app_id,
                      event_id=event_id, enqueued=event.cursor, receivers=len(event.receivers))
            queued += 1
    return queued


def expand(app_id: str, event_id: str, *, batch: int = FANOUT_BATCH,
           fanouts: FanoutLog | None = None) -> int:
    """Enqueue the deliveries of published event ``event_id`` not yet enqueued; returns how
    many were enqueued now (0 when the fan-out had ended, or its record expired)."""
    fanouts = fanouts or FanoutLog()
    event = fanouts.get(app_id, event_id)
    if event is None or event.finished or event.payload is None:
        fanouts.forget_pending(app_id, event_id)
        return 0
    payload = json.loads(event.payload)
    size = len(event.payload.encode())
    if event.lined and not event.lined_done:  # its publisher died before it queued them
        enqueue_lined(fanouts, event, payload, size)
    if pushed_by_script(settings()):
        enqueued = _push_batches(fanouts, event, payload, size, batch)
    else:
        enqueued = _publish_batches(fanouts, event, payload, size, batch)
    log_event("fanout.enqueued", app_id=app_id, event_id=event_id, event_type=event.event_type,
              receivers=len(event.receivers), enqueued=enqueued)
    fanouts.forget_pending(app_id, event_id)  # every delivery is queued: nothing to look at
    return enqueued


def enqueue_lined(fanouts: FanoutLog, event: PublishedEvent, payload: Any, size: int) -> None:
    """The deliveries to the event's ordered receivers, enqueued now, then recorded so: each
    joins its key's line in the order the events were published (``hookline.publish`` calls
    this before it returns; the fan-out task only when a publisher died first)."""
    with publishing_app().producer_or_acquire() as producer:
        _enqueue_batch(producer, event, event.lined, payload, size)
    fanouts.mark_lined(event.app_id, event.event_id)


def pushed_by_script(config: Settings) -> bool:
    """Whether the broker is Hookline's own plain Redis, where push_fanout.lua enqueues a
    batch and moves the cursor in one step (Sentinel's publishes wait for replicas, so they
    go through kombu)."""
    return config.broker_is_state and config.redis_url.startswith(
        ("redis://", "rediss://", "unix://"))


def _push_batches(fanouts: FanoutLog, event: PublishedEvent, payload: Any, size: int,
                  batch: int) -> int:
    messages = DeliveryMessages(publishing_app(), event, payload, size)
    total, cursor, enqueued = len(event.receivers), event.cursor, 0
    while cursor < total:
        chunk = event.receivers[cursor:cursor + batch]
        moved = fanouts.push(event.app_id, event.event_id, cursor, total,
                             [messages.build(endpoint_id) for endpoint_id in chunk],
                             queue=DELIVERY_QUEUE)
        if moved != cursor + len(chunk):
            break  # a twin of this task moved the cursor (or the record expired): it goes on
        enqueued, cursor = enqueued + len(chunk), moved
    return enqueued


def _publish_batches(fanouts: FanoutLog, event: PublishedEvent, payload: Any, size: int,
                     batch: int) -> int:
    total, cursor, enqueued = len(event.receivers), event.cursor, 0
    with publishing_app().producer_or_acquire() as producer:
        while cursor < total:
            chunk = event.receivers[cursor:cursor + batch]
            _enqueue_batch(producer, event, chunk, payload, size)
            enqueued += len(chunk)
            cursor = fanouts.advance(event.app_id, event.event_id, cursor + len(chunk), total)
    return enqueued


def _enqueue_batch(producer: Any, event: PublishedEvent, endpoint_ids: tuple[str, ...],
                   payload: Any, size: int) -> None:
    kwargs = {"event_id": event.event_id, "deadline": event.deadline,
              **({"ordering_key": event.ordering_key} if event.ordering_key else {})}
    with producer.batch(max_size=4 * len(endpoint_ids) + 4):
        for endpoint_id in endpoint_ids:
            # The task id names the delivery (endpoint and event): Flower shows one per
            # endpoint; the event id (the webhook-id) is the task's event_id.
            enqueue_delivery((endpoint_id, event.event_type, payload), kwargs,
                             task_id=f"{endpoint_id}/{event.event_id}", producer=producer,
                             argsrepr=shown_args(endpoint_id, event.event_type, None, size=size))
