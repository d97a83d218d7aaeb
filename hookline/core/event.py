"""What a valid event is: the checks every way in applies (``send_webhook``, the ``deliver``
handle, the worker's task), written once. Pure: no Redis, no Celery."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from hookline.core.errors import HooklineError

#: What an endpoint id may be: it names Redis keys (as a hash tag) and metric labels.
ENDPOINT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Longest event id, characters (it is the webhook-id header and part of Redis keys).
MAX_EVENT_ID_LENGTH = 200
#: Longest event type, characters.
MAX_EVENT_TYPE_LENGTH = 200


class MalformedEvent(HooklineError, ValueError):
    """A task message that can never be delivered as it is."""


def to_timestamp(value: Any, *, name: str) -> float | None:
    """A deadline as Unix seconds from a number, a datetime or an ISO 8601 string."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise MalformedEvent(f"{name} must be a time, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    raise MalformedEvent(f"{name} must be Unix seconds or an ISO 8601 time, got {value!r}")


def validate_event(endpoint_id: Any, event_type: Any, payload: Any, event_id: Any) -> str:
    """Raise :class:`MalformedEvent` saying what is wrong with an event's fields; return the
    payload as compact JSON (what its size is measured on), so a caller serialises it once."""
    if not isinstance(endpoint_id, str) or not ENDPOINT_ID_PATTERN.match(endpoint_id):
        raise MalformedEvent(f"endpoint id {endpoint_id!r} is not a valid endpoint id")
    if not isinstance(event_type, str) or not 0 < len(event_type) <= MAX_EVENT_TYPE_LENGTH:
        raise MalformedEvent(
            f"event type must be a non-empty string of at most {MAX_EVENT_TYPE_LENGTH} characters"
        )
    if not isinstance(event_id, str) or not 0 < len(event_id) <= MAX_EVENT_ID_LENGTH:
        raise MalformedEvent(
            f"event id must be a non-empty string of at most {MAX_EVENT_ID_LENGTH} characters"
        )
    if any(ch.isspace() or not ch.isprintable() for ch in event_id):
        raise MalformedEvent(f"event id {event_id!r} must not contain spaces or control characters")
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MalformedEvent(f"payload is not JSON-serialisable: {exc}") from None
