"""What becomes of a delivery that is not finished: a due retry or a deferral parked in the
schedule, an event the engine could not handle dead-lettered, and the cascade that moves an
endpoint's scheduled retries to the dead-letter queue when it is gone, disabled or removed."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from hookline.core import metrics, redact, tracing
from hookline.core.endpoint import Endpoint
from hookline.core.event import (
    ENDPOINT_ID_PATTERN,
    INVALID_ENDPOINT,
    MAX_EVENT_TYPE_LENGTH,
    MalformedEvent,
    kept_payload,
    recorded_id,
    shown,
    to_timestamp,
)
from hookline.core.identity import publish_time
from hookline.core.logs import log_event
from hookline.core.messages import RETRY_QUEUE, TASK_NAME, shown_args
from hookline.core.policy import parse_rate
from hookline.delivery import reporting
from hookline.store.connection import redis_time
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import PAUSE_PARK, EndpointRegistry
from hookline.store.ordering import OrderLines
from hookline.store.schedule import RetrySchedule
from hookline.transport.envelope import build_message


def park(celery_app: Any, schedule: RetrySchedule, *, task_id: str, args: list[Any],
         kwargs: dict[str, Any], retries: int, countdown: float, parent_id: str | None = None,
         root_id: str | None = None, last_status: int | None = None,
         last_error: str = "") -> float:
    """Park the next attempt of a delivery (the same task id and event id) in the retry
    schedule, due in ``countdown`` seconds, as a message for the retry queue. Returns the due
    time; raises ``ScheduleFull`` at a cap and Redis errors as they come."""
    message = build_message(
        celery_app, task_name=TASK_NAME, task_id=task_id, args=args, kwargs=kwargs,
        retries=retries, queue=RETRY_QUEUE, parent_id=parent_id, root_id=root_id,
        argsrepr=shown_args(*args[:3]) if len(args) >= 3 else None,
        headers=tracing.message_headers(),  # the trace goes on, and its first attempt's span
    )
    return schedule.park(endpoint_id=args[0], event_id=kwargs["event_id"], countdown=countdown,
                         message=message, last_status=last_status, last_error=last_error)


def dead_letter_unexpected(args: Any, kwargs: dict[str, Any], task_id: str | None, reason: str,
                           exception: Any, *, last_status: int | None = None,
                           last_error: str = "", dlq: DeadLetterQueue | None = None,
                           level: int = logging.ERROR) -> None:
    """Dead-letter a delivery the engine did not finish (malformed, a bug, a full schedule),
    with whatever of its arguments can be read."""
    args = list(args) + [None] * 3
    valid_id = isinstance(args[0], str) and ENDPOINT_ID_PATTERN.match(args[0])
    endpoint_id = args[0] if valid_id else INVALID_ENDPOINT
    event_id = kwargs.get("event_id")
    # Recorded under the event's own id, even an invalid one (recorded_id bounds its length,
    # and lookups apply the same), so that 'hookline event show ID' finds it.
    event_id = (task_id or "unknown") if event_id is None else event_id
    attempts = kwargs.get("attempts")
    entry = DeadLetter(
        endpoint_id=endpoint_id[:64],
        event_id=recorded_id(event_id),
        event_type=recorded_id(args[1], MAX_EVENT_TYPE_LENGTH) if args[1] is not None else "",
        payload=kept_payload(args[2]),
        reason=reason,
        attempts=attempts if type(attempts) is int and 0 <= attempts < 2**53 else 0,
        first_attempt_at=_time_or_none(kwargs.get("first_attempt_at")),
        last_status=last_status,
        last_error=redact.text(last_error or f"{type(exception).__name__}: {exception}")[:500],
        detail="" if valid_id else f"endpoint id as sent: {shown(args[0], 100)}",
        enqueued_at=_publish_time_or_none(kwargs.get("enqueued_at")),
        first_attempt_span=tracing.first_attempt(),
    )
    (dlq or DeadLetterQueue()).add(entry)
    metrics.count_outcome(entry.endpoint_id, "dead_lettered", reason)
    if valid_id:
        reporting.report(reporting.dead_lettered(
            entry.endpoint_id, entry.event_id, entry.event_type, reason,
            attempts=entry.attempts, first_attempt_at=entry.first_attempt_at))
    log_event("delivery.dead_lettered", level=level, endpoint_id=entry.endpoint_id,
              event_id=entry.event_id, reason=reason, error=type(exception).__name__)


def _publish_time_or_none(value: Any) -> float | None:
    try:
        return publish_time(value)
    except MalformedEvent:
        return None


def _time_or_none(value: Any) -> float | None:
    try:
        return to_timestamp(value, name="first_attempt_at")
    except MalformedEvent:
        return None


def dead_letter_scheduled(endpoint_id: str, reason: str) -> int:
    """Move an endpoint's scheduled retries to the dead-letter queue with ``reason``.

    Dead letters are written before the retries leave the schedule: a crash in between leaves
    a retry in both places, and its next attempt meets the same disabled endpoint and lands on
    the same dead-letter entry. Nothing is lost.
    """
    schedule, dlq = RetrySchedule(), DeadLetterQueue()
    retries = list(schedule.scheduled(endpoint_id))
    for retry in retries:
        dlq.add(DeadLetter(
            endpoint_id=retry.endpoint_id, event_id=retry.event_id, event_type=retry.event_type,
            payload=retry.payload, reason=reason, attempts=retry.attempts,
            first_attempt_at=retry.first_attempt_at, last_status=retry.last_status,
            last_error=retry.last_error, detail="was scheduled for retry",
            enqueued_at=_publish_time_or_none(retry.enqueued_at),
            first_attempt_span=retry.first_attempt_span,
        ))
    schedule.unpark([retry.id for retry in retries])
    if retries:
        log_event("schedule.dead_lettered", level=logging.WARNING, endpoint_id=endpoint_id,
                  reason=reason, count=len(retries))
        # Flower last heard RETRY for these: tell it they failed (best effort, never raises).
        from hookline.delivery import announce

        announce.dead_lettered((retry.task_id, reason) for retry in retries)
        for retry in retries:
            reporting.report(reporting.dead_lettered(
                retry.endpoint_id, retry.event_id, retry.event_type, reason,
                attempts=retry.attempts, first_attempt_at=retry.first_attempt_at))
    return len(retries)




def disable_endpoint(registry: EndpointRegistry, endpoint_id: str,
                     reason: str = "disabled by operator", *, by: str = "") -> Endpoint:
    """Stop all sends to an endpoint (``by``: who, recorded with the reason and the time);
    its scheduled retries go to the dead-letter queue now (reason ``endpoint_disabled``),
    ready to replay once it is fixed."""
    was = registry.require(endpoint_id)
    saved = registry.disable(endpoint_id, reason, by=by)
    OrderLines(registry.redis).release(endpoint_id)  # its workers dead-letter them
    if was.enabled:
        reporting.report(reporting.endpoint_disabled(
            endpoint_id, reason="operator", detail=reason, since=saved.updated_at))
    dead_letter_scheduled(endpoint_id, "endpoint_disabled")
    return saved


#: Seconds between resume's two passes over the schedule: the second one brings forward a
#: delivery a worker parked for the pause just after the first (its admit saw the pause, its
#: park came after the first pass).
RESUME_GRACE = 1.0


def resume_endpoint(registry: EndpointRegistry, endpoint_id: str, *,
                    grace: float = RESUME_GRACE) -> tuple[Endpoint, int]:
    """End an endpoint's pause: the deliveries parked for it become due now, at the moment
    each was parked, so the releaser sends them in the order they came in, and the endpoint's
    rate limit spaces them. Returns the endpoint and how many were made due.

    The pause is lifted first, then the parked deliveries are brought forward (twice,
    ``grace`` seconds apart): a delivery released in between meets an endpoint that takes
    it."""
    endpoint, since, now = registry.lift_pause(endpoint_id)
    if since is None:
        return endpoint, 0
    pause_ms = round(PAUSE_PARK * 1000)
    schedule = RetrySchedule()
    # Rate-limited: one per rate interval (and a tenth, so an admission a little late does
    # not make the next one early for the limiter, which would defer it behind a later one)
    # from now, in order; otherwise all due now.
    spacing = math.ceil(parse_rate(endpoint.rate) * 1100) if endpoint.rate else 0
    # Parked for this pause: due a pause-park after a moment in it (a minute's margin for
    # rounding); nothing else is parked that far ahead (PAUSE_PARK).
    moved = schedule.make_due(endpoint_id, parked_after=since + pause_ms - 60_000,
                              shift=pause_ms, now=now, spacing=spacing)
    if grace > 0:
        time.sleep(grace)
        moved += schedule.make_due(endpoint_id, parked_after=since + pause_ms - 60_000,
                                   shift=pause_ms, now=now + moved * spacing,
                                   spacing=spacing)
    log_event("endpoint.resumed", endpoint_id=endpoint_id, released=moved,
              paused_seconds=round((now - since) / 1000.0, 3))
    return endpoint, moved


#: Seconds a delivery whose endpoint's secrets did not open is parked for (the engine's
#: deferral ``secrets_unreadable``), and the most jitter added to them.
UNREADABLE_LOOK = 30.0
UNREADABLE_JITTER = UNREADABLE_LOOK / 6


def release_unreadable(registry: EndpointRegistry, endpoint: Endpoint, *,
                       grace: float = RESUME_GRACE) -> int:
    """Once an endpoint's unreadable sealed secret is replaced, make its held deliveries due
    now rather than at their next look: the ones the engine parked for it, due within
    ``UNREADABLE_LOOK`` plus jitter, in the order they are due, one per rate interval when
    it has a rate. Twice, ``grace`` seconds apart, like resume: a worker that read the old
    record just before the repair parks its delivery just after the first pass. Returns how
    many were made due."""
    spacing = math.ceil(parse_rate(endpoint.rate) * 1100) if endpoint.rate else 0
    window = math.ceil((UNREADABLE_LOOK + UNREADABLE_JITTER + 1.0) * 1000)
    schedule = RetrySchedule(registry.redis)
    moved, start = 0, 0
    for attempt in range(2):
        if attempt:
            time.sleep(grace)
        now = math.floor(redis_time(schedule.redis) * 1000)
        start = max(now, start + moved * spacing)
        moved += schedule.make_due(endpoint.id, parked_after=start, shift=window, now=start,
                                   spacing=spacing, due_before=now + window)
    log_event("endpoint.secrets_repaired", endpoint_id=endpoint.id, released=moved)
    return moved


def pause_endpoint(registry: EndpointRegistry, endpoint_id: str) -> Endpoint:
    """Hold an endpoint's deliveries in the retry schedule until :func:`resume_endpoint`."""
    paused = registry.pause(endpoint_id)
    log_event("endpoint.paused", endpoint_id=endpoint_id)
    return paused


def remove_endpoint(registry: EndpointRegistry, endpoint_id: str) -> None:
    """Forget an endpoint; its scheduled retries go to the dead-letter queue now (and the
    deliveries waiting in an ordered endpoint's lines to its workers, which dead-letter them)."""
    OrderLines(registry.redis).release(endpoint_id)
    registry.remove(endpoint_id)
    dead_letter_scheduled(endpoint_id, "endpoint_removed")
