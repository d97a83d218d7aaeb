"""An outbox row: an event checked where it is written, kept in the host's database until the
relay publishes it. Writing one touches neither Redis nor Celery: what needs Redis (the endpoint
or application exists, the event id is free) is checked by the relay, and a refusal there ends
as a dead letter with its reason."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from hookline.core import tracing
from hookline.core.identity import content_digest
from hookline.core.incoming import checked_publication, checked_webhook
from hookline.core.specs import EventSpec, PublicationSpec

#: The table's name, the same for Django's model, SQLAlchemy's table and the relay's SQL.
TABLE = "hookline_outbox"
#: Longest ``line``: a target (``e:`` or ``a:`` and an id of up to 64) and an ordering key.
LINE_LENGTH = 300


@dataclass(frozen=True)
class OutboxRow:
    """One event waiting for the relay: for one endpoint (``send_webhook``) or for an
    application's subscribers (``publish``: ``app_id`` and ``channels``)."""

    event_id: str
    event_type: str
    #: The payload as compact JSON: the bytes checked here are the bytes published.
    payload: str
    #: What the event id is bound to (``hookline.core.identity``).
    digest: str
    endpoint_id: str | None = None
    app_id: str | None = None
    #: The channels as a JSON list (publish only).
    channels: str | None = None
    deadline: float | None = None
    ordering_key: str | None = None
    #: When the relay may take it (Unix seconds).
    due_at: float = 0.0
    #: The trace it was written in (W3C ``traceparent``; None where traces are off): the
    #: relay's publish and the deliveries join it.
    traceparent: str | None = None

    @property
    def line(self) -> str:
        """Rows of one line leave in the order they were written: an endpoint's (or an
        application's) ordering key, or its own line."""
        target = f"e:{self.endpoint_id}" if self.endpoint_id else f"a:{self.app_id}"
        return f"{target}\n{self.ordering_key or ''}"

    def values(self) -> dict[str, Any]:
        """Column -> value, for an insert."""
        return {"due_at": self.due_at, "line": self.line, "endpoint_id": self.endpoint_id,
                "app_id": self.app_id, "channels": self.channels, "event_id": self.event_id,
                "event_type": self.event_type, "payload": self.payload, "digest": self.digest,
                "deadline": self.deadline, "ordering_key": self.ordering_key,
                **({"traceparent": self.traceparent} if self.traceparent else {})}


def webhook_row(spec: EventSpec) -> OutboxRow:
    """``send_webhook``'s event as a row, checked as it checks (``WebhookInputError`` naming
    the field) except for what needs Redis."""
    event = checked_webhook(spec)
    with tracing.producer(TABLE, endpoint_id=spec.endpoint_id, event_id=event.event_id):
        return OutboxRow(event.event_id, spec.event_type, event.text,
                         content_digest(spec.event_type, json.loads(event.text)),
                         endpoint_id=spec.endpoint_id, deadline=event.deadline,
                         ordering_key=event.ordering_key, due_at=time.time(),
                         traceparent=tracing.traceparent())


def publication_row(spec: PublicationSpec) -> OutboxRow:
    """``publish``'s event as a row, checked as far as it can be without Redis (the
    application, the catalog and the schemas are the relay's)."""
    event = checked_publication(spec)
    with tracing.producer(TABLE, app_id=spec.app_id, event_id=event.event_id):
        return OutboxRow(event.event_id, spec.event_type, event.text,
                         content_digest(spec.event_type, json.loads(event.text)),
                         app_id=spec.app_id,
                         channels=None if spec.channels is None else json.dumps(event.channels),
                         deadline=event.deadline, ordering_key=event.ordering_key,
                         due_at=time.time(), traceparent=tracing.traceparent())
