"""``send_webhook``: validate an event where it enters, then enqueue it."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hookline.core.config import settings
from hookline.core.endpoint import UnknownEndpoint
from hookline.core.errors import HooklineError, InvalidField
from hookline.core.event import check_deadline, check_ordering_key, validate_event
from hookline.core.identity import content_digest
from hookline.core.messages import shown_args
from hookline.delivery.publisher import claims_on_publish, enqueue_delivery
from hookline.store.endpoints import EndpointRegistry
from hookline.store.identity import CLAIM_HEADER, Claim, ClaimRefused, claims


class WebhookInputError(HooklineError, ValueError):
    """The event cannot be enqueued as given; the message says why, naming the field
    (:attr:`field`: ``endpoint_id``, ``event_type``, ``payload``, ``event_id`` or
    ``deadline``)."""

    def __init__(self, message: str, field: str = "endpoint_id") -> None:
        super().__init__(message)
        self.field = field


class EventIdConflict(WebhookInputError):
    """The event id was already used for this endpoint with another event type or payload: an
    event id is an idempotency key, so the same id must always carry the same content."""

    def __init__(self, endpoint_id: str, event_id: str) -> None:
        super().__init__(
            f"event id {event_id!r} was already sent to endpoint {endpoint_id!r} with a "
            "different event type or payload: an event id names one event (the same id "
            "with the same content is delivered once); give new content a new id",
            "event_id",
        )
        self.endpoint_id = endpoint_id
        self.event_id = event_id


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
    #: The content digest the event id is bound to (``hookline.core.identity``).
    digest: str = ""
    #: The id is not claimed yet: the publish claims it (``hookline_claim``, claim_push.lua).
    unclaimed: bool = False
    #: An ordered endpoint's line (None: the endpoint's own key).
    ordering_key: str | None = None


def prepare_event(
    endpoint_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    deadline: float | datetime | None = None,
    registry: EndpointRegistry | None = None,
    bind: bool = True,
    claim_on_publish: bool = False,
    ordering_key: str | None = None,
) -> PreparedEvent:
    """The checks of :func:`send_webhook`, without enqueueing; raises
    :class:`WebhookInputError` (:class:`EventIdConflict` for a used id with other content).
    The payload is copied as JSON, so an event enqueued later (on a transaction's commit) is
    the one validated now even if the caller's object changes.

    One Redis round trip: the endpoint exists, and the event id is free or bound to this
    content; ``bind`` binds a free id now (``False``: only check, for an event that may never
    be enqueued, such as one waiting for a commit; the worker binds it then).
    ``claim_on_publish``: no round trip here; :func:`enqueue_prepared` claims the id in the
    publish (one round trip in all, when the broker is Hookline's own Redis)."""
    event_id = str(uuid.uuid4()) if event_id is None else event_id
    try:
        text = validate_event(endpoint_id, event_type, payload, event_id,
                              max_bytes=settings().max_payload_bytes)
        deadline_ts = check_deadline(deadline)
        ordering_key = check_ordering_key(ordering_key)
    except InvalidField as exc:
        raise WebhookInputError(str(exc), exc.field) from None
    size = len(text.encode())
    copy = json.loads(text)
    digest = content_digest(event_type, copy)
    if claim_on_publish:
        return PreparedEvent(endpoint_id, event_type, copy, event_id, deadline_ts, size, digest,
                             unclaimed=True, ordering_key=ordering_key)
    _refused(claims(registry.redis if registry else None).claim(
        endpoint_id, event_id, digest, bind=bind), endpoint_id, event_id)
    return PreparedEvent(endpoint_id, event_type, copy, event_id, deadline_ts, size, digest,
                         ordering_key=ordering_key)


def _refused(claim: Claim, endpoint_id: str, event_id: str) -> None:
    if claim is Claim.MISSING:
        raise WebhookInputError(str(UnknownEndpoint(endpoint_id)))
    if claim is Claim.CONFLICT:
        raise EventIdConflict(endpoint_id, event_id)


def enqueue_prepared(event: PreparedEvent) -> str:
    """Publish a prepared event; the Celery task id is the event id, so Flower finds it. An
    unclaimed event's id is claimed by the publish itself (WebhookInputError or
    EventIdConflict when refused: nothing is enqueued then)."""
    headers = {CLAIM_HEADER: event.digest} if event.unclaimed else {}
    try:
        ordering = {"ordering_key": event.ordering_key} if event.ordering_key else {}
        enqueue_delivery((event.endpoint_id, event.event_type, event.payload),
                         {"event_id": event.event_id, "deadline": event.deadline, **ordering},
                         task_id=event.event_id, headers=headers,
                         argsrepr=shown_args(event.endpoint_id, event.event_type, None,
                                             size=event.size))
    except ClaimRefused as refused:
        _refused(refused.claim, event.endpoint_id, event.event_id)
        raise
    return event.event_id


def send_webhook(
    endpoint_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    deadline: float | datetime | None = None,
    registry: EndpointRegistry | None = None,
    ordering_key: str | None = None,
) -> str:
    """Validate and enqueue one event for one endpoint; returns its event id.

    ``ordering_key``: for an ordered endpoint, the line the event joins (its deliveries go
    out one at a time, in the order enqueued; default: the endpoint's own line). Ignored by
    an endpoint that is not ordered.

    Raises :class:`WebhookInputError` (unknown endpoint, non-JSON payload, payload over
    ``HOOKLINE_MAX_PAYLOAD_BYTES``, bad event id or deadline) instead of enqueueing bad input,
    and :class:`EventIdConflict` (a ``WebhookInputError``) when ``event_id`` was used for this
    endpoint with another event type or payload. The same id with the same content is
    enqueued again and delivered once.
    """
    # With the broker on Hookline's own Redis (the default), the id is claimed in the publish:
    # one round trip, as a plain .delay() (issue 15); otherwise a claim first, then the publish.
    return enqueue_prepared(prepare_event(
        endpoint_id, event_type, payload, event_id, deadline=deadline, registry=registry,
        claim_on_publish=registry is None and claims_on_publish(), ordering_key=ordering_key))
