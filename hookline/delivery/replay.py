"""Replaying dead letters: back onto the queue, or spread in time through the retry schedule so
a receiver that has just recovered gets a steady trickle instead of the whole backlog at once."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hookline.core import tracing
from hookline.core.config import settings
from hookline.core.errors import InvalidField
from hookline.core.event import INVALID_ENDPOINT, validate_event
from hookline.core.logs import log_event
from hookline.core.messages import DELIVERY_QUEUE, TASK_NAME
from hookline.core.policy import parse_rate
from hookline.delivery.publisher import enqueue_delivery, publishing_app
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.schedule import RetrySchedule, ScheduleFull

#: A replay of more entries than this is throttled even without an explicit rate.
from hookline.transport.envelope import build_message

THROTTLE_ABOVE = 100
#: The rate (per endpoint) of a throttled replay when none is given.
DEFAULT_REPLAY_RATE = "10/s"
#: Entries enqueued or parked before they are removed from the queue together.
REPLAY_BATCH = 500


@dataclass(frozen=True)
class ReplayOutcome:
    """What a replay did. ``interval`` is None when the events went straight onto the queue,
    else the seconds between two replayed events of one endpoint."""

    replayed: list[DeadLetter]
    #: Left in the queue because the retry schedule is at a cap.
    kept: list[DeadLetter]
    interval: float | None
    #: Seconds from now until the last replayed event is due.
    spread: float
    #: Left in the queue because they are not valid events (a ``malformed`` dead letter), each
    #: with what is wrong: replayed, they would only be dead-lettered again.
    invalid: list[tuple[DeadLetter, str]] = field(default_factory=list)


def replay_interval(count: int, rate: str | None) -> float | None:
    """Seconds between two replayed events of one endpoint: from ``rate`` (``N/s``, ``N/m``,
    ``N/h``) when given, else ``DEFAULT_REPLAY_RATE`` above ``THROTTLE_ABOVE`` entries, else
    None (straight onto the queue)."""
    if rate is None:
        return parse_rate(DEFAULT_REPLAY_RATE) if count > THROTTLE_ABOVE else None
    return parse_rate(rate)


def replay_spread(entries: Iterable[DeadLetter], interval: float | None) -> float:
    """Seconds from the start of a replay until its last event is due."""
    if interval is None:
        return 0.0
    per_endpoint: dict[str, int] = {}
    for entry in entries:
        per_endpoint[entry.endpoint_id] = per_endpoint.get(entry.endpoint_id, 0) + 1
    return (max(per_endpoint.values(), default=1) - 1) * interval


def invalid_entries(entries: list[DeadLetter]) -> list[tuple[DeadLetter, str]]:
    """The entries that are not valid events, with why: the checks of every other door
    (:func:`hookline.core.event.validate_event`)."""
    limit = settings().max_payload_bytes
    invalid = []
    for entry in entries:
        if entry.endpoint_id == INVALID_ENDPOINT and entry.detail:
            invalid.append((entry, f"its endpoint id was invalid ({entry.detail})"))
            continue
        try:
            validate_event(entry.endpoint_id, entry.event_type, entry.payload, entry.event_id,
                           max_bytes=limit)
        except InvalidField as exc:
            invalid.append((entry, str(exc)))
    return invalid


def replay_entries(queue: DeadLetterQueue, entries: list[DeadLetter], *,
                   interval: float | None = None) -> ReplayOutcome:
    """Send ``entries`` again with their event ids, then remove them from the queue.

    With no ``interval`` each goes straight onto the delivery queue. With one, each is
    parked in the retry schedule, an endpoint's events ``interval`` seconds apart, so a
    recovered receiver gets a steady trickle instead of the whole backlog at once; either
    way every attempt passes the endpoint's gates (breaker, rate limit, Retry-After).
    Sending comes first: a crash before the removal leaves an entry in the queue *and*
    its event on its way, and the idempotency gate stops a second send. Nothing is lost.
    Entries that are not valid events are left in the queue (``invalid``), with why.
    """
    invalid = invalid_entries(entries)
    if invalid:
        refused = {id(entry) for entry, _ in invalid}
        entries = [entry for entry in entries if id(entry) not in refused]
    replayed: list[DeadLetter] = []
    kept: list[DeadLetter] = []
    full: set[str | None] = set()  # endpoints at their schedule cap; None: all of them
    position: dict[str, int] = {}
    spread = 0.0
    for start in range(0, len(entries), REPLAY_BATCH):
        sent: list[DeadLetter] = []
        try:
            for entry in entries[start : start + REPLAY_BATCH]:
                if interval is None:
                    _enqueue(entry)
                elif None in full or entry.endpoint_id in full:
                    kept.append(entry)
                    continue
                else:
                    countdown = position.get(entry.endpoint_id, 0) * interval
                    try:
                        _park(entry, countdown)
                    except ScheduleFull as exc:
                        full.add(None if exc.which == "total" else entry.endpoint_id)
                        kept.append(entry)
                        continue
                    position[entry.endpoint_id] = position.get(entry.endpoint_id, 0) + 1
                    spread = max(spread, countdown)
                sent.append(entry)
        finally:  # also when the broker or Redis fails half-way: what was sent goes
            queue.remove_unchanged({entry.id: entry.dead_lettered_at for entry in sent})
            replayed += sent
    if kept:
        log_event("deadletter.replay_schedule_full", level=logging.WARNING,
                  kept=len(kept), replayed=len(replayed))
    return ReplayOutcome(replayed=replayed, kept=kept, interval=interval, spread=spread,
                         invalid=invalid)



def _published(entry: DeadLetter) -> float | None:
    """The publish time a replay carries: the event's own, so the replayed body is the one
    first sent (entries older than ``enqueued_at`` have the first attempt's time, which was
    the body's ``timestamp`` then)."""
    return entry.enqueued_at or entry.first_attempt_at


def _enqueue(entry: DeadLetter) -> None:
    enqueue_delivery((entry.endpoint_id, entry.event_type, entry.payload),
                     {"event_id": entry.event_id, "enqueued_at": _published(entry),
                      **_ordering(entry)},
                     headers=tracing.replay_headers(entry.first_attempt_span))


def _ordering(entry: DeadLetter) -> dict[str, Any]:
    """An ordered endpoint's dead letter goes back into its key's line in its own place."""
    found = {"ordering_key": entry.ordering_key, "sequence": entry.sequence}
    return {name: value for name, value in found.items() if value is not None}


def _park(entry: DeadLetter, countdown: float) -> None:
    """Put ``entry``'s event in the retry schedule as a first delivery due in ``countdown``."""
    message = build_message(
        publishing_app(), task_name=TASK_NAME, task_id=str(uuid.uuid4()),
        args=[entry.endpoint_id, entry.event_type, entry.payload],
        # The event's own publish time: the body is the one first sent.
        kwargs={"event_id": entry.event_id, "enqueued_at": _published(entry) or time.time(),
                **_ordering(entry)},
        retries=0,
        queue=DELIVERY_QUEUE,
        headers=tracing.replay_headers(entry.first_attempt_span),
    )
    RetrySchedule().park(endpoint_id=entry.endpoint_id, event_id=entry.event_id,
                         countdown=countdown, message=message, last_status=entry.last_status,
                         last_error=f"replay of a dead letter ({entry.reason})")
