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
        complete: bool                       # False: the search ran out of its time budget
    find_event(actor, event_id, *, endpoint=None, app=None, budget=None) -> EventReport
    replay_event(actor, endpoint_id, event_id) -> ReplayOutcome   # its dead letter, again
                      # NotReplayable (hookline.service.dead_letters): not a valid event

``EventDelivery`` (``hookline.store.events``) has ``state`` (delivered, dead_lettered with
``dead_letter.reason``, scheduled with ``retry_due``, in_flight, pending) and ``attempts``
(``AttemptRecord``: ``at``, ``status``, ``latency``, ``error``, ``response`` excerpt).
Without ``endpoint`` (and without ``app`` for a published event) the keyspace is searched for
the event, in one pass: with ``budget`` (seconds, the console's) the search stops when it is
spent and the report says it is not ``complete`` (a page answers in bounded time whatever the
number of keys; naming the endpoint or the application is a direct read); without one (the
CLI's) it looks everywhere. On a Redis Cluster the search is never cut short. A scoped actor
sees only its application's endpoints' deliveries and its own published events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from hookline.core.config import settings
from hookline.core.event import recorded_id
from hookline.delivery.replay import ReplayOutcome
from hookline.service import dead_letters
from hookline.service.actor import Actor, NotFound
from hookline.service.dead_letters import NotReplayable as NotReplayable  # re-exported
from hookline.service.endpoints import require_endpoint, require_known_endpoint
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_queue import CONFLICT_SUFFIX, DeadLetter
from hookline.store.endpoints import EndpointRegistry
from hookline.store.events import EventDelivery, EventView
from hookline.store.fanouts import FanoutLog, PublishedEvent
from hookline.store.keys import (
    EVENT_KEY,
    PUBLISHED_KEY,
    dead_letter_shards,
    event_keys_pattern,
    glob_escaped,
    schedule_shards,
)

#: Seconds the console's search for an event through the keyspace may take.
SEARCH_SECONDS = 0.2
#: Keys (or hash fields) Redis looks at per step of the search.
SCAN_COUNT = 2000


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
    #: False: the search through the keyspace stopped at its budget before it had looked
    #: everywhere (what it found is shown; the endpoint or the application reads directly).
    complete: bool = True

    @property
    def found(self) -> bool:
        return bool(self.published or self.deliveries)

    def dead_letters(self) -> list[DeadLetter]:
        """The dead letters a replay from this report would send again (a replay's
        warning, ``dead_letter_selection.blocked_entries``, reads their endpoints)."""
        deliveries = [*self.deliveries,
                      *(delivery for outcome in self.published for delivery in outcome.deliveries)]
        return [delivery.dead_letter for delivery in deliveries
                if delivery.state == "dead_lettered" and delivery.dead_letter is not None]


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


@dataclass
class _Traces:
    """What a search through the keyspace found of one event."""

    endpoints: set[str]
    apps: set[str]
    complete: bool = True


def _search(client: Any, event_id: str, budget: float | None) -> _Traces:
    """Every endpoint with a trace of ``event_id`` (history, done marker, lease, dead letter
    or scheduled retry) and every application it was published to, in one pass through the
    keys (the published records' keys match the endpoints' pattern too) and then through the
    dead-letter and schedule hashes; stopped, not ``complete``, once ``budget`` seconds are
    spent (a plain Redis only: a cluster's keys are scanned node by node, to the end)."""
    if budget is None or isinstance(client, redis.RedisCluster):
        view = EventView(client)
        return _Traces(set(view.endpoints_of(event_id)),
                       {record.app_id for record in FanoutLog(client).find(event_id)})
    deadline = time.monotonic() + budget
    traces = _Traces(set(), set())
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=event_keys_pattern(event_id),
                                    count=SCAN_COUNT)
        for key in found:
            _classify(key, event_id, traces)
        if not cursor:
            break
        if time.monotonic() > deadline:
            traces.complete = False
            return traces
    count = settings().state_shards
    for hash_key in (*(shard.entries for shard in dead_letter_shards(count)),
                     *(shard.meta for shard in schedule_shards(count))):
        cursor = 0
        while True:
            cursor, fields = client.hscan(hash_key, cursor, match=f"*/{glob_escaped(event_id)}*",
                                          count=SCAN_COUNT)
            for entry_id in fields:
                endpoint_id, _, event = entry_id.partition("/")
                if event in (event_id, event_id + CONFLICT_SUFFIX):
                    traces.endpoints.add(endpoint_id)
            if not cursor:
                break
            if time.monotonic() > deadline:
                traces.complete = False
                return traces
    return traces


def _classify(key: str, event_id: str, traces: _Traces) -> None:
    published = PUBLISHED_KEY.match(key)
    if published:
        if published["event"] == event_id:
            traces.apps.add(published["app"])
        return
    match = EVENT_KEY.match(key)
    if match and match["event"] == event_id:
        traces.endpoints.add(match["endpoint"])


def _scope_app(actor: Actor, app: str | None) -> tuple[bool, str | None]:
    """Whether the actor may look for a publication to ``app``, and the application to read
    directly (a scoped actor's own; None: search for it)."""
    if actor.app_scope is not None:
        return app is None or app == actor.app_scope, actor.app_scope
    return True, app


def find_event(actor: Actor, event_id: str, *, endpoint: str | None = None,
               app: str | None = None, budget: float | None = None) -> EventReport:
    """What became of ``event_id``: with ``endpoint``, that endpoint's delivery; else, when
    it was published to an application (``app``, or any: a search), each receiver's; else
    every endpoint with a trace of it (a search, cut short after ``budget`` seconds when
    given). An empty report when nothing is recorded, unless the endpoint or application
    named is not known: then ``NotFound`` says so (a typo, not an event never sent)."""
    report = _report(actor, event_id, endpoint=endpoint, app=app, budget=budget)
    if not report.found and actor.app_scope is None:
        _require_known(endpoint, app)
    return report


def _require_known(endpoint: str | None, app: str | None) -> None:
    """``NotFound`` for an endpoint neither registered nor named by a dead letter, or an
    application that does not exist."""
    if endpoint is not None:
        require_known_endpoint(endpoint, or_named_by=DeadLetterPages().names)
    elif app is not None and AppRegistry().get(app) is None:
        raise NotFound("application", app)


def _report(actor: Actor, event_id: str, *, endpoint: str | None, app: str | None,
            budget: float | None) -> EventReport:
    event_id = recorded_id(event_id)  # an overlong id is recorded by its start and length
    if endpoint is not None and actor.app_scope is not None:
        require_endpoint(actor, endpoint)
    view = EventView()
    if endpoint is not None:
        found = view.delivery(endpoint, event_id)
        return EventReport(event_id=event_id, published=[],
                           deliveries=[found] if _traced(found) else [])
    fanouts = FanoutLog(view.redis)
    allowed, direct = _scope_app(actor, app)
    traces: _Traces | None = None
    if not allowed:
        records: list[PublishedEvent] = []
    elif direct is not None:
        record = fanouts.get(direct, event_id)
        records = [record] if record is not None else []
    else:
        traces = _search(view.redis, event_id, budget)
        records = [record for record in (fanouts.get(found, event_id)
                                         for found in sorted(traces.apps)) if record]
    if records:
        return EventReport(event_id=event_id, deliveries=[], published=[
            PublishedOutcomes(record=record, deliveries=[
                view.delivery(receiver, record.event_id)
                for receiver in _in_scope(actor, list(record.receivers))])
            for record in records], complete=traces.complete if traces else True)
    if traces is None:
        traces = _search(view.redis, event_id, budget)
    endpoint_ids = _in_scope(actor, sorted(traces.endpoints))
    deliveries = [found for found in (view.delivery(endpoint_id, event_id)
                                      for endpoint_id in endpoint_ids) if _traced(found)]
    return EventReport(event_id=event_id, published=[], deliveries=deliveries,
                       complete=traces.complete)


def replay_event(actor: Actor, endpoint_id: str, event_id: str) -> ReplayOutcome:
    """Send the event's dead letter at ``endpoint_id`` again, under the same event id (so the
    same webhook-id), straight onto the queue through the endpoint's gates
    (:func:`hookline.service.dead_letters.replay_one`, audited as ``event.replay``). Only a
    dead-lettered delivery can be replayed: nothing else keeps its payload. ``NotFound``
    when there is no such dead letter (or the endpoint is out of scope), ``NotReplayable``
    when it is not a valid event."""
    entry = dead_letters.replay_one(actor, f"{endpoint_id}/{recorded_id(event_id)}",
                                    audit_as="event.replay")
    return ReplayOutcome(replayed=[entry], kept=[], interval=None, spread=0.0)
