"""Dead letters as an operator or a tenant sees and acts on them: filtered pages, the dry-run
count, replay (one, a selection, or a bulk replay job) and purge, trim and restore.

Public API (the actor first; ``NotFound`` for an entry, endpoint or job that does not exist or
is outside ``actor.app_scope``; every mutation refuses a read-only actor and is audited)::

    @dataclass(frozen=True)
    class DeadLetterQuery:            # every field optional; bounds inclusive
        endpoint: str | None; reason: str | None; status: int | None  # last HTTP status, 0: none
        since: float | None; until: float | None                   # Unix seconds
        min_attempts: int | None; max_attempts: int | None
        ids: tuple[str, ...] = ()     # entry ids or event ids (the CLI's; not in URLs)
        order: str = "oldest"         # or "newest"
        @classmethod from_params(mapping) -> DeadLetterQuery   # InvalidQuery on a bad value
        to_params() -> dict[str, str]                          # bookmarkable; from_params' input
    list_page(actor, query, cursor=None, limit=50) -> Page[DeadLetter]  # O(page) via indexes
    count(actor, query) -> int        # the dry run: exact; ZCOUNTs for endpoint/reason/time
    find(actor, query, *, limit=None) -> list[DeadLetter]               # oldest first
    lookup_id(given) -> str           # "ENDPOINT/EVENT_ID" or "EVENT_ID" as recorded
    require_selection(query, select_all) -> query   # an action on everything must say --all
    get(actor, entry_id) -> DeadLetter
    replay_one(actor, entry_id, *, audit_as="dead_letter.replay") -> DeadLetter
                                  # same webhook-id, onto the queue; NotReplayable (an
                                  # InvalidField): not a valid event
    plan_replay(actor, query, *, rate=None) -> ReplayPlan  # what a replay would do
    replay(actor, plan) -> ReplayOutcome                   # hookline dlq replay
    purge(actor, entries) -> int                           # exactly those, if unchanged
    trim(actor, before) -> int;  restore_spool(actor) -> int;  reindex(actor) -> int
    # the bulk replay job (hookline.service.replay_jobs):
    start_bulk_replay(actor, query, *, rate=None) -> str   # the job id
    job(actor, job_id) -> ReplayJob  # state running|cancelled|done|failed, total, replayed...
    jobs(actor, *, limit=20) -> list[ReplayJob]
    cancel(actor, job_id) -> ReplayJob
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hookline.core.errors import InvalidField
from hookline.core.event import ENDPOINT_ID_PATTERN, recorded_id
from hookline.core.times import format_time_param, parse_time
from hookline.delivery.replay import (
    ReplayOutcome,
    invalid_entries,
    replay_entries,
    replay_interval,
    replay_spread,
)
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.service.endpoints import require_known_endpoint
from hookline.service.pages import Page, bounded_limit
from hookline.store import deadletter as store
from hookline.store.deadletter import REASONS, DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.deadletter_index import Position, endpoint_of, reindex_shard
from hookline.store.deadletter_pages import DeadLetterPages
from hookline.store.endpoints import EndpointRegistry
from hookline.store.ordering import OrderLines

#: The orders a listing can be read in.
ORDERS = ("oldest", "newest")
#: Entries removed per transaction when purging.
PURGE_BATCH = 500
#: The parameters a query reads and writes (``to_params`` keys).
PARAMS = ("endpoint", "reason", "status", "since", "until", "min_attempts", "max_attempts",
          "order")


class InvalidQuery(InvalidField):
    """A filter value refused; the message names the parameter and says what is wrong."""


def _param(name: str) -> str:
    return name


@dataclass(frozen=True)
class DeadLetterQuery:
    """Which dead letters a view or an action is about (see the module's docstring)."""

    endpoint: str | None = None
    reason: str | None = None
    status: int | None = None
    since: float | None = None
    until: float | None = None
    min_attempts: int | None = None
    max_attempts: int | None = None
    ids: tuple[str, ...] = ()
    order: str = "oldest"

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> DeadLetterQuery:
        """From a query string's values (empty ones ignored, other keys too, e.g. a cursor)."""
        given = {name: str(params[name]).strip() for name in PARAMS
                 if params.get(name) is not None and str(params[name]).strip()}
        query = cls(
            endpoint=_endpoint(given.get("endpoint")),
            reason=_reason(given.get("reason")),
            status=_count("status", given.get("status"), high=599),
            since=_time("since", given.get("since")),
            until=_time("until", given.get("until")),
            min_attempts=_count("min_attempts", given.get("min_attempts")),
            max_attempts=_count("max_attempts", given.get("max_attempts")),
            order=_order(given.get("order")),
        )
        return query.checked()

    def to_params(self) -> dict[str, str]:
        """The query as query-string values (the ones set): ``from_params`` reads them back."""
        values: dict[str, Any] = {
            "endpoint": self.endpoint, "reason": self.reason, "status": self.status,
            "since": None if self.since is None else format_time_param(self.since),
            "until": None if self.until is None else format_time_param(self.until),
            "min_attempts": self.min_attempts, "max_attempts": self.max_attempts,
            "order": None if self.order == "oldest" else self.order}
        return {name: str(value) for name, value in values.items() if value is not None}

    def checked(self, spell: Any = _param) -> DeadLetterQuery:
        """The query, if its ranges are not empty; ``spell`` writes a parameter's name as the
        caller's users know it (``--since`` for the CLI)."""
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidQuery("since", f"{spell('since')} is later than {spell('until')}: "
                                        "the range is empty")
        if (self.min_attempts is not None and self.max_attempts is not None
                and self.min_attempts > self.max_attempts):
            raise InvalidQuery("min_attempts", f"{spell('min_attempts')} is above "
                                               f"{spell('max_attempts')}: the range is empty")
        return self

    @property
    def narrowed(self) -> bool:
        """Whether the query selects less than every dead letter."""
        return bool(self.ids) or any(value is not None for value in (
            self.endpoint, self.reason, self.status, self.since, self.until,
            self.min_attempts, self.max_attempts))

    def selection(self) -> DeadLetterFilter:
        return DeadLetterFilter(endpoint_id=self.endpoint, reason=self.reason,
                                since=self.since, until=self.until, ids=self.ids,
                                min_attempts=self.min_attempts,
                                max_attempts=self.max_attempts, last_status=self.status)


def require_selection(query: DeadLetterQuery, select_all: bool, *, spell: Any = _param,
                      all_flag: str = "all") -> DeadLetterQuery:
    """An action on every dead letter must say so (``select_all``), and saying so excludes
    any filter: the selection is then exactly what the operator meant."""
    if select_all and query.narrowed:
        raise InvalidQuery("all", f"{all_flag} selects every dead letter: give it without ids "
                                  "or filters")
    if not select_all and not query.narrowed:
        names = ", ".join(spell(name) for name in ("endpoint", "reason", "status", "since",
                                                    "until", "min_attempts", "max_attempts"))
        raise InvalidQuery("all", f"refusing to act on every dead letter: give entry ids, a "
                                  f"filter ({names}) or {all_flag}")
    return query


def lookup_id(given: str) -> str:
    """An entry id (``ENDPOINT/EVENT_ID``) or event id as a dead letter records it: an
    overlong event id is recorded by its start and length (``recorded_id``), so the id as it
    was sent still finds its entry."""
    endpoint_id, slash, event_id = given.partition("/")
    return f"{endpoint_id}/{recorded_id(event_id)}" if slash else recorded_id(given)


def _endpoint(text: str | None) -> str | None:
    if text is not None and not ENDPOINT_ID_PATTERN.match(text):
        raise InvalidQuery("endpoint", f"endpoint {text[:70]!r} is not an endpoint id")
    return text


def _reason(text: str | None) -> str | None:
    if text is not None and text not in REASONS:
        raise InvalidQuery("reason", f"reason {text[:40]!r} is not one of "
                                     f"{', '.join(sorted(REASONS))}")
    return text


def _count(name: str, text: str | None, *, high: int = 10**9) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > high:
        raise InvalidQuery(name, f"{name} {text[:20]!r} is not a whole number from 0 to {high}")
    return int(text)


def _time(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return round(parse_time(text), 6)
    except ValueError as exc:
        raise InvalidQuery(name, f"{name}: {exc}") from None


def _order(text: str | None) -> str:
    if text is None:
        return "oldest"
    if text not in ORDERS:
        raise InvalidQuery("order", f"order {text[:20]!r} is not one of {', '.join(ORDERS)}")
    return text


# -- cursors and scope ---------------------------------------------------------------------


def encode_cursor(position: Position) -> str:
    raw = json.dumps([position.at, position.entry_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, entry_id = json.loads(raw)
        return Position(float(at), str(entry_id))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidField("cursor", f"cursor {cursor[:40]!r} is not a dead-letter "
                                     "position") from None


def scope_endpoints(actor: Actor, query: DeadLetterQuery,
                    registry: EndpointRegistry | None = None) -> list[str] | None:
    """The endpoints a scoped actor's query is limited to (None: no limit). NotFound for an
    endpoint unknown (not registered, no dead letter) or outside a scoped actor's application."""
    if actor.app_scope is None:
        if query.endpoint is not None:
            require_known_endpoint(query.endpoint, or_named_by=DeadLetterPages().names)
        return None
    registry = registry or EndpointRegistry()
    if query.endpoint is not None:
        require_letter_endpoint(actor, query.endpoint, registry)
        return [query.endpoint]
    return [endpoint.id for endpoint in registry.members(actor.app_scope)]


def require_letter_endpoint(actor: Actor, endpoint_id: str,
                            registry: EndpointRegistry | None = None) -> None:
    """NotFound for a scoped actor unless ``endpoint_id`` is one of its application's."""
    if actor.app_scope is None:
        return
    endpoint = (registry or EndpointRegistry()).get(endpoint_id) if \
        ENDPOINT_ID_PATTERN.match(endpoint_id) else None
    if endpoint is None or not actor.sees_app(endpoint.app):
        raise NotFound("endpoint", endpoint_id)


# -- reading -------------------------------------------------------------------------------


def list_page(actor: Actor, query: DeadLetterQuery, cursor: str | None = None,
              limit: int = 50, *, pages: DeadLetterPages | None = None) -> Page[DeadLetter]:
    """One page of matching dead letters in ``query.order``; pass ``next_cursor`` back for
    the next. Reads the index from the cursor and only the entries shown (a status or
    attempts filter reads a bounded number more, and may return a short page)."""
    pages = pages or DeadLetterPages()
    found = pages.page(query.selection(), limit=bounded_limit(limit),
                       after=decode_cursor(cursor) if cursor else None,
                       endpoint_ids=scope_endpoints(actor, query),
                       reverse=query.order == "newest")
    return Page(items=found.entries,
                next_cursor=encode_cursor(found.after) if found.after else None)


def count(actor: Actor, query: DeadLetterQuery, *, pages: DeadLetterPages | None = None) -> int:
    """How many dead letters ``query`` selects, exactly (the dry run before a bulk replay)."""
    return (pages or DeadLetterPages()).count(query.selection(), scope_endpoints(actor, query))


def find(actor: Actor, query: DeadLetterQuery, *, limit: int | None = None,
         pages: DeadLetterPages | None = None) -> list[DeadLetter]:
    """The matching entries, oldest first (at most ``limit``): the CLI's selections."""
    found: list[DeadLetter] = []
    for entry in (pages or DeadLetterPages()).matching(query.selection(),
                                                       scope_endpoints(actor, query)):
        found.append(entry)
        if limit is not None and len(found) >= limit:
            break
    return found


def get(actor: Actor, entry_id: str, *, queue: DeadLetterQueue | None = None) -> DeadLetter:
    """One entry by id (``<endpoint>/<event id>``)."""
    require_letter_endpoint(actor, endpoint_of(entry_id))
    entry = (queue or DeadLetterQueue()).get(entry_id)
    if entry is None:
        raise NotFound("dead letter", entry_id)
    return entry


# -- acting --------------------------------------------------------------------------------


def _app_of(actor: Actor) -> str | None:
    return actor.app_scope


class NotReplayable(InvalidField):
    """The dead letter is not a valid event (a ``malformed`` one): replayed, it would only
    be dead-lettered again. The message says what is wrong with it."""

    def __init__(self, entry_id: str, problem: str) -> None:
        super().__init__("dead letter", f"dead letter {entry_id!r} is not a valid event "
                                        f"({problem}): replayed, it would only be "
                                        "dead-lettered again")


def replay_one(actor: Actor, entry_id: str, *, queue: DeadLetterQueue | None = None,
               audit_as: str = "dead_letter.replay") -> DeadLetter:
    """Send one dead letter again now (same event id, so the same webhook-id), straight onto
    the queue through its endpoint's gates, then remove it from the queue; audited as
    ``audit_as`` (the event pages' replay is ``event.replay``). ``NotReplayable`` when it is
    not a valid event."""
    actor.require_act(f"replay dead letter {entry_id}")
    queue = queue or DeadLetterQueue()
    entry = get(actor, entry_id, queue=queue)
    invalid = invalid_entries([entry])
    if invalid:
        raise NotReplayable(entry_id, invalid[0][1])
    replay_entries(queue, [entry])
    endpoint = EndpointRegistry().get(entry.endpoint_id)  # its tenant's portal shows it too
    audit.record(actor, audit_as, entry_id, app=endpoint.app if endpoint else _app_of(actor))
    return entry


@dataclass(frozen=True)
class ReplayPlan:
    """What replaying a selection would do: the entries, those that are not valid events
    (with why), the pace (``interval`` seconds between an endpoint's events, None: at once)
    and the endpoints that cannot receive (``(endpoint id, "does not exist"|"is disabled")``)."""

    entries: list[DeadLetter]
    interval: float | None
    invalid: list[tuple[DeadLetter, str]] = field(default_factory=list)
    undeliverable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def valid(self) -> list[DeadLetter]:
        refused = {id(entry) for entry, _ in self.invalid}
        return [entry for entry in self.entries if id(entry) not in refused]

    @property
    def spread(self) -> float:
        return replay_spread(self.valid, self.interval)


def undeliverable(endpoint_ids: Iterable[str], registry: EndpointRegistry | None = None
                  ) -> list[tuple[str, str]]:
    """The endpoints among ``endpoint_ids`` that would only dead-letter a replay again."""
    registry = registry or EndpointRegistry()
    found = []
    for endpoint_id in sorted(set(endpoint_ids)):
        endpoint = registry.get(endpoint_id)
        if endpoint is None or not endpoint.enabled:
            found.append((endpoint_id, "does not exist" if endpoint is None else "is disabled"))
    return found


def plan_replay(actor: Actor, query: DeadLetterQuery, *, rate: str | None = None
                ) -> ReplayPlan:
    """The dry run of :func:`replay`: reads only."""
    entries = find(actor, query)
    return ReplayPlan(entries=entries, interval=replay_interval(len(entries), rate),
                      invalid=invalid_entries(entries),
                      undeliverable=undeliverable(entry.endpoint_id for entry in entries)
                      if entries else [])


def replay(actor: Actor, plan: ReplayPlan, *, queue: DeadLetterQueue | None = None
           ) -> ReplayOutcome:
    """Replay the plan's entries now, in this process (``hookline dlq replay``; the console
    starts a job instead): same event ids, spread at the plan's pace, then removed."""
    actor.require_act("replay dead letters")
    outcome = replay_entries(queue or DeadLetterQueue(), plan.entries, interval=plan.interval)
    audit.record(actor, "dead_letter.replay", f"{len(outcome.replayed)} dead letter(s)",
                 f"kept {len(outcome.kept)}, invalid {len(outcome.invalid)}",
                 app=_app_of(actor))
    return outcome


def purge(actor: Actor, entries: Sequence[DeadLetter], *,
          queue: DeadLetterQueue | None = None) -> int:
    """Delete exactly ``entries`` (as counted and confirmed): an event dead-lettered again
    meanwhile has a new entry, which stays. Returns how many were deleted. A deleted entry
    that was the head of an ordered endpoint's key (policy ``block``) is discarded: the next
    delivery of its key goes."""
    actor.require_act("purge dead letters")
    for entry in entries:
        require_letter_endpoint(actor, entry.endpoint_id)
    queue = queue or DeadLetterQueue()
    heads = [entry for entry in entries if entry.sequence is not None]  # of ordered keys
    rest = [entry for entry in entries if entry.sequence is None]
    removed = sum(
        queue.remove_unchanged({entry.id: entry.dead_lettered_at
                                for entry in rest[start:start + PURGE_BATCH]})
        for start in range(0, len(rest), PURGE_BATCH))
    lines = OrderLines(queue.redis)
    for head in heads:  # one at a time: only a head whose entry went lets its key go on
        if queue.remove_unchanged({head.id: head.dead_lettered_at}):
            removed += 1
            lines.advance(head.endpoint_id, head.ordering_key or head.endpoint_id,
                          head.event_id)
    audit.record(actor, "dead_letter.purge", f"{removed} dead letter(s)", app=_app_of(actor))
    return removed


def _unscoped(actor: Actor, action: str) -> None:
    """Queue-wide maintenance is not a tenant's: NotFound, as for anything out of scope."""
    actor.require_act(action)
    if actor.app_scope is not None:
        raise NotFound("action", action)


def trim(actor: Actor, before: float, *, queue: DeadLetterQueue | None = None) -> int:
    """Delete entries dead-lettered before ``before`` (Unix seconds)."""
    _unscoped(actor, "trim dead letters")
    removed = (queue or DeadLetterQueue()).trim(before)
    audit.record(actor, "dead_letter.trim", f"{removed} dead letter(s)", f"before {before!r}")
    return removed


def restore_spool(actor: Actor, *, queue: DeadLetterQueue | None = None) -> int:
    """Move entries spooled to disk while Redis was down into Redis."""
    _unscoped(actor, "restore spooled dead letters")
    moved = store.restore_spool(queue or DeadLetterQueue())
    if moved:
        audit.record(actor, "dead_letter.restore_spool", f"{moved} dead letter(s)")
    return moved


def reindex(actor: Actor, *, queue: DeadLetterQueue | None = None) -> int:
    """Add every entry to the per-endpoint and per-status indexes (after an upgrade, or a
    rolling one with older workers still writing); returns how many entries were read."""
    _unscoped(actor, "reindex dead letters")
    queue = queue or DeadLetterQueue()
    seen = sum(reindex_shard(queue.redis, shard) for shard in queue.shards)
    audit.record(actor, "dead_letter.reindex", f"{seen} dead letter(s)")
    return seen


def newest_first(query: DeadLetterQuery) -> DeadLetterQuery:
    """The same query, listed newest first (the console's default order)."""
    return replace(query, order="newest")
