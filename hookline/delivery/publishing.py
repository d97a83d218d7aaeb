"""``hookline.publish``: one event for an application, delivered to each of its endpoints that
subscribed to it (``hookline.core.subscriptions``), with the same webhook-id everywhere.

Publishing checks the event (the type against the event catalog and its schema, the payload,
the channels, the deadline), fixes the receivers (the application's enabled endpoints whose
subscription matches, now: an endpoint added or changed later does not receive this event),
records the event and its fan-out in one atomic script, and enqueues one ``hookline.fanout``
task, which enqueues the deliveries (``hookline.delivery.fanout``). A constant number of Redis
round trips, however many endpoints the application has.

The event id is the idempotency key of the whole fan-out: publishing it again with the same
content records and delivers nothing new (a fan-out that had not finished is resumed); with
other content it is refused (:class:`PublishedEventConflict`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from hookline.core import tracing
from hookline.core.errors import WebhookInputError
from hookline.core.identity import content_digest
from hookline.core.incoming import checked_publication
from hookline.core.messages import DELIVERY_QUEUE
from hookline.core.schemas import first_violation
from hookline.core.specs import PublicationSpec
from hookline.delivery.fanout import FANOUT_LOOK_AFTER, enqueue_fanout, enqueue_lined
from hookline.store.apps import unknown_app_message
from hookline.store.catalog import EventCatalog
from hookline.store.endpoints import EndpointRegistry
from hookline.store.fanouts import FanoutLog, PublishedEvent, Recorded
from hookline.transport.bounded import bounded


class UnknownApplication(WebhookInputError):
    def __init__(self, app_id: str) -> None:
        super().__init__(unknown_app_message(app_id), "app_id")
        self.app_id = app_id


class SchemaViolation(WebhookInputError):
    """The payload breaks its event type's JSON Schema; :attr:`path` is where (JSONPath)."""

    def __init__(self, event_type: str, path: str, problem: str) -> None:
        super().__init__(f"payload does not match the schema of event type {event_type!r}: "
                         f"{path}: {problem}", "payload")
        self.path = path


class PublishedEventConflict(WebhookInputError):
    """The event id was published to this application with another type, payload or
    channels: an event id names one event."""

    def __init__(self, app_id: str, event_id: str) -> None:
        super().__init__(
            f"event id {event_id!r} was already published to application {app_id!r} with a "
            "different event type, payload or channels: an event id names one event "
            "(publishing the same content again delivers nothing new); give new content a "
            "new id", "event_id")
        self.app_id = app_id
        self.event_id = event_id


@bounded
def publish(app_id: str, event_type: str, payload: Any, event_id: str | None = None,
            channels: Iterable[str] | None = None,
            deadline: float | datetime | None = None,
            ordering_key: str | None = None) -> str:
    """Deliver an event to every enabled endpoint of application ``app_id`` whose subscription
    matches it; returns the event id (the ``webhook-id`` each endpoint receives).

    Raises :class:`WebhookInputError` for bad input: an unknown application, an event type
    that is ill-formed or (once the catalog is in use) not in the event catalog, a payload
    that is not JSON, too large or breaks its type's schema (:class:`SchemaViolation`, naming
    the path), bad channels or deadline; :class:`PublishedEventConflict` for a used event id
    with other content. Returns once the fan-out is recorded and queued: if it raises for
    any other reason (:class:`hookline.RedisUnavailable`: Redis or the broker did not answer
    within ``HOOKLINE_REDIS_TIMEOUT`` or refused the connection), publish again with the same
    event id: the receivers get each delivery once.

    ``ordering_key``: the line the event joins at ordered endpoints (default: each endpoint's
    own line). Their deliveries are enqueued in this call, before it returns, so each joins
    its key's line in publish order; the other endpoints' go through the fan-out task.

    Where traces are on, a PRODUCER span whose context the fan-out's messages carry."""
    with tracing.producer(DELIVERY_QUEUE, app_id=app_id, event_id=event_id) as span:
        published = _publish(PublicationSpec(app_id, event_type, payload, event_id, channels,
                                             deadline, ordering_key))
        if span is not None:
            span.set_attribute("hookline.event.id", published)
        return published


def _publish(spec: PublicationSpec) -> str:
    checked = checked_publication(spec)
    app_id, event_type = spec.app_id, spec.event_type
    event_id, text, listed = checked.event_id, checked.text, checked.channels or ()
    deadline_ts, ordering_key = checked.deadline, checked.ordering_key
    registry = EndpointRegistry()
    _check_catalog(registry.redis, event_type, json.loads(text))
    receivers, lined = registry.receivers(app_id, event_type, listed)
    # No receivers: the fan-out has ended already, so the payload is not kept.
    event = PublishedEvent(app_id=app_id, event_id=event_id, event_type=event_type,
                           payload=text if receivers or lined else None, channels=listed,
                           deadline=deadline_ts, receivers=tuple(receivers), cursor=0,
                           published_at=time.time(), finished_at=None,
                           ordering_key=ordering_key, lined=tuple(lined))
    fanouts = FanoutLog(registry.redis)
    # Marked first: a publisher that dies after recording the event and before queueing its
    # fan-out leaves it to a worker's releaser (hookline.delivery.fanout.sweep_fanouts).
    fanouts.mark_pending(app_id, event_id, time.time() + FANOUT_LOOK_AFTER)
    outcome = fanouts.record(event, _digest(event_type, text, listed))
    if outcome.result is Recorded.MISSING:
        fanouts.forget_pending(app_id, event_id)
        raise UnknownApplication(app_id)
    if outcome.result is Recorded.CONFLICT:  # the earlier publication's mark stays
        raise PublishedEventConflict(app_id, event_id)
    if outcome.result is Recorded.NEW and lined:
        enqueue_lined(fanouts, event, json.loads(text), len(text.encode()))
    if outcome.cursor < outcome.total:  # new, or a fan-out that had not finished: resume it
        enqueue_fanout(app_id, event_id)
    else:
        fanouts.forget_pending(app_id, event_id)  # no receivers, or finished long ago
    return event_id


def _check_catalog(redis_client: Any, event_type: str, payload: Any) -> None:
    """Once the catalog holds any type, the event's type must be one of them; a type with a
    schema checks the payload (one round trip)."""
    in_use, entry = EventCatalog(redis_client).lookup(event_type)
    if not in_use:
        return
    if entry is None:
        raise WebhookInputError(f"event type {event_type!r} is not in the event catalog: "
                                "register it with 'hookline event-type add' (see 'hookline "
                                "event-type list')", "event_type")
    found = first_violation(entry.schema, payload) if entry.schema else None
    if found:
        raise SchemaViolation(event_type, *found)


def _digest(event_type: str, text: str, channels: tuple[str, ...]) -> str:
    """The content of a published event: its type and payload (as an event id's content
    everywhere, ``hookline.core.identity``) and its channels, which choose the receivers."""
    digest = hashlib.sha256(content_digest(event_type, json.loads(text)).encode())
    digest.update(json.dumps(sorted(channels)).encode())
    return digest.hexdigest()


__all__ = ["PublishedEventConflict", "SchemaViolation", "UnknownApplication", "publish"]
