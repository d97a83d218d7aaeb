"""What a listing of the retry schedule shows: a parked retry decoded from its broker message,
the schedule's counts, and the paging the listings read by."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hookline.core.envelope import decode_headed
from hookline.core.tracing import FIRST_ATTEMPT

#: Retries read per page by ``RetrySchedule.scheduled()``.
PAGE = 500


@dataclass(frozen=True)
class ScheduledRetry:
    """A parked retry, decoded from its broker message."""

    id: str
    endpoint_id: str
    event_id: str
    event_type: str
    payload: Any
    due: float
    attempts: int
    first_attempt_at: float | None
    last_status: int | None
    last_error: str
    #: The Celery task id of its message (Flower's task), or "" if the message has none.
    task_id: str = ""
    #: When the event was published (the message's ``enqueued_at``), as the message carries it.
    enqueued_at: Any = None
    #: The span of the event's first attempt, where traces are on (its message's header).
    first_attempt_span: str | None = None


@dataclass(frozen=True)
class ScheduleStats:
    total: int
    by_endpoint: dict[str, int] = field(default_factory=dict)
    #: Unix seconds of the earliest due retry, or None.
    oldest_due: float | None = None
    #: Seconds the earliest retry is overdue (0 when none is): how far behind releasing is.
    lag: float = 0.0


def scheduled_retry(retry_id: str, meta_text: str, message: str,
                     due: float | None) -> ScheduledRetry:
    meta = json.loads(meta_text)
    headers, args, kwargs = decode_headed(message)
    first = headers.get(FIRST_ATTEMPT)
    return ScheduledRetry(
        id=retry_id, endpoint_id=meta["endpoint_id"], event_id=meta["event_id"],
        event_type=args[1] if len(args) > 1 else "",
        payload=args[2] if len(args) > 2 else None,
        due=(due or 0) / 1000.0, attempts=int(kwargs.get("attempts") or 0),
        first_attempt_at=kwargs.get("first_attempt_at"),
        last_status=meta.get("last_status"), last_error=meta.get("last_error") or "",
        task_id=str(headers.get("id") or ""),
        enqueued_at=kwargs.get("enqueued_at"),
        first_attempt_span=first if isinstance(first, str) else None,
    )


def pages(ids: Iterator[str]) -> Iterator[list[str]]:
    """``ids`` in lists of at most ``PAGE``, each id once (a scan may return one twice)."""
    seen: set[str] = set()
    page: list[str] = []
    for retry_id in ids:
        if retry_id in seen:
            continue
        seen.add(retry_id)
        page.append(retry_id)
        if len(page) >= PAGE:
            yield page
            page = []
    if page:
        yield page
