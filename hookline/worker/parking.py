"""Parking a delivery's next attempt in the retry schedule, from inside the task, and what
happens when that cannot be done. The one place a retry or deferral is acted on."""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from kombu.exceptions import KombuError

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.core.policy import compute_backoff
from hookline.delivery import retries
from hookline.delivery.engine import ENDPOINT_HOLDS, DeliveryRequest
from hookline.store import connection
from hookline.store.event_log import EventLog
from hookline.store.schedule import RetrySchedule, ScheduleFull
from hookline.transport.face import broker_face

_schedule: RetrySchedule | None = None
_event_log: EventLog | None = None

#: Redis errors that pass: the park is tried again with the message (requeued or restored),
#: not dead-lettered.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError,
             redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
             redis.exceptions.MasterDownError)


def log_held(request: DeliveryRequest, reason: str) -> None:
    """The event log's row of a delivery parked behind its held endpoint (paused, breaker
    open or probing, Retry-After): held. A failed write is logged, not the task's failure."""
    if reason not in ENDPOINT_HOLDS:
        return
    global _event_log
    try:
        if _event_log is None or _event_log.redis is not connection.client():
            _event_log = EventLog()
        _event_log.record_held([(request.endpoint_id, request.event_id, request.event_type)])
    except redis.RedisError as exc:
        log_event("event_log.failed", level=logging.WARNING, endpoint_id=request.endpoint_id,
                  event_id=request.event_id, error=type(exc).__name__)


def schedule() -> RetrySchedule:
    """This process's retry schedule (its scripts registered once, not at every park)."""
    global _schedule
    if _schedule is None or _schedule.redis is not connection.client():
        _schedule = RetrySchedule()
    return _schedule


class ParkingTask(Task):
    """A task whose next attempt waits in Hookline's durable schedule, not in the broker."""

    def park_next(self, request: DeliveryRequest, countdown: float, *,
                  status: int | None = None, error: str = "") -> None:
        """Park the message's next attempt (same task id, same event id) with the request's
        bookkeeping; the message is acknowledged when the task returns."""
        kwargs = {**self.request.kwargs, "event_id": request.event_id,
                  "attempts": request.attempts, "first_attempt_at": request.first_attempt_at,
                  "rate_slot": request.rate_slot or None, "enqueued_at": request.enqueued_at}
        self._park(list(self.request.args), kwargs, countdown, status, error)

    def retry(self, args: Any = None, kwargs: Any = None, exc: Any = None, throw: bool = True,
              eta: Any = None, countdown: Any = None, max_retries: Any = None,
              **options: Any) -> Any:
        """``autoretry_for``: Hookline's own Redis failed before the attempt (not an attempt
        at the receiver): park the same message after the policy's first backoff."""
        request = self.request
        if request.called_directly or request.is_eager:
            return super().retry(args=args, kwargs=kwargs, exc=exc, throw=throw,
                                 countdown=countdown, max_retries=max_retries, **options)
        args = list(request.args if args is None else args)
        kwargs = dict(request.kwargs if kwargs is None else kwargs)
        kwargs.setdefault("event_id", request.id)
        if countdown is None:
            countdown = compute_backoff(settings().retry_policy, 1)
        self._park(args, kwargs, countdown, None, "")
        retry = Retry(exc=exc, when=countdown)
        if throw:
            raise retry from None
        return retry

    def _tell_flower_dead_lettered(self, reason: str) -> None:
        """A task that ends with ``Ignore`` sends no event of its own: Flower would show it
        STARTED for good. Rare (a full schedule), so a publish of its own is fine."""
        if not self.app.conf.worker_send_task_events:
            return
        try:
            self.send_event("task-failed", retry=False, traceback="",
                            exception=repr({"outcome": "dead_lettered", "reason": reason}))
        except Exception as exc:  # Flower's view must never cost the dead letter
            log_event("flower.event_failed", level=logging.WARNING, error=type(exc).__name__)

    def _park(self, args: list[Any], kwargs: dict[str, Any], countdown: float,
              status: int | None, error: str) -> None:
        request = self.request
        try:
            retries.park(self.app, schedule(), task_id=request.id, args=args, kwargs=kwargs,
                         retries=(request.retries or 0) + 1, countdown=countdown,
                         parent_id=request.parent_id, root_id=request.root_id,
                         last_status=status, last_error=error)
        except ScheduleFull as full:
            log_event("schedule.full", level=logging.WARNING, endpoint_id=args[0],
                      event_id=kwargs["event_id"], which=full.which)
            retries.dead_letter_unexpected(args, kwargs, request.id, "backlog_full", full,
                                           last_status=status, last_error=error)
            self._tell_flower_dead_lettered("backlog_full")
            raise Ignore() from None
        except TRANSIENT as exc:
            # Redis is unreachable (down, restarting, loading its AOF) or between masters (a
            # Sentinel or Cluster failover: read-only, cluster down, try again): the message is
            # still recorded as unacknowledged in the broker, which is the durable next step.
            # Do not acknowledge it: requeued if Redis answers again by the time the reject is
            # sent, otherwise restored after the visibility timeout. The idempotency gate
            # stops a second send of an attempt whose delivery was recorded.
            log_event("schedule.park_failed", level=logging.WARNING, endpoint_id=args[0],
                      event_id=kwargs["event_id"], error=type(exc).__name__, next="redelivered")
            if broker_face().paces_requeue:
                # A broker apart from Hookline's Redis takes the requeue at once: pace it,
                # or the message would loop through the worker as fast as it can fail.
                time.sleep(1.0)
            raise Reject(exc, requeue=True) from None
        except (redis.RedisError, KombuError, OSError) as exc:
            # Redis answers but refuses the park (out of memory, a script error): dead-letter
            # it (spooled to disk if that fails too) rather than let the message go.
            retries.dead_letter_unexpected(args, kwargs, request.id, "retry_failed", exc)
            raise Reject(exc, requeue=False) from None
