"""The audit log: who did what, when, from which session; every face's actions in one stream.

Public API::

    @dataclass(frozen=True)
    class AuditEntry:
        id: str          # the stream id, also the cursor of the page after it
        at: float        # Unix seconds (Redis time, from the stream id)
        actor: str       # Actor.name
        session: str     # Actor.session
        action: str      # "endpoint.pause", "breaker.reset", "event.replay", ...
        target: str      # what it acted on: an endpoint id, "<endpoint>/<event>", a job id
        detail: str
    def record(actor, action, target, detail="", *, redis_client=None) -> str   # the entry id
    def recent(actor, *, limit=50, before=None, redis_client=None) -> Page[AuditEntry]

One capped Redis stream (``keys.AUDIT_KEY``, about ``keys.AUDIT_MAXLEN`` entries), newest
last; ``recent`` pages from the newest back, ``before`` being the previous page's
``next_cursor``. A scoped actor (the portal) sees only entries about its own application.
An entry never holds a secret: a rotated secret is recorded as "rotated", never its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookline.core.errors import InvalidField
from hookline.service.actor import Actor
from hookline.service.pages import Page, bounded_limit
from hookline.store import connection as store
from hookline.store import keys

#: The longest detail kept (an operator's reason, a count): the log is not a data store.
MAX_DETAIL = 500


@dataclass(frozen=True)
class AuditEntry:
    """One action: ``at`` is Unix seconds (Redis time), from the stream id."""

    id: str
    at: float
    actor: str
    session: str
    action: str
    target: str
    detail: str = ""
    #: The application the target belongs to, when it belongs to one ("" otherwise).
    app: str = ""


def record(actor: Actor, action: str, target: str, detail: str = "", *, app: str | None = None,
           redis_client: Any = None) -> str:
    """Append one entry (after the action succeeded) and return its id. ``app`` is the
    application of the target, so that a tenant's portal can show its own entries."""
    client: Any = redis_client or store.client()
    fields = {"actor": actor.name, "session": actor.session, "action": action,
              "target": target, "detail": detail[:MAX_DETAIL], "app": app or ""}
    entry_id = client.xadd(keys.AUDIT_KEY, fields, maxlen=keys.AUDIT_MAXLEN, approximate=True)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


def _check_cursor(before: str) -> str:
    """A stream id (``<ms>-<seq>``), as a face got it from ``next_cursor``."""
    left, dash, right = before.partition("-")
    if not (left.isdigit() and dash and right.isdigit() and left.isascii() and right.isascii()):
        raise InvalidField("cursor", f"cursor {before[:40]!r} is not an audit log position")
    return before


def recent(actor: Actor, *, limit: int = 50, before: str | None = None,
           redis_client: Any = None) -> Page[AuditEntry]:
    """The newest entries first, ``limit`` of them, older than ``before`` (a cursor) when
    given. A scoped actor gets only its application's entries (a page may then hold fewer
    than ``limit``; ``next_cursor`` still moves on)."""
    client: Any = redis_client or store.client()
    limit = bounded_limit(limit)
    high = f"({_check_cursor(before)}" if before else "+"
    rows = client.xrevrange(keys.AUDIT_KEY, max=high, min="-", count=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    entries = [_entry(entry_id, data) for entry_id, data in rows]
    visible = [entry for entry in entries if actor.app_scope is None
               or entry.app == actor.app_scope]
    return Page(items=visible, next_cursor=entries[-1].id if more and entries else None)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _entry(entry_id: Any, data: dict[Any, Any]) -> AuditEntry:
    fields = {_text(name): _text(value) for name, value in data.items()}
    ident = _text(entry_id)
    return AuditEntry(id=ident, at=int(ident.partition("-")[0]) / 1000.0,
                      actor=fields.get("actor", ""), session=fields.get("session", ""),
                      action=fields.get("action", ""), target=fields.get("target", ""),
                      detail=fields.get("detail", ""), app=fields.get("app", ""))
