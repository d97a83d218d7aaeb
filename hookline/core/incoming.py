"""An event checked where it comes in, with no Redis: what ``send_webhook``, ``publish``, the
on-commit helpers and the outbox's writers all check first. Each field's problem is a
``WebhookInputError`` naming the field; the payload is kept as the compact JSON it was
measured as, so what is published later is what was checked now."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hookline.core.config import settings
from hookline.core.errors import InvalidField, WebhookInputError
from hookline.core.event import (
    check_deadline,
    check_event_id,
    check_event_type,
    check_ordering_key,
    check_payload,
    validate_event,
)
from hookline.core.specs import EventSpec, PublicationSpec
from hookline.core.subscriptions import MAX_EVENT_CHANNELS, check_app_id, parse_channels


@dataclass(frozen=True)
class CheckedEvent:
    """An event whose fields passed their checks."""

    event_id: str
    event_type: str
    #: The payload as compact JSON.
    text: str
    deadline: float | None
    ordering_key: str | None
    #: A publication's channels (None: a webhook's, or none given).
    channels: tuple[str, ...] | None = None


def checked_webhook(spec: EventSpec) -> CheckedEvent:
    """``send_webhook``'s checks that need no Redis; a missing ``event_id`` is drawn."""
    event_id = str(uuid.uuid4()) if spec.event_id is None else spec.event_id
    try:
        text = validate_event(spec.endpoint_id, spec.event_type, spec.payload, event_id,
                              max_bytes=settings().max_payload_bytes)
        return CheckedEvent(event_id, spec.event_type, text, check_deadline(spec.deadline),
                            check_ordering_key(spec.ordering_key))
    except InvalidField as exc:
        raise WebhookInputError(str(exc), exc.field) from None


def checked_publication(spec: PublicationSpec) -> CheckedEvent:
    """``publish``'s checks that need no Redis (the application's existence, the catalog and
    the schemas are its own); a missing ``event_id`` is drawn."""
    event_id = str(uuid.uuid4()) if spec.event_id is None else spec.event_id
    try:
        check_app_id(spec.app_id)
        check_event_type(spec.event_type)
        check_event_id(event_id)
        text = check_payload(spec.payload, max_bytes=settings().max_payload_bytes)
        listed = parse_channels(list(spec.channels) if spec.channels is not None else None,
                                limit=MAX_EVENT_CHANNELS)
        return CheckedEvent(event_id, spec.event_type, text, check_deadline(spec.deadline),
                            check_ordering_key(spec.ordering_key), listed)
    except InvalidField as exc:
        raise WebhookInputError(str(exc), exc.field) from None
