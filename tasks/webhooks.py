"""The webhook task. Thin: it unpacks the message and calls the delivery engine in ``app/``."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from celery.signals import before_task_publish, task_failure
from kombu.exceptions import KombuError

from app import metrics, store
from app.celery import RETRY_QUEUE, app
from app.config import settings
from app.deadletter import DeadLetter, DeadLetterQueue
from app.delivery import (
    Deferred,
    DeliveryEngine,
    DeliveryRequest,
    MalformedEvent,
    RetryableDelivery,
    to_timestamp,
    validate_event,
)
from app.endpoints import ENDPOINT_ID_PATTERN
from app.enqueue import shown_args
from app.logs import log_event
from app.policy import compute_backoff
from app.schedule import RetrySchedule, ScheduleFull, build_message, delivery_headers

_engine: DeliveryEngine | None = None
_schedule: RetrySchedule | None = None


def engine() -> DeliveryEngine:
    global _engine
    if _engine is None:
        _engine = DeliveryEngine()
    return _engine


def schedule() -> RetrySchedule:
    """This process's retry schedule (its scripts registered once, not at every park)."""
    global _schedule
    if _schedule is None or _schedule.redis is not store.client():
        _schedule = RetrySchedule()
    return _schedule


class DeliveryTask(Task):
    """Retries through ``autoretry_for`` with Hookline's own countdown and retry schedule.

    Celery's ``retry_backoff`` is off: its factor is rounded to whole seconds and it knows
    neither Retry-After nor per-endpoint policies. The engine computes the countdown when the
    attempt ends and hands it over on :class:`RetryableDelivery`. ``retry()`` then parks the
    retry in the durable schedule in Redis (not in worker memory as a countdown would) and
    raises Celery's ``Retry``, so the message is acknowledged after the park is written and
    Flower shows the task as retried.
    """

    autoretry_for = (RetryableDelivery, redis.RedisError)
    retry_backoff = False
    max_retries = None  # the retry policy decides when to stop, and dead-letters the event
    acks_late = True

    def retry(self, args=None, kwargs=None, exc=None, throw=True, eta=None, countdown=None,
              max_retries=None, **options):
        request = self.request
        args = list(request.args if args is None else args)
        kwargs = dict(request.kwargs if kwargs is None else kwargs)
        last_status, last_error = None, ""
        if isinstance(exc, RetryableDelivery):
            countdown = exc.countdown
            kwargs["attempts"] = exc.request.attempts
            kwargs["first_attempt_at"] = exc.request.first_attempt_at
            kwargs.pop("rate_slot", None)  # the slot was used by this attempt
            last_status, last_error = exc.status, exc.error
        elif countdown is None:
            # Hookline's own Redis failed before the attempt: not an attempt at the receiver.
            countdown = compute_backoff(settings().retry_policy, 1)
        if request.called_directly or request.is_eager:
            return super().retry(args=args, kwargs=kwargs, exc=exc, throw=throw,
                                 countdown=countdown, max_retries=max_retries, **options)
        event_id = kwargs.setdefault("event_id", request.id)
        try:
            message = build_message(
                self.app, task_name=self.name, task_id=request.id, args=args, kwargs=kwargs,
                retries=request.retries + 1, queue=RETRY_QUEUE, parent_id=request.parent_id,
                root_id=request.root_id, argsrepr=shown_args(*args[:3]) if len(args) >= 3 else None,
            )
            schedule().park(endpoint_id=args[0], event_id=event_id, countdown=countdown,
                                 message=message, last_status=last_status,
                                 last_error=last_error)
        except ScheduleFull as full:
            log_event("schedule.full", level=logging.WARNING, endpoint_id=args[0],
                      event_id=event_id, which=full.which)
            _dead_letter_unexpected(args, kwargs, request.id, "backlog_full", full,
                                    last_status=last_status, last_error=last_error)
            raise Ignore() from None
        except (redis.ConnectionError, redis.TimeoutError) as error:
            # Redis is unreachable (down, restarting, loading its AOF): the message itself is
            # still recorded as unacknowledged in the broker (that same Redis), which is the
            # durable next step. Do not acknowledge it: requeued if Redis answers again by the
            # time the reject is sent, otherwise restored after the visibility timeout. The
            # idempotency gate stops a second send of an attempt whose delivery was recorded.
            log_event("schedule.park_failed", level=logging.WARNING, endpoint_id=args[0],
                      event_id=event_id, error=type(error).__name__, next="redelivered")
            config = settings()
            if config.broker_url != config.redis_url:
                # A broker apart from Hookline's Redis takes the requeue at once: pace it,
                # or the message would loop through the worker as fast as it can fail.
                time.sleep(1.0)
            raise Reject(error, requeue=True) from None
        except (redis.RedisError, KombuError, OSError) as error:
            # The retry cannot be parked though Redis answers (out of memory, a script error):
            # dead-letter it (spooled to disk if that fails too) rather than let the message
            # go with nothing to show for it.
            _dead_letter_unexpected(args, kwargs, request.id, "retry_failed", error)
            raise Reject(error, requeue=False) from None
        retry = Retry(exc=exc, when=countdown)
        if throw:
            # The park is the retry: Celery need not format the chain of exceptions behind it.
            raise retry from None
        return retry


@app.task(bind=True, base=DeliveryTask, name="hookline.deliver")
def deliver(
    self: DeliveryTask,
    endpoint_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    deadline: Any = None,
    attempts: int = 0,
    first_attempt_at: float | None = None,
    rate_slot: int = 0,
    enqueued_at: float | None = None,
) -> dict[str, Any]:
    """Deliver one event to one endpoint (an attempt, a deferral or a scheduled retry).

    ``event_id`` defaults to the task id, which Celery keeps across retries; ``deadline``
    (Unix seconds, datetime or ISO 8601) is when the event stops being worth sending.
    ``attempts``, ``first_attempt_at``, ``rate_slot`` and ``enqueued_at`` are Hookline's
    bookkeeping, set on publish, retries and deferrals.
    """
    event_id = event_id or self.request.id
    try:
        validate_event(endpoint_id, event_type, payload, event_id)
        request = DeliveryRequest(
            endpoint_id=endpoint_id,
            event_type=event_type,
            payload=payload,
            event_id=event_id,
            deadline=to_timestamp(deadline, name="deadline"),
            attempts=int(attempts),
            first_attempt_at=to_timestamp(first_attempt_at, name="first_attempt_at"),
            rate_slot=int(rate_slot or 0),
            enqueued_at=to_timestamp(enqueued_at, name="enqueued_at"),
        )
    except (MalformedEvent, TypeError, ValueError) as exc:
        _dead_letter_unexpected((endpoint_id, event_type, payload), {"event_id": event_id},
                                self.request.id, "malformed", exc)
        return {"outcome": "dead_lettered", "reason": "malformed"}
    result = engine().attempt(request, token=uuid.uuid4().hex)
    if isinstance(result, Deferred):  # not an attempt: the count stays
        # Parked like a retry, but the task ends normally: a deferral is no failure, and an
        # open breaker defers every event of its endpoint, so it must stay cheap.
        kwargs = {**self.request.kwargs, "rate_slot": result.request.rate_slot or None}
        self.retry(countdown=result.countdown, kwargs=kwargs, throw=False)
        return {"outcome": "deferred", "reason": result.reason, "countdown": result.countdown}
    return {"outcome": result.outcome, "reason": result.reason or None, "status": result.status}


@before_task_publish.connect(sender="hookline.deliver")
def _stamp_enqueue_time(body: Any = None, headers: Any = None, **_: Any) -> None:
    """Every published delivery carries when it was published (``send_webhook``, ``.delay()``,
    replays), so the delivery lag metric counts the wait in the queue too; and headers naming
    its endpoint and event (``delivery_headers``)."""
    if isinstance(body, tuple | list) and len(body) >= 2 and isinstance(body[1], dict):
        body[1].setdefault("enqueued_at", time.time())
        if isinstance(headers, dict):
            headers.update(delivery_headers(body[0], body[1], headers.get("id")))


@task_failure.connect(sender=deliver)
def _on_failure(sender: Any = None, task_id: str | None = None, exception: Any = None,
                args: Any = None, kwargs: Any = None, **_: Any) -> None:
    """Any failure the engine did not turn into an outcome (a bug, a lost dependency) ends in
    the dead-letter queue with reason ``error`` instead of vanishing. A Reject comes from
    ``retry()``, which dead-lettered the event already (Celery 5.7 also reports it here)."""
    if isinstance(exception, Reject):
        return
    _dead_letter_unexpected(args or (), kwargs or {}, task_id, "error", exception)


def _dead_letter_unexpected(args: Any, kwargs: dict[str, Any], task_id: str | None, reason: str,
                            exception: Any, *, last_status: int | None = None,
                            last_error: str = "") -> None:
    args = list(args) + [None] * 3
    valid_id = isinstance(args[0], str) and ENDPOINT_ID_PATTERN.match(args[0])
    endpoint_id = args[0] if valid_id else "invalid"
    event_id = kwargs.get("event_id") or task_id or "unknown"
    entry = DeadLetter(
        endpoint_id=endpoint_id[:64],
        event_id=str(event_id)[:200],
        event_type=str(args[1]) if args[1] is not None else "",
        payload=args[2],
        reason=reason,
        attempts=int(kwargs.get("attempts") or 0),
        first_attempt_at=kwargs.get("first_attempt_at"),
        last_status=last_status,
        last_error=last_error or f"{type(exception).__name__}: {exception}"[:500],
        detail="" if valid_id else f"endpoint id as sent: {str(args[0])[:100]!r}",
    )
    DeadLetterQueue().add(entry)
    metrics.count_outcome(entry.endpoint_id, "dead_lettered", reason)
    log_event("delivery.dead_lettered", level=logging.ERROR, endpoint_id=entry.endpoint_id,
              event_id=entry.event_id, reason=reason, error=type(exception).__name__)
