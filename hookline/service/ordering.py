"""Ordered endpoints as an operator or a tenant sees them: each ordering key with a delivery
out, its head, how many wait behind it and why the head waits; and the counts per ordered
endpoint that ``hookline stats`` shows.

Public API (``NotFound`` for an endpoint that does not exist or is outside
``actor.app_scope``)::

    key_lines(actor, endpoint_id, *, limit=50) -> EndpointLines    # most waiting first
    ordered_counts(actor) -> list[OrderedCounts]                    # per ordered endpoint

Where the head is says why it waits (:func:`where_head_waits`): dead-lettered (under policy
``block`` the key waits for the dead letter's replay or discard), in the retry schedule (its
retry's backoff, or the endpoint held: paused, circuit breaker open or probing, a
Retry-After), else on a queue or in flight. Listing the lines reads the endpoint's keys, at
most ``OrderLines.lines``' budget of them (a length per key, a page of them per round trip),
then three reads for the heads shown, whatever their number.

The counts are bounded: one pipelined read for every ordered endpoint (the set
``keys.ORDERED_ENDPOINTS``, not every endpoint), keys out and deliveries waiting from two
counters each; blocked keys are looked for among the first :data:`BLOCKED_SAMPLE` keys of each
endpoint only (one more read for all of them): ``blocked_checked`` says how many keys were
looked at, and when it is below ``keys_out``, ``blocked`` is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookline.core.endpoint import Endpoint
from hookline.service.actor import Actor
from hookline.service.endpoints import require_endpoint
from hookline.service.pages import bounded_limit
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import ordered_ids
from hookline.store.ordering import KeyLine, LineCounts, OrderLines
from hookline.store.schedule import RetrySchedule

#: Keys of each ordered endpoint whose heads are looked for in the dead-letter queue, for its
#: blocked count: the first ones a scan of its heads gives.
BLOCKED_SAMPLE = 100
#: What a head waiting in the retry schedule waits for while its endpoint is held, by the
#: hold (piece_held.lua's reasons).
HOLDS = {
    "paused": "held in the retry schedule: the endpoint is paused (resume it)",
    "breaker_open": "held in the retry schedule: the circuit breaker is open",
    "breaker_probe": "held in the retry schedule: the breaker's probe is out",
    "blocked": "held in the retry schedule: a Retry-After holds the endpoint back",
}
#: A head dead-lettered, by the endpoint's order policy.
DEAD_LETTERED = {
    "block": "blocked: replay or discard the dead letter",
    "skip": "the next delivery of the key goes",
}


@dataclass(frozen=True)
class KeyLineView:
    """One ordering key with a delivery out: its head (event id, sequence number), how many
    deliveries wait behind it, and why the head waits."""

    key: str
    head_event: str
    head_sequence: int
    waiting: int
    #: Where the head is: ``dead_lettered``, ``scheduled`` or ``out`` (on a queue or in flight).
    where: str
    #: Dead-lettered: the dead letter's reason. Scheduled: the endpoint's hold (``paused``,
    #: ``breaker_open``, ``breaker_probe``, ``blocked``), "" when it waits for its own retry.
    reason: str
    #: When the wait ends, Unix seconds of Redis time: the hold's end, or the retry's due
    #: time; None when nothing but an operator ends it (a dead letter, a pause), or it is out.
    until: float | None
    #: The above in words.
    why: str


@dataclass(frozen=True)
class EndpointLines:
    """An endpoint's ordering keys with a delivery out, the most waiting first (a page of
    them), and its totals. ``policy`` is None for an endpoint that is not ordered."""

    endpoint_id: str
    policy: str | None
    keys_out: int
    waiting: int
    lines: list[KeyLineView]

    @property
    def ordered(self) -> bool:
        return self.policy is not None

    @property
    def more(self) -> int:
        """Keys out beyond the ones listed."""
        return max(0, self.keys_out - len(self.lines))


@dataclass(frozen=True)
class OrderedCounts:
    """One ordered endpoint's lines counted: keys with a delivery out, deliveries waiting
    behind their heads, and blocked keys (a head dead-lettered under policy ``block``) among
    the ``blocked_checked`` keys looked at."""

    endpoint_id: str
    policy: str
    keys_out: int
    waiting: int
    blocked: int
    blocked_checked: int

    def as_dict(self) -> dict[str, Any]:
        return {"endpoint_id": self.endpoint_id, "policy": self.policy,
                "keys_out": self.keys_out, "waiting": self.waiting, "blocked": self.blocked,
                "blocked_checked": self.blocked_checked}


def where_head_waits(letter: DeadLetter | None, due: float | None, hold: str,
                     hold_ends: float | None, policy: str) -> tuple[str, str, float | None, str]:
    """(where, reason, until, why) of a head: its dead letter (or None), its due time in the
    retry schedule (Unix seconds, or None when not there), and the endpoint's hold (``""``:
    none) with when it ends (None: when an operator ends it)."""
    if letter is not None:
        return ("dead_lettered", letter.reason, None,
                f"dead-lettered ({letter.reason}): {DEAD_LETTERED.get(policy, '')}")
    if due is None:
        return "out", "", None, "on the queue or in flight"
    if hold in HOLDS:
        return "scheduled", hold, hold_ends, HOLDS[hold]
    return "scheduled", "", due, "in the retry schedule: waiting for its retry"


def _endpoint_hold(client: Any, endpoint_id: str) -> tuple[str, float | None]:
    """The endpoint's hold by the rule admit.lua applies (hold.lua), and when it ends (Unix
    seconds of Redis time; None for a pause, which lasts until resumed)."""
    why, wait_ms, _ = client.register_script(store.load_script("hold"))(
        keys=[keys.breaker_key(endpoint_id)])
    if not why or why == "paused":
        return why or "", None
    return why, store.redis_time(client) + int(wait_ms) / 1000.0


def _explained(client: Any, endpoint: Endpoint, lines: list[KeyLine]) -> list[KeyLineView]:
    """``lines`` with why each head waits: its dead letter, its due time in the schedule and
    the endpoint's hold, each read once for all of them."""
    if not lines:
        return []
    ids = [f"{endpoint.id}/{line.head_event}" for line in lines]
    letters = DeadLetterQueue(client).get_many(ids)
    dues = client.zmscore(RetrySchedule(client).shard_of(endpoint.id).due, ids)
    hold, hold_ends = _endpoint_hold(client, endpoint.id)
    return [KeyLineView(line.key, line.head_event, line.head_sequence, line.waiting,
                        *where_head_waits(letters.get(entry_id),
                                          None if due is None else due / 1000.0, hold,
                                          hold_ends, endpoint.order_policy))
            for line, entry_id, due in zip(lines, ids, dues, strict=True)]


def key_lines(actor: Actor, endpoint_id: str, *, limit: int = 50) -> EndpointLines:
    """The endpoint's ordering keys with a delivery out, the most waiting first (at most
    ``limit``), each with its head and why it waits; an endpoint that is not ordered has
    none (``policy`` None)."""
    endpoint = require_endpoint(actor, endpoint_id)
    if not endpoint.ordered:
        return EndpointLines(endpoint.id, None, 0, 0, [])
    order = OrderLines()
    keys_out, waiting = order.counts(endpoint.id)
    found = order.lines(endpoint.id, limit=bounded_limit(limit))
    return EndpointLines(endpoint.id, endpoint.order_policy, keys_out, waiting,
                         _explained(order.redis, endpoint, found))


def _blocked(dead_lettered: set[str], counts: LineCounts) -> tuple[int, int]:
    """(blocked keys, keys looked at): the sampled heads among the ``dead_lettered`` entry
    ids, under policy ``block``; under ``skip`` no key blocks, so all are known."""
    if counts.policy != "block":
        return 0, counts.keys_out
    return (sum(1 for _, event_id in counts.sampled_heads
                if f"{counts.endpoint_id}/{event_id}" in dead_lettered),
            len(counts.sampled_heads))


def ordered_counts(actor: Actor) -> list[OrderedCounts]:
    """Every ordered endpoint in scope, by id, with its keys out, deliveries waiting and
    blocked keys (among the first :data:`BLOCKED_SAMPLE` keys): two pipelined reads for all
    of them, and one more per dead-letter shard."""
    order = OrderLines()
    counted = [counts for counts in order.census(ordered_ids(order.redis), sample=BLOCKED_SAMPLE)
               if actor.sees_app(counts.app)]
    wanted = [f"{counts.endpoint_id}/{event_id}" for counts in counted
              if counts.policy == "block" for _, event_id in counts.sampled_heads]
    dead_lettered = set(DeadLetterQueue(order.redis).get_many(wanted)) if wanted else set()
    return [OrderedCounts(counts.endpoint_id, counts.policy, counts.keys_out, counts.waiting,
                          *_blocked(dead_lettered, counts))
            for counts in counted]
