"""What makes an event the same event: its id is an idempotency key, bound to its content.

Two sends with one event id (to one endpoint) are one event when their *content* is the same:
the event type and the payload, compared as canonical JSON (keys sorted, compact), so the
order of a dict's keys does not matter. The deadline and the publish time are not content:
they say when and until when to deliver, not what. A different content under a used id is a
conflict (``hookline.EventIdConflict`` at enqueue, dead letter ``conflict`` in the worker).

Also here: the publish time a message carries (``enqueued_at``), which fixes the body's
``timestamp`` once, at publish. Pure: no Redis, no Celery.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from hookline.core.event import MalformedEvent

#: The latest publish time accepted (the last second of year 9999: what ISO 8601 can say).
_MAX_TIME = 253_402_300_799.0


def canonical_json(payload: Any) -> str:
    """``payload`` as canonical JSON: keys sorted, no spaces, non-ASCII kept as it is."""
    try:
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except TypeError:
        # Keys of mixed types (1 and "a") cannot be sorted; JSON turns them all into strings,
        # which is what a worker receives, so compare them as strings too.
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return canonical_json(json.loads(text))


def content_digest(event_type: str, payload: Any) -> str:
    """The digest an event id is bound to: SHA-256 of the event type and the canonical payload
    (hex, 64 characters). Raises like ``json.dumps`` for a payload that is not JSON."""
    digest = hashlib.sha256(event_type.encode("utf-8", "surrogatepass"))
    digest.update(b"\n")
    digest.update(canonical_json(payload).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def publish_time(value: Any) -> float | None:
    """The publish time a message carries (``enqueued_at``, Unix seconds), checked: the body's
    ``timestamp`` is derived from it, so it must be a finite time ISO 8601 can write."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedEvent("enqueued_at", f"enqueued_at must be Unix seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= _MAX_TIME:
        raise MalformedEvent("enqueued_at",
                             f"enqueued_at {value!r} is not a time between 1970 and 9999")
    return float(value)
