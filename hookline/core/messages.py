"""The wire contract between the processes that publish deliveries and the workers that run
them: the task's name, its queues, its argument layout and the headers every delivery carries.

A web process publishes by this name (``hookline.api.enqueue``), so it never imports the worker's
task module; the broker's consume script reads the headers to hold back deliveries to held
endpoints without a worker decoding the body. Pure: no Celery, no Redis.
"""

from __future__ import annotations

import json
import time
from typing import Any

from hookline.core.event import EVENT_ID_PATTERN, MAX_KEPT_DEPTH, nested_deeper_than

#: The Celery task name of one delivery.
TASK_NAME = "hookline.deliver"
#: The Celery task name of a fan-out: it enqueues one delivery per receiver of a published
#: event (``hookline.publish``); its arguments are ``(app_id, event_id)``, ids only.
FANOUT_TASK_NAME = "hookline.fanout"
#: Queue of first deliveries.
DELIVERY_QUEUE = "hookline"
#: Queue of retries, kept apart so a failing endpoint's retries never wait in front of, or
#: behind, other endpoints' first deliveries.
RETRY_QUEUE = "hookline.retry"
#: Every queue a worker consumes (``celery -A app worker`` with no ``-Q``).
QUEUES = (DELIVERY_QUEUE, RETRY_QUEUE)

#: Positional arguments of a delivery: ``(endpoint_id, event_type, payload)``. Keyword
#: arguments: ``event_id``, ``deadline`` (the caller's), then Hookline's bookkeeping:
#: ``attempts``, ``first_attempt_at``, ``rate_slot``, ``enqueued_at``.
POSITIONAL = ("endpoint_id", "event_type", "payload")
KEYWORDS = ("event_id", "deadline", "attempts", "first_attempt_at", "rate_slot", "enqueued_at")


def delivery_headers(args: Any, kwargs: Any, task_id: Any) -> dict[str, str]:
    """Headers naming a delivery's endpoint and event, so the broker's consume script can park
    a delivery to a held endpoint without a worker decoding the body (consume.lua).
    Empty when the arguments are not those of a delivery (the worker then dead-letters it)."""
    endpoint_id = args[0] if isinstance(args, list | tuple) and args else None
    event_id = (kwargs.get("event_id") if isinstance(kwargs, dict) else None) or task_id
    if not (isinstance(endpoint_id, str) and isinstance(event_id, str)):
        return {}
    headers = {"hookline_endpoint": endpoint_id, "hookline_event": event_id}
    if not isinstance(kwargs, dict):
        return headers
    # An ordered endpoint's line (consume.lua): the event's ordering key, and its place in
    # the key's line once it has one (a replay keeps it).
    ordering_key = kwargs.get("ordering_key")
    if isinstance(ordering_key, str) and EVENT_ID_PATTERN.match(ordering_key):
        headers["hookline_okey"] = ordering_key  # (an invalid one: the worker dead-letters it)
    sequence = kwargs.get("sequence")
    if isinstance(sequence, int) and not isinstance(sequence, bool) and sequence > 0:
        headers["hookline_seq"] = str(sequence)
    # Since when it waits (first attempted, else published; Unix seconds): a delivery held
    # behind a failing endpoint goes to a worker, which dead-letters it, past its max age.
    since = kwargs.get("first_attempt_at") or kwargs.get("enqueued_at")
    if isinstance(since, int | float) and not isinstance(since, bool) and since > 0:
        headers["hookline_since"] = str(int(since))
    return headers


def stamped(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the publish time (``enqueued_at``) set if it is not yet: the delivery
    lag metric counts the wait in the queue too."""
    if kwargs.get("enqueued_at") is None:
        return {**kwargs, "enqueued_at": time.time()}
    return kwargs


def payload_size(payload: Any) -> int | None:
    """Bytes of ``payload`` as compact JSON, or None if it is not JSON (nested too deep,
    not serialisable, not UTF-8): the worker will dead-letter it, this only describes it."""
    if nested_deeper_than(payload, MAX_KEPT_DEPTH):
        return None
    try:
        return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return None


def shown_args(endpoint_id: str, event_type: str, payload: Any, *,
               size: int | None = None) -> str:
    """What Flower and the worker's log show as the task's arguments: the endpoint and event
    type, and the payload's size (``size`` when the caller measured it already), not its
    content (it may hold personal data)."""
    size = payload_size(payload) if size is None else size
    described = "not valid JSON" if size is None else f"{size} bytes"
    return repr((endpoint_id, event_type, f"<payload: {described}>"))


#: Longest text of one argument Flower is shown (an id or an event type; longer is cut).
SHOWN_TEXT = 100


def _shown_payload(payload: Any) -> str:
    size = payload_size(payload)  # never raises: None when it is not JSON
    return f"<payload: {type(payload).__name__}, not JSON>" if size is None else (
        f"<payload: {size} bytes>")


def _shown_value(value: Any) -> Any:
    """An id, a type, a number or None as it is (text cut at ``SHOWN_TEXT``); anything else
    by its type only: a malformed message's argument may be the payload itself."""
    if isinstance(value, str):
        return value if len(value) <= SHOWN_TEXT else value[:SHOWN_TEXT] + "..."
    if value is None or isinstance(value, bool | int | float):
        return value
    return f"<{type(value).__name__}>"


def shown_positional(args: Any) -> str:
    """``argsrepr`` of a delivery, for Flower's task events and the worker's log: the payload
    (third argument) as its size, ids and the event type as they are, anything unexpected by
    its type. Never raises."""
    if not isinstance(args, list | tuple):
        return repr((f"<{type(args).__name__}>",))  # not a delivery's: may be the payload
    positional = list(args)
    return repr(tuple(_shown_payload(value) if index == 2 else _shown_value(value)
                      for index, value in enumerate(positional)))


def shown_keywords(kwargs: Any) -> str:
    """``kwargsrepr`` of a delivery: ``payload=`` as its size, the event id, deadline and
    Hookline's bookkeeping as they are, anything unexpected by its type. Never raises."""
    if not isinstance(kwargs, dict):
        return repr(f"<{type(kwargs).__name__}>")
    named = kwargs
    return repr({str(key): _shown_payload(value) if key == "payload" else _shown_value(value)
                 for key, value in named.items()})
