"""``send_webhook``: validate an event where it enters, then enqueue it."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hookline.core.config import settings
from hookline.core.errors import HooklineError, InvalidField
from hookline.core.event import check_deadline, validate_event
from hookline.core.messages import shown_args
from hookline.delivery.publisher import publish
from hookline.store.endpoints import EndpointRegistry, UnknownEndpoint


class WebhookInputError(HooklineError, ValueError):
    """The event cannot be enqueued as given; the message says why, naming the field
    (:attr:`field`: ``endpoint_id``, ``event_type``, ``payload``, ``event_id`` or
    ``deadline``)."""

    def __init__(self, message: str, field: str = "endpoint_id") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class PreparedEvent:
    """An event that passed :func:`send_webhook`'s checks, ready to be enqueued as it is."""

    endpoint_id: str
    event_type: str
    payload: Any
    event_id: str
    deadline: float | None
    #: Bytes of the payload as compact JSON (measured once, shown in Flower).
    size: int


def prepare_event(
    endpoint_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    deadline: float | datetime | None = None,
    registry: EndpointRegistry | None = None,
) -> PreparedEvent:
    """The checks of :func:`send_webhook`, without enqueueing; raises
    :class:`WebhookInputError`. The payload is copied as JSON, so an event enqueued later (on
    a transaction's commit) is the one validated now even if the caller's object changes."""
    event_id = str(uuid.uuid4()) if event_id is None else event_id
    try:
        text = validate_event(endpoint_id, event_type, payload, event_id,
                              max_bytes=settings().max_payload_bytes)
        deadline_ts = check_deadline(deadline)
    except InvalidField as exc:
        raise WebhookInputError(str(exc), exc.field) from None
    size = len(text.encode())
    try:
        (registry or EndpointRegistry()).require(endpoint_id)
    except UnknownEndpoint as exc:
        raise WebhookInputError(str(exc)) from None
    return PreparedEvent(endpoint_id, event_type, json.loads(text), event_id, deadline_ts, size)


def enqueue_prepared(event: PreparedEvent) -> str:
    """Publish a prepared event; the Celery task id is the event id, so Flower finds it."""
    publish((event.endpoint_id, event.event_type, event.payload),
            {"event_id": event.event_id, "deadline": event.deadline}, task_id=event.event_id,
            argsrepr=shown_args(event.endpoint_id, event.event_type, None, size=event.size))
    return event.event_id


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
    return enqueue_prepared(prepare_event(endpoint_id, event_type, payload, event_id,
                                          deadline=deadline, registry=registry))
