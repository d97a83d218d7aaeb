"""One event as an operator or a tenant looks it up: each endpoint's outcome and kept
attempts, the fan-out of a published event, and replaying it where it was dead-lettered.

Public API::

    @dataclass(frozen=True)
    class PublishedOutcomes:  record: PublishedEvent; deliveries: list[EventDelivery]
    @dataclass(frozen=True)
    class EventReport:
        event_id: str
        published: list[PublishedOutcomes]   # published to an application: per receiver
        deliveries: list[EventDelivery]      # otherwise: every endpoint with a trace of it
        found: bool                          # property: anything recorded at all
    find_event(actor, event_id, *, endpoint=None, app=None) -> EventReport
    replay_event(actor, endpoint_id, event_id) -> ReplayOutcome   # its dead letter, again

``EventDelivery`` (``hookline.store.events``) has ``state`` (delivered, dead_lettered with
``dead_letter.reason``, scheduled with ``retry_due``, in_flight, pending) and ``attempts``
(``AttemptRecord``: ``at``, ``status``, ``latency``, ``error``, ``response`` excerpt).
Without ``endpoint`` the keyspace is scanned for the event (an operator's look-up). A scoped
actor sees only its application's endpoints' deliveries and its own published events.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookline.core.errors import HooklineError, InvalidField
from hookline.core.event import recorded_id
from hookline.delivery.replay import ReplayOutcome, replay_entries
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.service.endpoints import require_endpoint
from hookline.store.deadletter import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.events import EventDelivery, EventView
from hookline.store.fanouts import FanoutLog, PublishedEvent


class NotReplayable(HooklineError):
    """The dead letter is not a valid event (a ``malformed`` one): replayed, it would only
    be dead-lettered again. The message says what is wrong with it."""


@dataclass(frozen=True)
class PublishedOutcomes:
    """A published event and its receivers' deliveries, in receiver order (``record.cursor``
    of them are enqueued so far)."""

    record: PublishedEvent
    deliveries: list[EventDelivery]


@dataclass(frozen=True)
class EventReport:
    event_id: str
    published: list[PublishedOutcomes]
    deliveries: list[EventDelivery]

    @property
    def found(self) -> bool:
        return bool(self.published or self.deliveries)


def _traced(delivery: EventDelivery) -> bool:
    """Anything recorded of the event at that endpoint."""
    return bool(delivery.attempts or delivery.state != "pending" or delivery.conflict)


def _in_scope(actor: Actor, endpoint_ids: list[str]) -> list[str]:
    """The endpoints a scoped actor may see (its application's, as they are now)."""
    if actor.app_scope is None:
        return endpoint_ids
    registry = EndpointRegistry()
    kept = []
    for endpoint_id in endpoint_ids:
        found = registry.get(endpoint_id)
        if found is not None and found.app == actor.app_scope:
            kept.append(endpoint_id)
    return kept


def _published(actor: Actor, fanouts: FanoutLog, event_id: str,
               app: str | None) -> list[PublishedEvent]:
    if actor.app_scope is not None:
        if app is not None and app != actor.app_scope:
            return []
        app = actor.app_scope
    if app:
        record = fanouts.get(app, event_id)
        return [record] if record is not None else []
    return fanouts.find(event_id)


def find_event(actor: Actor, event_id: str, *, endpoint: str | None = None,
               app: str | None = None) -> EventReport:
    """What became of ``event_id``: with ``endpoint``, that endpoint's delivery; else, when
    it was published to an application (``app``, or any: a scan), each receiver's; else
    every endpoint with a trace of it (a scan). An empty report when nothing is recorded."""
    event_id = recorded_id(event_id)  # an overlong id is recorded by its start and length
    if endpoint is not None and actor.app_scope is not None:
        require_endpoint(actor, endpoint)
    view = EventView()
    if endpoint is None:
        published = _published(actor, FanoutLog(view.redis), event_id, app)
        if published:
            return EventReport(event_id=event_id, deliveries=[], published=[
                PublishedOutcomes(record=record, deliveries=[
                    view.delivery(receiver, record.event_id)
                    for receiver in _in_scope(actor, list(record.receivers))])
                for record in published])
    endpoint_ids = [endpoint] if endpoint else _in_scope(actor, view.endpoints_of(event_id))
    deliveries = [found for found in (view.delivery(endpoint_id, event_id)
                                      for endpoint_id in endpoint_ids) if _traced(found)]
    return EventReport(event_id=event_id, published=[], deliveries=deliveries)


def replay_event(actor: Actor, endpoint_id: str, event_id: str) -> ReplayOutcome:
    """Send the event's dead letter at ``endpoint_id`` again, under the same event id (so the
    same webhook-id), straight onto the queue through the endpoint's gates. Only a
    dead-lettered delivery can be replayed: nothing else keeps its payload. ``NotFound``
    when there is no such dead letter (or the endpoint is out of scope)."""
    actor.require_act(f"replay event {event_id} at {endpoint_id}")
    endpoint = None
    if actor.app_scope is not None:
        endpoint = require_endpoint(actor, endpoint_id)
    queue = DeadLetterQueue()
    entry_id = f"{endpoint_id}/{recorded_id(event_id)}"
    entry = queue.get(entry_id)
    if entry is None:
        raise NotFound("dead letter", entry_id)
    outcome = replay_entries(queue, [entry])
    if outcome.invalid:
        raise NotReplayable(f"dead letter {entry_id!r} cannot be replayed: "
                            f"{outcome.invalid[0][1]}")
    app = endpoint.app if endpoint is not None else _app_of(endpoint_id)
    audit.record(actor, "event.replay", entry_id, app=app)
    return outcome


def _app_of(endpoint_id: str) -> str | None:
    """The application of a dead letter's endpoint, for its audit entry (None: none, gone,
    or an id that was never valid: a malformed delivery's)."""
    try:
        found = EndpointRegistry().get(endpoint_id)
    except InvalidField:
        return None
    return found.app if found is not None else None
