"""The delivery task. Thin: it reads the message, runs the engine and acts on the outcome.

Retries go through ``autoretry_for`` only for Hookline's own Redis failing before an attempt;
a failed attempt comes back from the engine as ``RetryDue`` and is parked here, with no
exception through Celery (a traceback per retry was most of a retry's cost).
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
from typing import Any

import redis
from celery.signals import task_failure, task_revoked
from kombu.exceptions import OperationalError

import hookline.worker.tallies  # noqa: F401 (counts each delivery's outcome)
from hookline.core import metrics, tracing
from hookline.core.config import settings
from hookline.core.errors import HooklineError
from hookline.core.event import (
    MalformedEvent,
    check_count,
    check_deadline,
    check_ordering_key,
    to_timestamp,
    validate_event,
)
from hookline.core.identity import publish_time
from hookline.core.logs import log_event
from hookline.core.messages import FANOUT_TASK_NAME, TASK_NAME
from hookline.delivery.engine import (
    Deferred,
    DeliveryEngine,
    DeliveryRequest,
    RetryDue,
    hold_countdown,
)
from hookline.delivery.fanout import expand
from hookline.delivery.retries import dead_letter_unexpected
from hookline.transport.liveness import process_liveness
from hookline.transport.receipt import receipt_for, wait_for_share
from hookline.worker import bulk_replay  # noqa: F401 (its task loads with these)
from hookline.worker.celery import worker_app
from hookline.worker.health import install as count_health
from hookline.worker.held import HELD_ENDPOINTS
from hookline.worker.parking import ParkingTask, log_held
from hookline.worker.reconciler import RUNNING

count_health()  # every settled attempt of this process counts in endpoint health


class DeliveryTask(ParkingTask):
    autoretry_for = (redis.RedisError,)  # Hookline's own Redis, before the attempt
    retry_backoff = False
    max_retries = None  # the retry policy decides when to stop, and dead-letters the event
    acks_late = True
    engine: DeliveryEngine | None = None
    # What Flower is told (SUCCESS, RETRY or FAILURE by Hookline's outcome; the payload's size).
    Request = "hookline.worker.request:TaskRequest"


@worker_app.task(bind=True, base=DeliveryTask, name=TASK_NAME, shared=False)
def deliver(self: DeliveryTask, endpoint_id: str, event_type: str, payload: Any,
            event_id: str | None = None, deadline: Any = None, attempts: int = 0,
            first_attempt_at: float | None = None, rate_slot: int = 0,
            enqueued_at: float | None = None, ordering_key: str | None = None,
            sequence: int | None = None) -> dict[str, Any]:
    """Deliver one event to one endpoint (an attempt, a deferral or a scheduled retry).

    ``event_id`` defaults to the task id, which Celery keeps across retries; ``deadline``
    (Unix seconds, datetime or ISO 8601) is when the event stops being worth sending. The
    rest is Hookline's bookkeeping, set on publish, retries and deferrals (``ordering_key``
    and ``sequence``: an ordered endpoint's line, which the broker's consume script keeps
    from the message's headers; the sequence a replay carries is read there, not here).
    Where traces are on, the run is a span (``hookline.core.tracing``).
    """
    event_id = self.request.id if event_id is None else event_id
    with tracing.consuming(self.request, TASK_NAME, endpoint_id=endpoint_id,
                           event_id=event_id if isinstance(event_id, str) else None) as traced:
        return traced.finished(_deliver(
            self, endpoint_id, event_type, payload, event_id, deadline, attempts,
            first_attempt_at, rate_slot, enqueued_at, ordering_key))


def _deliver(self: DeliveryTask, endpoint_id: str, event_type: str, payload: Any,
             event_id: Any, deadline: Any, attempts: int, first_attempt_at: float | None,
             rate_slot: int, enqueued_at: float | None,
             ordering_key: str | None) -> dict[str, Any]:
    try:
        # The checks of every other door (hookline.core.event), the payload's limits included.
        validate_event(endpoint_id, event_type, payload, event_id,
                       max_bytes=settings().max_payload_bytes)
        request = DeliveryRequest(
            endpoint_id=endpoint_id, event_type=event_type, payload=payload, event_id=event_id,
            deadline=check_deadline(deadline), attempts=check_count("attempts", attempts),
            first_attempt_at=to_timestamp(first_attempt_at, name="first_attempt_at"),
            rate_slot=check_count("rate_slot", rate_slot),
            enqueued_at=publish_time(enqueued_at),
            ordering_key=check_ordering_key(ordering_key),
        )
    except (MalformedEvent, TypeError, ValueError) as exc:
        dead_letter_unexpected((endpoint_id, event_type, payload), {"event_id": event_id},
                               self.request.id, "malformed", exc)
        return {"outcome": "dead_lettered", "reason": "malformed"}
    config = settings()
    amqp = config.broker_amqp
    # a Redis broker's consume.lua parks them
    held = HELD_ENDPOINTS.held(endpoint_id) if amqp else None
    if held is not None and request.deadline is None:
        return _park_held(self, request, *held)
    if DeliveryTask.engine is None:
        DeliveryTask.engine = DeliveryEngine()
    # The message's receipt, when this process consumed it and the broker is the gate's
    # Redis: the transport folds the acknowledgement into the settle (one round trip less);
    # Celery's ack after the task then sends nothing (hookline/transport/receipt.py).
    tag = (getattr(self.request, "properties", None) or {}).get("delivery_tag")
    receipt = receipt_for(tag) if config.broker_is_state and tag else None
    if receipt is not None and not receipt.still_ours():
        log_event("delivery.fenced", level=logging.WARNING, endpoint_id=endpoint_id,
                  event_id=event_id, detail="taken before this worker was declared dead; "
                                            "another worker has it: not attempted here")
        return {"outcome": "fenced"}
    token = attempt_token()
    RUNNING.start(token, endpoint_id)  # before its admit: the reconciler's view (reconciler.py)
    try:
        result = DeliveryTask.engine.attempt(request, token=token, receipt=receipt)
    finally:
        RUNNING.finish(token)
    if (isinstance(result, Deferred) and result.reason == "capped" and tag
            and wait_for_share(tag, endpoint_id)):
        # Waits in its endpoint's list for a slot under the cap: no timer, no attempt used.
        return {"outcome": "waiting", "reason": "capped"}
    if isinstance(result, Deferred):  # not an attempt: the count stays
        if amqp:
            HELD_ENDPOINTS.remember(endpoint_id, result)
        self.park_next(result.request, result.countdown)
        log_held(result.request, result.reason)
        return {"outcome": "deferred", "reason": result.reason, "countdown": result.countdown}
    if isinstance(result, RetryDue):
        self.park_next(result.request, result.countdown, status=result.status,
                       error=result.error)
        metrics.count_retry(endpoint_id)
        return {"outcome": "retry_scheduled", "countdown": result.countdown,
                "status": result.status}
    return {"outcome": result.outcome, "reason": result.reason or None, "status": result.status}


@worker_app.task(bind=True, name=FANOUT_TASK_NAME, shared=False, acks_late=True,
                 autoretry_for=(redis.RedisError, OperationalError), retry_backoff=True,
                 retry_backoff_max=60, max_retries=None)
def fanout(self: Any, app_id: str, event_id: str) -> dict[str, Any]:
    """Enqueue one delivery per receiver of a published event (``hookline.publish``),
    resuming where a crashed run's last recorded batch ended (``hookline.delivery.fanout``).
    Acknowledged late: a worker killed mid-fan-out leaves the message to be redelivered."""
    with tracing.consuming(self.request, FANOUT_TASK_NAME, endpoint_id=None,
                           event_id=event_id) as traced:
        return traced.finished({"enqueued": expand(app_id, event_id)})


_tokens: tuple[int, str, itertools.count[int]] | None = None


def attempt_token() -> str:
    """A token no other attempt anywhere holds (the lease's owner in admit and settle): a
    prefix, then a counter. The prefix is this process's liveness token (so the worker that
    finds this process dead can release its leases, hookline/transport/liveness.py), or a
    random one drawn once per process (again after a fork) where it has none. A uuid4 per
    attempt reads the OS's random source every time, about 3% of a delivery's CPU here."""
    global _tokens
    live = process_liveness(create=False)
    prefix = live.current().token if live is not None else None
    tokens = _tokens
    if tokens is None or tokens[0] != os.getpid() or (prefix and tokens[1] != prefix):
        tokens = _tokens = (os.getpid(), prefix or secrets.token_hex(12), itertools.count())
    return f"{tokens[1]}-{next(tokens[2])}"


def _park_held(task: DeliveryTask, request: DeliveryRequest, reason: str,
               left: float) -> dict[str, Any]:
    """The cheap deferral (``hookline.worker.held``): the gate said a moment ago that this
    endpoint is held for ``left`` more seconds, so the delivery is parked until then without
    asking it again (one round trip, no attempt, no retry used)."""
    countdown = hold_countdown(reason, left)
    log_event("delivery.deferred", endpoint_id=request.endpoint_id, event_id=request.event_id,
              reason=reason, attempt=request.attempts, countdown=countdown, by="worker")
    metrics.count_deferral(request.endpoint_id, reason)
    task.park_next(request, countdown)
    log_held(request, reason)
    return {"outcome": "deferred", "reason": reason, "countdown": countdown}


@task_failure.connect(sender=deliver)
def _on_failure(sender: Any = None, task_id: str | None = None, exception: Any = None,
                args: Any = None, kwargs: Any = None, **_: Any) -> None:
    """Any failure the engine did not turn into an outcome (a bug, a lost dependency) ends in
    the dead-letter queue with reason ``error`` instead of vanishing. A Reject comes from a
    park that failed, which dead-lettered or kept the event already."""
    from celery.exceptions import Reject

    if not isinstance(exception, Reject):
        dead_letter_unexpected(args or (), kwargs or {}, task_id, "error", exception)


class DeliveryRevoked(HooklineError):
    """A delivery's task was revoked (Flower, ``celery control revoke``) or had expired."""


@task_revoked.connect(sender=deliver)
def _on_revoked(sender: Any = None, request: Any = None, terminated: bool = False,
                signum: Any = None, expired: bool = False, **_: Any) -> None:
    """A revoked delivery ends in the dead-letter queue (reason ``revoked``, or ``expired``
    past a Celery ``expires``), ready for ``hookline dlq replay``, instead of vanishing.

    Celery discards a revoked task's message when a worker that knows the revocation meets
    it: before it ran, or when its retry comes back from the schedule (the same task id), or,
    with ``terminate=True`` under the prefork pool, kills it while it runs (an attempt that
    may have been sent: a replay's idempotency gate stops a second send if it was
    delivered). Revocations live in the worker's memory (``--statedb`` keeps them across
    restarts). A replay publishes under a new task id, so the revocation does not catch it.
    """
    if request is None:
        return
    reason = "expired" if expired else "revoked"
    how = "terminated while running" if terminated else "discarded before it ran"
    dead_letter_unexpected(request.args or (), request.kwargs or {}, request.id, reason,
                           DeliveryRevoked(f"{reason}: {how}"), level=logging.WARNING)
