"""The event log as an operator or a tenant browses it: recent events, newest change first,
filtered by endpoint, event type prefix, status and time window, a page at a time.

Public API::

    @dataclass(frozen=True)
    class LogQuery:  endpoint, type_prefix, status, since, until (Unix seconds)
        from_params(params) -> LogQuery   # InvalidQuery: one line naming the bad value
        to_params() -> dict[str, str]     # back into a bookmarkable query string
    list_page(actor, query, cursor=None, limit=50) -> Page[LogRow]   # complete: False when
                                                 # the page stopped at its budget of rows

A row (``hookline.store.event_log.LogRow``) has ids, type, endpoint, status, attempts, times and
the last HTTP status: never a payload or a secret. A scoped actor (a tenant) sees only its
application's endpoints' rows; an endpoint filter naming another application's endpoint is
``NotFound``, as an unknown endpoint is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hookline.core.config import settings
from hookline.core.event import ENDPOINT_ID_PATTERN
from hookline.core.times import format_time_param
from hookline.service.actor import Actor, NotFound
from hookline.service.pages import InvalidQuery as InvalidQuery  # the faces find it here
from hookline.service.pages import (
    Page,
    bounded_limit,
    cursor_after,
    position_after,
    time_param,
)
from hookline.store.endpoints import EndpointRegistry
from hookline.store.event_log import STATUSES as STATUSES  # re-exported for the faces
from hookline.store.event_log import LogRow, log_key
from hookline.store.event_log_pages import EventLogPages, LogFilter

#: The parameters a query reads and writes.
PARAMS = ("endpoint", "type", "status", "since", "until")
#: Longest event type prefix a filter takes.
MAX_TYPE = 200


@dataclass(frozen=True)
class LogQuery:
    """Which rows of the event log a page shows (the module's docstring)."""

    endpoint: str | None = None
    type_prefix: str = ""
    status: str | None = None
    since: float | None = None
    until: float | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LogQuery:
        """From a query string's values (empty ones ignored, other keys too)."""
        given = {name: str(params[name]).strip() for name in PARAMS
                 if params.get(name) is not None and str(params[name]).strip()}
        endpoint = given.get("endpoint")
        if endpoint is not None and not ENDPOINT_ID_PATTERN.match(endpoint):
            raise InvalidQuery("endpoint", f"endpoint {endpoint[:70]!r} is not an endpoint id")
        type_prefix = given.get("type", "")
        if len(type_prefix) > MAX_TYPE or not type_prefix.isprintable():
            raise InvalidQuery("type", f"type {type_prefix[:40]!r} is not an event type prefix "
                                       f"(printable, at most {MAX_TYPE} characters)")
        status = given.get("status")
        if status is not None and status not in STATUSES:
            raise InvalidQuery("status", f"status {status[:20]!r} is not one of "
                                         f"{', '.join(STATUSES)}")
        query = cls(endpoint=endpoint, type_prefix=type_prefix, status=status,
                    since=time_param("since", given.get("since")),
                    until=time_param("until", given.get("until")))
        if query.since is not None and query.until is not None and query.since > query.until:
            raise InvalidQuery("since", "since is later than until: the window is empty")
        return query

    def to_params(self) -> dict[str, str]:
        values: dict[str, Any] = {
            "endpoint": self.endpoint, "type": self.type_prefix or None, "status": self.status,
            "since": None if self.since is None else format_time_param(self.since),
            "until": None if self.until is None else format_time_param(self.until)}
        return {name: str(value) for name, value in values.items() if value is not None}

    @property
    def narrowed(self) -> bool:
        return any((self.endpoint, self.type_prefix, self.status, self.since, self.until))


def retention_text() -> str:
    """How long and how many rows the log keeps, for the pages: "for 3 days, at most 10,000
    events per endpoint"."""
    config = settings()
    seconds = config.event_log_retention
    span = (f"{seconds / 86400:g} days" if seconds >= 86400 else
            f"{seconds / 3600:g} hours" if seconds >= 3600 else f"{seconds / 60:g} minutes")
    return f"for {span}, at most {config.event_log_per_endpoint:,} events per endpoint"


def scope(actor: Actor, query: LogQuery, registry: EndpointRegistry | None = None,
          pages: EventLogPages | None = None) -> list[str] | None:
    """The endpoints a page reads (None: every endpoint, through the shards' indexes).
    ``NotFound`` for an endpoint outside a scoped actor's application, or one the operator
    names that is neither registered nor in the log."""
    registry = registry or EndpointRegistry()
    if actor.app_scope is None:
        if query.endpoint is None:
            return None
        client = (pages or EventLogPages()).redis
        if registry.get(query.endpoint) is None and not client.exists(log_key(query.endpoint)):
            raise NotFound("endpoint", query.endpoint)
        return [query.endpoint]
    if query.endpoint is not None:
        endpoint = registry.get(query.endpoint)
        if endpoint is None or not actor.sees_app(endpoint.app):
            raise NotFound("endpoint", query.endpoint)
        return [query.endpoint]
    return [endpoint.id for endpoint in registry.members(actor.app_scope)]


def list_page(actor: Actor, query: LogQuery, cursor: str | None = None, limit: int = 50, *,
              pages: EventLogPages | None = None) -> Page[LogRow]:
    """One page of the log, newest change first; pass ``next_cursor`` back for the next."""
    pages = pages or EventLogPages()
    after = position_after(cursor, "an event log")
    endpoint_ids = scope(actor, query, pages=pages)
    found = pages.page(LogFilter(endpoint_ids=endpoint_ids, type_prefix=query.type_prefix,
                                 status=query.status, since=query.since, until=query.until),
                       limit=bounded_limit(limit), after=after)
    return Page(items=found.rows, next_cursor=cursor_after(found.after),
                complete=found.exhausted)
