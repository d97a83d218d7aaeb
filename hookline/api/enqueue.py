"""``send_webhook``: validate an event where it enters, then enqueue it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hookline.core import tracing
from hookline.core.errors import EventIdConflict, WebhookInputError
from hookline.core.identity import content_digest
from hookline.core.incoming import checked_webhook
from hookline.core.messages import DELIVERY_QUEUE
from hookline.core.specs import EventSpec
from hookline.delivery.prepared import PreparedEvent, enqueue_prepared, raise_refused
from hookline.delivery.publisher import claims_on_publish
from hookline.store.identity import claims
from hookline.transport.bounded import bounded

if TYPE_CHECKING:  # the registry's module (endpoint validation, signing) is not the web path's
    from hookline.store.endpoints import EndpointRegistry

__all__ = ["EventIdConflict", "EventSpec", "PreparedEvent", "WebhookInputError",
           "enqueue_prepared", "prepare_event", "send_event", "send_webhook"]


@bounded
def prepare_event(spec: EventSpec, *, registry: EndpointRegistry | None = None,
                  bind: bool = True, claim_on_publish: bool = False,
                  copy: bool = True) -> PreparedEvent:
    """The checks of :func:`send_webhook`, without enqueueing; raises
    :class:`WebhookInputError` (:class:`EventIdConflict` for a used id with other content).
    The payload is copied as JSON, so an event enqueued later (on a transaction's commit) is
    the one validated now even if the caller's object changes; ``copy=False`` for an event
    enqueued within the same call (:func:`send_webhook`), whose publish serialises the
    caller's object before returning (a copy would cost a JSON parse of the whole payload).

    One Redis round trip: the endpoint exists, and the event id is free or bound to this
    content; ``bind`` binds a free id now (``False``: only check, for an event that may never
    be enqueued, such as one waiting for a commit; the worker binds it then).
    ``claim_on_publish``: no round trip here; :func:`enqueue_prepared` claims the id in the
    publish (one round trip in all, when the broker is Hookline's own Redis)."""
    event = checked_webhook(spec)
    endpoint_id, event_type = spec.endpoint_id, spec.event_type
    event_id, deadline_ts, ordering_key = event.event_id, event.deadline, event.ordering_key
    size = len(event.text.encode())
    payload = json.loads(event.text) if copy else spec.payload
    digest = content_digest(event_type, payload)
    if claim_on_publish:
        return PreparedEvent(endpoint_id, event_type, payload, event_id, deadline_ts, size,
                             digest, unclaimed=True, ordering_key=ordering_key)
    raise_refused(claims(registry.redis if registry else None).claim(
        endpoint_id, event_id, digest, bind=bind), endpoint_id, event_id)
    return PreparedEvent(endpoint_id, event_type, payload, event_id, deadline_ts, size, digest,
                         ordering_key=ordering_key)


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

    Raises :class:`hookline.RedisUnavailable` when Redis or the broker does not answer within
    ``HOOKLINE_REDIS_TIMEOUT`` or refuses the connection: the event may or may not be queued,
    so send it again with the same ``event_id`` (it is delivered once).
    """
    return send_event(EventSpec(endpoint_id, event_type, payload, event_id, deadline,
                                ordering_key), registry=registry)


def send_event(spec: EventSpec, *, registry: EndpointRegistry | None = None) -> str:
    """:func:`send_webhook` for an event given as one :class:`EventSpec` (how the faces
    pass it on)."""
    # With the broker on Hookline's own Redis (the default), the id is claimed in the publish:
    # one round trip, as a plain .delay() (issue 15); otherwise a claim first, then the publish.
    # Where traces are on, a PRODUCER span whose context the message carries.
    with tracing.producer(DELIVERY_QUEUE, endpoint_id=spec.endpoint_id,
                          event_id=spec.event_id) as span:
        sent = enqueue_prepared(prepare_event(
            spec, registry=registry, claim_on_publish=registry is None and claims_on_publish(),
            copy=False))
        if span is not None:
            span.set_attribute("hookline.event.id", sent)
        return sent
