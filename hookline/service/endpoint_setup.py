"""What the console's and the portal's endpoint forms offer and do: subscriptions picked from
the event catalog, a new URL, a test event, and the application's name for the portal.

Public API (the actor first; ``ReadOnly`` for a read-only actor before anything changes, then
``NotFound`` for an endpoint that does not exist or is outside ``actor.app_scope``; each change
is one audit entry)::

    TEST_EVENT_TYPE = "hookline:test"
    sample_payload(endpoint_id, sent_by) -> dict            # the sample payload
    subscription_choices(actor) -> SubscriptionChoices    # the catalog's types (or none)
    picked_types(picked, *, current=()) -> tuple[str, ...]   # () for every type
    set_subscriptions(actor, endpoint_id, picked) -> EndpointSummary
    add_endpoint(actor, endpoint_id, url, picked, **options) -> AddedEndpoint
    change_url(actor, endpoint_id, url) -> EndpointSummary
    send_test_event(actor, endpoint_id) -> str            # the event id
    test_event_outcome(actor, endpoint_id, event_id) -> EventDelivery
    app_name(actor) -> str                                # a scoped actor's application

Subscriptions: ``"*"`` among the picked types is every type (no filter); otherwise each must be
a type of the catalog, or a pattern the endpoint has already (``order.*``, set by the CLI: the
form shows it, ticked, so saving the form keeps it). Once the catalog is empty there is nothing
to pick from: the face offers free text, checked by the registry's rules.

The test event is sent to one endpoint through the normal pipeline (``send_webhook``'s checks,
the delivery queue, the worker's signing, retries and dead letters), whatever its
subscriptions, as type :data:`TEST_EVENT_TYPE`: the colon is refused in a catalog type and a
filter pattern, so no application's own type can be it and only ``*`` matches it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Unpack

from hookline.core.errors import InvalidField
from hookline.core.event import recorded_id
from hookline.core.identity import content_digest
from hookline.core.incoming import checked_webhook
from hookline.core.specs import EndpointSpec, EventSpec
from hookline.core.subscriptions import FILTER_PATTERN
from hookline.delivery.prepared import PreparedEvent, enqueue_prepared, raise_refused
from hookline.service import audit, endpoint_actions
from hookline.service.actor import Actor
from hookline.service.endpoints import EndpointSummary, require_endpoint
from hookline.store.apps import AppRegistry
from hookline.store.catalog import EventCatalog
from hookline.store.events import EventDelivery, EventView
from hookline.store.identity import claims

#: The test event's type (see the module's docstring).
TEST_EVENT_TYPE = "hookline:test"
#: The pick that means every event type, current and future.
EVERY_TYPE = "*"


@dataclass(frozen=True)
class SubscriptionChoices:
    """What a subscription form offers: the catalog's type names, sorted (empty: the
    catalog is not in use, the form takes free text)."""

    types: tuple[str, ...]

    def offered(self, current: Sequence[str]) -> list[str]:
        """The check boxes of a form for an endpoint subscribed to ``current``: the catalog's
        types, then its own patterns the catalog does not list (kept while ticked)."""
        return [*self.types, *(item for item in current
                               if item != EVERY_TYPE and item not in self.types)]


def sample_payload(endpoint_id: str, sent_by: str) -> dict[str, Any]:
    """The test event's payload: what it is, for which endpoint, who sent it and when."""
    return {"test": True, "endpoint_id": endpoint_id, "sent_by": sent_by,
            "sent_at": datetime.now(tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "message": "A test event from Hookline: nothing happened, answer 2xx to confirm "
                       "that this endpoint receives and verifies webhooks."}


def subscription_choices(actor: Actor) -> SubscriptionChoices:
    """The catalog's types (every actor may read the catalog)."""
    return SubscriptionChoices(types=tuple(EventCatalog().names()))


def picked_types(picked: Sequence[str], *, current: Sequence[str] = (),
                 catalog: Sequence[str] | None = None) -> tuple[str, ...]:
    """The filter the picked check boxes make: ``()`` (every type) when :data:`EVERY_TYPE`
    is among them; else each must be a type of the catalog (``catalog``; None: read it) or
    one of the endpoint's ``current`` patterns. Nothing picked is refused: an endpoint that
    should receive nothing is disabled, not subscribed to nothing."""
    chosen = [item.strip() for item in picked if item.strip()]
    if not chosen:
        raise InvalidField("event_types", "pick at least one event type, or every event type")
    if EVERY_TYPE in chosen:
        return ()
    names = set(EventCatalog().names() if catalog is None else catalog)
    for item in chosen:
        if names and item not in names and item not in current:
            shown = item if len(item) <= 60 else item[:60] + "..."
            raise InvalidField("event_types", f"event type {shown!r} is not in the event "
                               "catalog: pick one of the catalog's types")
        if not FILTER_PATTERN.match(item):
            raise InvalidField("event_types", f"event type {item[:60]!r} is not a type name "
                               "(letters, digits, '_' and '-' in dot-separated segments)")
    return tuple(dict.fromkeys(chosen))


def set_subscriptions(actor: Actor, endpoint_id: str, picked: Sequence[str]) -> EndpointSummary:
    """Subscribe the endpoint to the picked types (:func:`picked_types`)."""
    actor.require_act(f"update endpoint {endpoint_id}")
    endpoint = require_endpoint(actor, endpoint_id)
    types = picked_types(picked, current=endpoint.event_types)
    return endpoint_actions.update_endpoint(actor, endpoint_id,
                                            event_types=types or "none").summary


def add_endpoint(actor: Actor, endpoint_id: str, url: str, picked: Sequence[str], *,
                 signature: str | None = None,
                 **spec: Unpack[EndpointSpec]) -> endpoint_actions.AddedEndpoint:
    """Add an endpoint subscribed to the picked types (:func:`picked_types`), with the other
    settings of ``spec`` and ``signature`` (``endpoint_actions.add_endpoint``'s)."""
    actor.require_act(f"add endpoint {endpoint_id}")
    subscribed: EndpointSpec = {**spec, "event_types": picked_types(picked) or None}
    return endpoint_actions.add_endpoint(actor, endpoint_id, url, signature=signature,
                                         **subscribed)


def change_url(actor: Actor, endpoint_id: str, url: str) -> EndpointSummary:
    """Point the endpoint at ``url``: the checks of ``hookline endpoint update --url`` (the
    URL's form and the SSRF rules), audited as an update of its url (never the URL itself,
    which may carry a token)."""
    if not url.strip():
        raise InvalidField("url", "give the endpoint's new URL (http or https)")
    return endpoint_actions.update_endpoint(actor, endpoint_id, url=url.strip()).summary


def send_test_event(actor: Actor, endpoint_id: str) -> str:
    """Send a test event to the endpoint, as ``send_webhook`` does (enabled or not: a
    disabled endpoint dead-letters it, and the page says why); returns its event id."""
    actor.require_act(f"send a test event to {endpoint_id}")
    endpoint = require_endpoint(actor, endpoint_id)
    event = checked_webhook(EventSpec(endpoint.id, TEST_EVENT_TYPE,
                                      sample_payload(endpoint.id, actor.name),
                                      f"test_{uuid.uuid4().hex}"))
    payload = json.loads(event.text)
    prepared = PreparedEvent(endpoint.id, TEST_EVENT_TYPE, payload, event.event_id, None,
                             len(event.text.encode()), content_digest(TEST_EVENT_TYPE, payload))
    raise_refused(claims().claim(endpoint.id, event.event_id, prepared.digest, bind=True),
                  endpoint.id, event.event_id)
    enqueue_prepared(prepared)
    audit.record(actor, "endpoint.test_event", endpoint.id, f"event {event.event_id}",
                 app=endpoint.app)
    return event.event_id


def test_event_outcome(actor: Actor, endpoint_id: str, event_id: str) -> EventDelivery:
    """What became of an event at the endpoint: its state and attempts (pending until a
    worker takes it)."""
    endpoint = require_endpoint(actor, endpoint_id)
    return EventView().delivery(endpoint.id, recorded_id(event_id))


def app_name(actor: Actor) -> str:
    """The name of the scoped actor's application for people (its id when it has none)."""
    app_id = actor.app_scope or ""
    found = AppRegistry().get(app_id) if app_id else None
    return (found.name if found is not None and found.name else app_id)
