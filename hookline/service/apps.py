"""Applications (a customer or tenant whose endpoints receive what is published to it) and
the event catalog, as an operator or a tenant sees and changes them.

Public API::

    @dataclass(frozen=True)
    class AppListing:  app: App; endpoints: int
    @dataclass(frozen=True)
    class AppDetail:   app: App; endpoints: list[EndpointSummary]
    list_apps(actor) -> list[AppListing]           # a scoped actor: its own only
    apps_page(actor, *, cursor=None, limit=50) -> Page[AppListing]   # a face's, by id
    app_detail(actor, app_id) -> AppDetail         # NotFound out of scope
    add_app(actor, app_id, *, name=None, description=None) -> App      # unscoped only
    remove_app(actor, app_id) -> None              # refused while endpoints belong to it
    list_event_types(actor) -> list[EventType]
    event_type(actor, name) -> EventType
    add_event_type(actor, name, *, schema=None, description=None) -> EventType  # unscoped
    remove_event_type(actor, name) -> None         # unscoped

A tenant (scoped actor) reads its own application and the catalog, and changes neither:
applications and event types are the operator's (NotFound for another application,
ReadOnly for a change, whatever its ``can_act``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookline.core.errors import InvalidField
from hookline.service import audit
from hookline.service.actor import Actor, NotFound, ReadOnly
from hookline.service.endpoints import EndpointSummary, all_endpoints
from hookline.service.pages import Page, bounded_limit
from hookline.store import keys
from hookline.store.apps import App, AppRegistry, UnknownApplication
from hookline.store.catalog import EventCatalog, EventType


@dataclass(frozen=True)
class AppListing:
    app: App
    #: How many endpoints belong to it: the size of its endpoint index (SCARD, no endpoint
    #: read; one being moved to another application may count for a moment).
    endpoints: int


@dataclass(frozen=True)
class AppDetail:
    app: App
    endpoints: list[EndpointSummary]


def _operator_only(actor: Actor, action: str) -> None:
    """Applications and the catalog are the operator's: a tenant cannot change them."""
    actor.require_act(action)
    if actor.app_scope is not None:
        raise ReadOnly(actor.name, action)


def _require_app(actor: Actor, registry: AppRegistry, app_id: str) -> App:
    if not actor.sees_app(app_id):
        raise NotFound("application", app_id)
    try:
        return registry.require(app_id)
    except UnknownApplication:
        if actor.app_scope is not None:
            raise NotFound("application", app_id) from None
        raise


def list_apps(actor: Actor) -> list[AppListing]:
    """Every application in scope, by id (the CLI's listing, which prints them all)."""
    registry = AppRegistry()
    return _listings(registry, [item for item in registry.list() if actor.sees_app(item.id)])


def apps_page(actor: Actor, *, cursor: str | None = None, limit: int = 50
              ) -> Page[AppListing]:
    """A page of the applications in scope, by id: the index of ids, then the page's own
    records and counts only (a face's listing, whatever the number of applications)."""
    registry = AppRegistry()
    ids = sorted(app_id for app_id in registry.redis.smembers(keys.APP_INDEX)
                 if actor.sees_app(app_id))
    if cursor and not (cursor.isascii() and cursor.isdigit()):
        raise InvalidField("cursor", f"cursor {cursor[:40]!r} is not a position")
    start, limit = int(cursor or 0), bounded_limit(limit)
    pipe = registry.redis.pipeline(transaction=False)
    wanted = ids[start:start + limit]
    for app_id in wanted:
        pipe.hgetall(keys.app_key(app_id))
    apps = [App.from_hash(app_id, data)
            for app_id, data in zip(wanted, pipe.execute() if wanted else [], strict=True)
            if data]
    following = str(start + limit) if start + limit < len(ids) else None
    return Page(items=_listings(registry, apps), next_cursor=following)


def _listings(registry: AppRegistry, apps: list[App]) -> list[AppListing]:
    """``apps`` with their endpoint counts, in one pipelined round trip."""
    if not apps:
        return []
    pipe = registry.redis.pipeline(transaction=False)
    for item in apps:
        pipe.scard(keys.app_endpoints_key(item.id))
    return [AppListing(app=item, endpoints=int(count))
            for item, count in zip(apps, pipe.execute(), strict=True)]


def app_detail(actor: Actor, app_id: str) -> AppDetail:
    """The application and its endpoints (with their subscriptions), by endpoint id."""
    app = _require_app(actor, AppRegistry(), app_id)
    return AppDetail(app=app, endpoints=all_endpoints(actor, app=app.id))


def add_app(actor: Actor, app_id: str, *, name: str | None = None,
            description: str | None = None) -> App:
    _operator_only(actor, f"add application {app_id}")
    added = AppRegistry().add(app_id, name=name, description=description)
    audit.record(actor, "app.add", app_id, app=app_id)
    return added


def remove_app(actor: Actor, app_id: str) -> None:
    """Refused (``AppInUse``) while endpoints belong to it."""
    _operator_only(actor, f"remove application {app_id}")
    AppRegistry().remove(app_id)
    audit.record(actor, "app.remove", app_id, app=app_id)


def list_event_types(actor: Actor) -> list[EventType]:
    return EventCatalog().list()


def event_type(actor: Actor, name: str) -> EventType:
    return EventCatalog().require(name)


def add_event_type(actor: Actor, name: str, *, schema: Any = None,
                   description: str | None = None) -> EventType:
    _operator_only(actor, f"add event type {name}")
    added = EventCatalog().add(name, schema=schema, description=description)
    audit.record(actor, "event_type.add", name, "with its schema" if schema is not None else "")
    return added


def remove_event_type(actor: Actor, name: str) -> None:
    _operator_only(actor, f"remove event type {name}")
    EventCatalog().remove(name)
    audit.record(actor, "event_type.remove", name)
