"""``send_webhook``: validate an event where it enters, then enqueue it."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from app.config import settings
from app.delivery import MalformedEvent, to_timestamp, validate_event
from app.endpoints import EndpointRegistry, UnknownEndpoint


class WebhookInputError(ValueError):
    """The event cannot be enqueued as given; the message says why."""


def send_webhook(
    endpoint_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    deadline: float | datetime | None = None,
    registry: EndpointRegistry | None = None,
) -> str:
    """Validate and enqueue one event for one endpoint; returns its event id.

    Raises :class:`WebhookInputError` (unknown endpoint, non-JSON payload, payload over
    ``HOOKLINE_MAX_PAYLOAD_BYTES``, bad event id or deadline) instead of enqueueing bad input.
    """
    from tasks.webhooks import deliver  # the task module imports app.*; import it late

    event_id = event_id or str(uuid.uuid4())
    try:
        validate_event(endpoint_id, event_type, payload, event_id)
        deadline_ts = to_timestamp(deadline, name="deadline")
    except MalformedEvent as exc:
        raise WebhookInputError(str(exc)) from None
    size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    limit = settings().max_payload_bytes
    if size > limit:
        raise WebhookInputError(
            f"payload is {size} bytes; the limit is {limit} (HOOKLINE_MAX_PAYLOAD_BYTES)"
        )
    try:
        (registry or EndpointRegistry()).require(endpoint_id)
    except UnknownEndpoint as exc:
        raise WebhookInputError(str(exc)) from None
    deliver.apply_async(
        args=(endpoint_id, event_type, payload),
        kwargs={"event_id": event_id, "deadline": deadline_ts},
        task_id=event_id,  # Flower then finds the task by its event id
    )
    return event_id
