"""Dead letters as an operator or a tenant sees and acts on them: filtered pages (each entry
with its last answer), the dry-run count, replay (one, a selection, or a bulk replay job) and
purge, trim and restore. The query lives in :mod:`hookline.service.dead_letter_query` (found
here too); rows ticked on a page and the purge of a filtered set in
:mod:`hookline.service.dead_letter_selection`.

Public API (the actor first; ``NotFound`` for an entry, endpoint or job that does not exist or
is outside ``actor.app_scope``; every mutation refuses a read-only actor and is audited)::

    @dataclass(frozen=True)
    class DeadLetterQuery:            # every field optional; bounds inclusive
        endpoint: str | None; reason: str | None; status: int | None  # last HTTP status, 0: none
        since: float | None; until: float | None                   # Unix seconds
        min_attempts: int | None; max_attempts: int | None
        ids: tuple[str, ...] = ()     # entry ids or event ids (the CLI's; not in URLs)
        order: str = "newest"         # or "oldest"
        @classmethod from_params(mapping) -> DeadLetterQuery   # InvalidQuery on a bad value
        to_params() -> dict[str, str]                          # bookmarkable; from_params' input
    list_page(actor, query, cursor=None, limit=50) -> Page[DeadLetter]  # O(page) via indexes;
                                  # .last_response from the event's history when not kept
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
    remove_exactly(queue, entries) -> int                  # the same, no rule, no audit
    trim(actor, before) -> int;  restore_spool(actor) -> int;  reindex(actor) -> int
    # the bulk replay job (hookline.service.replay_jobs):
    start_bulk_replay(actor, query, *, rate=None) -> str   # the job id
    job(actor, job_id) -> ReplayJob  # state running|cancelled|done|failed, total, replayed...
    jobs(actor, *, limit=20) -> list[ReplayJob]
    cancel(actor, job_id) -> ReplayJob
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from hookline.core.errors import InvalidField
from hookline.core.event import ENDPOINT_ID_PATTERN
from hookline.delivery.replay import (
    ReplayOutcome,
    invalid_entries,
    replay_entries,
    replay_interval,
    replay_spread,
)
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.service.dead_letter_query import (  # noqa: F401 (the faces find them here)
    DEFAULT_ORDER,
    ORDERS,
    PARAMS,
    DeadLetterQuery,
    InvalidQuery,
    lookup_id,
    newest_first,
    require_selection,
)
from hookline.service.endpoints import require_known_endpoint
from hookline.service.pages import Page, bounded_limit, cursor_after, position_after
from hookline.store import dead_letter_queue as store
from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_index import endpoint_of, reindex_shard
from hookline.store.dead_letter_queue import REASONS, DeadLetter, DeadLetterQueue  # noqa: F401
from hookline.store.endpoints import EndpointRegistry
from hookline.store.history import AttemptHistory
from hookline.store.ordering import OrderLines

#: Entries removed per transaction when purging.
PURGE_BATCH = 500


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
                       after=position_after(cursor, "a dead-letter"),
                       endpoint_ids=scope_endpoints(actor, query),
                       reverse=query.order == "newest")
    return Page(items=with_answers(found.entries, AttemptHistory(pages.redis)),
                next_cursor=cursor_after(found.after))


def with_answers(entries: list[DeadLetter], history: AttemptHistory) -> list[DeadLetter]:
    """``entries``, each with its last answer's excerpt: one that does not keep it (written
    before dead letters kept it, or moved from the retry schedule, which keeps none) gets its
    event's latest kept attempt's, if that got the same status; one round trip for the page."""
    missing = [n for n, entry in enumerate(entries)
               if entry.last_status is not None and not entry.last_response]
    if not missing:
        return entries
    latest = history.latest_of([(entries[n].endpoint_id, entries[n].event_id) for n in missing])
    found = list(entries)
    for n, record in zip(missing, latest, strict=True):
        if record is not None and record.status == entries[n].last_status and record.response:
            found[n] = replace(entries[n], last_response=record.response)
    return found


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
    removed = remove_exactly(queue or DeadLetterQueue(), entries)
    audit.record(actor, "dead_letter.purge", f"{removed} dead letter(s)", app=_app_of(actor))
    return removed


def remove_exactly(queue: DeadLetterQueue, entries: Sequence[DeadLetter]) -> int:
    """Remove each of ``entries`` that is still the entry it was (an event dead-lettered again
    has a new one, which stays), with its index places; returns how many went. The rules are
    the caller's (who may, which entries); a removed head of an ordered key lets it go on."""
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
