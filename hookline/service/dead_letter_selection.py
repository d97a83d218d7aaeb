"""Acting on exactly the dead letters a person chose: rows ticked on a page (replayed or
deleted), the purge of exactly a filtered set (counted first, then confirmed), and what a
replay would meet at an endpoint that cannot receive.

Public API (the actor first; ``NotFound`` for an entry or endpoint that does not exist or is
outside ``actor.app_scope``, the same answer for both; every mutation refuses a read-only actor
and is audited)::

    selected(actor, entry_ids) -> list[DeadLetter]     # as they are now, in the order given
    versions(entries) -> list[str]; parse_versions(values) -> dict[str, float]
                                                  # "<dead-lettered at> <entry id>", for a form
    delete_selected(actor, versions) -> Deletion  # exactly those, as confirmed
    replay_selected(actor, versions) -> ReplayOutcome
    plan_purge(actor, query, *, now=None) -> PurgePlan   # the dry run: .total, .as_of
    purge_matching(actor, query, as_of) -> int    # what plan_purge counted, as it is now
    blocked_entries(actor, entries) -> list[Blocked]   # endpoints a replay cannot reach
    blocked_matching(actor, query, *, every_endpoint=True) -> list[Blocked] | None

A selection is confirmed as versions (each entry's id and when it was dead-lettered): an entry
dead-lettered again since (a new entry under the same id) is not the one confirmed and stays;
one gone since is not counted. Any id unknown or out of scope refuses the whole action first.

A purge's dry run fixes its moment (``as_of``): the purge then deletes what matches and was
dead-lettered by then, so what was counted is what goes, never an entry that came after.

What a replay meets (``hookline.delivery.engine``): a disabled endpoint dead-letters it again
at once, before any request, under reason ``endpoint_disabled`` (``endpoint_gone`` when a 410
disabled it), as a new entry with no attempt, status or error of its own; a removed endpoint
the same under ``endpoint_removed``; a paused endpoint holds it until it is resumed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from hookline.core.errors import InvalidField
from hookline.core.event import ENDPOINT_ID_PATTERN
from hookline.delivery.replay import ReplayOutcome, invalid_entries, replay_interval
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.service.dead_letters import (
    PURGE_BATCH,
    DeadLetterQuery,
    ReplayPlan,
    remove_exactly,
    replay,
    require_letter_endpoint,
    scope_endpoints,
)
from hookline.service.pages import MAX_LIMIT
from hookline.store import keys
from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_index import endpoint_of
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import registered_ids

#: The longest entry id a form may name (an endpoint id, a slash, a recorded event id).
MAX_ENTRY_ID = 400
#: What a replay meets at an endpoint in each state (see the module's docstring).
OUTCOMES = {
    "disabled": "dead-lettered again at once, before any request (reason endpoint_disabled), "
                "as a new entry without this one's status and error",
    "gone": "dead-lettered again at once, before any request (reason endpoint_gone), as a new "
            "entry without this one's status and error",
    "removed": "dead-lettered again at once (reason endpoint_removed)",
    "paused": "held, not sent, until the endpoint is resumed",
}


@dataclass(frozen=True)
class Deletion:
    """What a delete of selected rows did: ``deleted`` of ``asked``; the rest had changed
    (dead-lettered again) or gone since they were confirmed."""

    asked: int
    deleted: int


@dataclass(frozen=True)
class PurgePlan:
    """The dry run of a purge: ``total`` entries match and were dead-lettered by ``as_of``
    (Unix seconds), the moment the purge is bounded by."""

    query: DeadLetterQuery
    total: int
    as_of: float


@dataclass(frozen=True)
class Blocked:
    """An endpoint a replay cannot reach now: ``state`` disabled, gone (disabled by a 410),
    removed or paused; ``reason`` the endpoint's disabled reason; ``count`` the dead letters
    of the selection at it."""

    endpoint_id: str
    state: str
    reason: str
    count: int

    @property
    def outcome(self) -> str:
        """What becomes of these dead letters' replays."""
        return OUTCOMES[self.state]


def _checked_ids(entry_ids: Iterable[str]) -> list[str]:
    ids = list(dict.fromkeys(entry_id.strip() for entry_id in entry_ids if entry_id.strip()))
    if not ids:
        raise InvalidField("entry_id", "no dead letter selected: tick the rows to act on")
    if len(ids) > MAX_LIMIT:
        raise InvalidField("entry_id", f"{len(ids)} dead letters selected: at most "
                                       f"{MAX_LIMIT} at a time (or use a filter)")
    for entry_id in ids:
        if len(entry_id) > MAX_ENTRY_ID or not entry_id.isprintable():
            raise InvalidField("entry_id", f"{entry_id[:60]!r} is not a dead-letter id")
    return ids


def selected(actor: Actor, entry_ids: Iterable[str], *,
             queue: DeadLetterQueue | None = None) -> list[DeadLetter]:
    """The entries ``entry_ids`` as they are now, in the order given; NotFound for the first
    that does not exist or is outside the actor's scope (one HMGET per shard)."""
    ids = _checked_ids(entry_ids)
    for endpoint_id in dict.fromkeys(endpoint_of(entry_id) for entry_id in ids):
        require_letter_endpoint(actor, endpoint_id)
    found = (queue or DeadLetterQueue()).get_many(ids)
    for entry_id in ids:
        if entry_id not in found:
            raise NotFound("dead letter", entry_id)
    return [found[entry_id] for entry_id in ids]


def versions(entries: Iterable[DeadLetter]) -> list[str]:
    """Each entry as a confirmation form carries it: ``"<dead-lettered at> <entry id>"``."""
    return [f"{entry.dead_lettered_at!r} {entry.id}" for entry in entries]


def parse_versions(values: Iterable[str]) -> dict[str, float]:
    """The entry ids and times a confirmation form posted (:func:`versions`)."""
    found: dict[str, float] = {}
    for value in values:
        at, _, entry_id = value.strip().partition(" ")
        try:
            seconds = float(at)
        except ValueError:
            seconds = math.nan
        if not entry_id or not math.isfinite(seconds):
            raise InvalidField("entry", f"{value[:60]!r} is not a confirmed dead letter")
        found[entry_id] = seconds
    _checked_ids(found)
    return found


def _confirmed(actor: Actor, confirmed: Mapping[str, float],
               queue: DeadLetterQueue) -> list[DeadLetter]:
    """The confirmed entries still as they were confirmed (NotFound as :func:`selected`)."""
    entries = selected(actor, confirmed, queue=queue)
    return [entry for entry in entries if entry.dead_lettered_at == confirmed[entry.id]]


def delete_selected(actor: Actor, confirmed: Mapping[str, float], *,
                    queue: DeadLetterQueue | None = None) -> Deletion:
    """Delete exactly the confirmed entries (:func:`parse_versions`), those unchanged since;
    nothing at all when one id is unknown or out of scope."""
    actor.require_act("delete dead letters")
    queue = queue or DeadLetterQueue()
    entries = _confirmed(actor, confirmed, queue)
    deleted = remove_exactly(queue, entries)
    audit.record(actor, "dead_letter.delete", f"{deleted} dead letter(s)",
                 ", ".join(confirmed), app=actor.app_scope)
    return Deletion(asked=len(confirmed), deleted=deleted)


def replay_selected(actor: Actor, confirmed: Mapping[str, float], *,
                    queue: DeadLetterQueue | None = None) -> ReplayOutcome:
    """Replay exactly the confirmed entries, those unchanged since (same webhook-ids, straight
    onto the queue, or spread as ``hookline dlq replay`` spreads a large replay); entries that
    are not valid events stay (``outcome.invalid``)."""
    actor.require_act("replay dead letters")
    queue = queue or DeadLetterQueue()
    entries = _confirmed(actor, confirmed, queue)
    plan = ReplayPlan(entries=entries, interval=replay_interval(len(entries), None),
                      invalid=invalid_entries(entries))
    return replay(actor, plan, queue=queue)


def _bounded(query: DeadLetterQuery, as_of: float) -> DeadLetterQuery:
    until = as_of if query.until is None else min(query.until, as_of)
    return replace(query, until=until, order="oldest")


def plan_purge(actor: Actor, query: DeadLetterQuery, *, now: float | None = None,
               pages: DeadLetterPages | None = None) -> PurgePlan:
    """How many dead letters ``query`` selects now: the count a purge confirms."""
    as_of = round(time.time() if now is None else now, 6)
    pages = pages or DeadLetterPages()
    total = pages.count(_bounded(query, as_of).selection(), scope_endpoints(actor, query))
    return PurgePlan(query=query, total=total, as_of=as_of)


def purge_matching(actor: Actor, query: DeadLetterQuery, as_of: float, *,
                   pages: DeadLetterPages | None = None) -> int:
    """Delete what ``query`` selects among the dead letters of ``as_of`` or before (the dry
    run's moment), a batch at a time; returns how many went. Audited with the filter."""
    actor.require_act("purge dead letters")
    pages = pages or DeadLetterPages()
    bounded = _bounded(query, as_of)
    scope = scope_endpoints(actor, query)
    removed, batch = 0, []
    for entry in pages.matching(bounded.selection(), scope):
        batch.append(entry)
        if len(batch) >= PURGE_BATCH:
            removed, batch = removed + remove_exactly(pages.queue, batch), []
    removed += remove_exactly(pages.queue, batch)
    described = ", ".join(f"{name}={value}" for name, value in query.to_params().items()
                          if name != "order") or "all"
    audit.record(actor, "dead_letter.purge", f"{removed} dead letter(s)",
                 f"matching {described}, dead-lettered by {_stamp(as_of)}",
                 app=actor.app_scope)
    return removed


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


# -- endpoints a replay cannot reach -------------------------------------------------------


def _states(queue: DeadLetterQueue, endpoint_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The endpoints among ``endpoint_ids`` that cannot receive now, each with its state and
    disabled reason: one pipelined HMGET of the fields that say so."""
    pipe = queue.redis.pipeline(transaction=False)
    for endpoint_id in endpoint_ids:
        pipe.hmget(keys.endpoint_key(endpoint_id), "url", "enabled", "disabled_reason",
                   "paused_at")
    found = {}
    for endpoint_id, (url, enabled, reason, paused_at) in zip(
            endpoint_ids, pipe.execute() if endpoint_ids else [], strict=True):
        reason = reason or ""
        if not url:
            found[endpoint_id] = ("removed", "")
        elif enabled == "0":
            found[endpoint_id] = ("gone" if reason.startswith("gone") else "disabled", reason)
        elif paused_at:
            found[endpoint_id] = ("paused", "")
    return found


def blocked_entries(actor: Actor, entries: Iterable[DeadLetter], *,
                    queue: DeadLetterQueue | None = None) -> list[Blocked]:
    """The endpoints of ``entries`` a replay cannot reach now, with how many of them each."""
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.endpoint_id] = counts.get(entry.endpoint_id, 0) + 1
    ids = sorted(endpoint_id for endpoint_id in counts if ENDPOINT_ID_PATTERN.match(endpoint_id))
    states = _states(queue or DeadLetterQueue(), ids)
    return [Blocked(endpoint_id, *states[endpoint_id], counts[endpoint_id])
            for endpoint_id in ids if endpoint_id in states]


def blocked_matching(actor: Actor, query: DeadLetterQuery, *, every_endpoint: bool = True,
                     pages: DeadLetterPages | None = None) -> list[Blocked] | None:
    """The endpoints a bulk replay of ``query`` cannot reach now, each with how many of its
    dead letters match: the query's endpoint, else the actor's application's, else every
    registered one (a removed endpoint is named only by the query's endpoint). None, not
    checked, when that is every registered one and ``every_endpoint`` is false: a page's dry
    run leaves that read (one field of each of 10,000 endpoints) to the action."""
    pages = pages or DeadLetterPages()
    scope = scope_endpoints(actor, query)
    if scope is None and query.endpoint is None and not every_endpoint:
        return None
    candidates = scope if scope is not None else (
        [query.endpoint] if query.endpoint else registered_ids(pages.redis))
    found = []
    for endpoint_id, (state, reason) in sorted(_states(pages.queue, candidates).items()):
        total = pages.count(replace(query, endpoint=endpoint_id).selection(), [endpoint_id])
        if total:
            found.append(Blocked(endpoint_id, state, reason, total))
    return found
