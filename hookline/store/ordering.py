"""An ordered endpoint's lines, one per ordering key (``hookline.core.ordering`` says what
they promise; ``hookline/store/lua/piece_order.lua`` how they are kept).

The consume script lines a key's deliveries up behind its head, and the settle script lets the
next go when the head is delivered, each in its own step. This module does the rest from
outside a delivery: what a dead-lettered head does (the endpoint's ``order_policy``), a
discarded dead letter that blocked its key, putting the lines back on the queues when the
endpoint stops being ordered (or is disabled or removed), and what operators see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookline.core.messages import DELIVERY_QUEUE
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import ordered_ids
from hookline.store.lua import HOLD, ORDER

#: Heads read per round trip when the lines are listed or released.
_PAGE = 500
#: Most keys read to list an endpoint's lines (``OrderLines.lines``).
LOOK_AT_MOST = 5000


@dataclass(frozen=True)
class KeyLine:
    """One ordering key with a delivery out: its head (event id, sequence) and how many wait
    behind it."""

    key: str
    head_event: str
    head_sequence: int
    waiting: int


@dataclass(frozen=True)
class LineCounts:
    """An ordered endpoint's lines counted: keys with a delivery out, deliveries waiting
    behind their heads, and the heads of a few keys (``(key, event id)``: the first ones a scan
    gives, at most the sample asked for)."""

    endpoint_id: str
    app: str | None
    policy: str
    keys_out: int
    waiting: int
    sampled_heads: tuple[tuple[str, str], ...] = ()


def _head(value: str) -> tuple[str, int]:
    event, _, sequence = value.rpartition("\n")
    return event, int(sequence or 0)


def endpoint_hold(redis_client: Any, endpoint_id: str) -> tuple[str, float | None]:
    """The endpoint's hold by the rule admit.lua applies (hold.lua: ``""`` when none,
    ``paused``, ``breaker_open``, ``breaker_probe`` or ``blocked``), and when it ends (Unix
    seconds of Redis time; None for a pause, which lasts until resumed, or no hold)."""
    why, wait_ms, _ = HOLD.run(redis_client, breaker=keys.breaker_key(endpoint_id))
    if not why or why == "paused":
        return why or "", None
    return why, store.redis_time(redis_client) + int(wait_ms) / 1000.0


def ordered_endpoints(redis_client: Any = None) -> list[str]:
    """The ids of the ordered endpoints (their set, each one's ``ordered`` field read to
    confirm it): one round trip for the set, one for the fields."""
    client = redis_client or store.client()
    ids = ordered_ids(client)
    pipe = client.pipeline(transaction=False)
    for endpoint_id in ids:
        pipe.hget(keys.endpoint_key(endpoint_id), "ordered")
    return [endpoint_id for endpoint_id, ordered in zip(ids, pipe.execute(), strict=True)
            if ordered == "1"]


class OrderLines:
    """The lines of ordered endpoints in Hookline's Redis (which is the broker's)."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()
        self._order: Any = None

    def _script(self, action: str, ordering_key: str, event_id: str | None = None, *,
                endpoint_id: str) -> int:
        if self._order is None:
            self._order = ORDER.register(self.redis)
        return int(self._order(endpoint=keys.endpoint_key(endpoint_id),
                               doorbell=keys.doorbell_key(DELIVERY_QUEUE), action=action,
                               ordering_key=ordering_key, event_id=event_id))

    def policy(self, endpoint_id: str) -> str | None:
        """The endpoint's order policy (``block``, ``skip``), None when it is not ordered."""
        ordered, policy = self.redis.hmget(keys.endpoint_key(endpoint_id), "ordered",
                                           "order_policy")
        return (policy or "block") if ordered == "1" else None

    def head(self, endpoint_id: str, ordering_key: str) -> tuple[str, int] | None:
        found = self.redis.hget(keys.order_heads_key(endpoint_id), ordering_key)
        return _head(found) if found else None

    def advance(self, endpoint_id: str, ordering_key: str, event_id: str) -> bool:
        """``event_id``, the key's head, has gone for good: the next of the line goes."""
        return bool(self._script("advance", ordering_key, event_id, endpoint_id=endpoint_id))

    def release(self, endpoint_id: str) -> int:
        """Every line of the endpoint back onto its queue, in order, and no key with a head:
        how many deliveries went back."""
        moved = 0
        for line in self.lines(endpoint_id, budget=None):
            moved += self._script("release", line.key, endpoint_id=endpoint_id)
        return moved

    def lines(self, endpoint_id: str, *, limit: int | None = None,
              budget: int | None = LOOK_AT_MOST) -> list[KeyLine]:
        """The keys with a delivery out, those with the most waiting first (at most ``limit``).
        A line's length is one LLEN, a page of them per round trip; at most ``budget`` keys
        are read (None: every one), so that a page over an endpoint of a million keys stays
        bounded: then the ones shown are the most waiting among those read."""
        found: list[KeyLine] = []
        heads = keys.order_heads_key(endpoint_id)
        batch: list[tuple[str, str]] = []
        for ordering_key, value in self.redis.hscan_iter(heads, count=_PAGE):
            batch.append((ordering_key, value))
            if len(batch) >= _PAGE:
                found += self._measured(endpoint_id, batch)
                batch = []
                if budget is not None and len(found) >= budget:
                    break
        found += self._measured(endpoint_id, batch)
        found.sort(key=lambda line: (-line.waiting, line.key))
        return found if limit is None else found[:limit]

    def _measured(self, endpoint_id: str, batch: list[tuple[str, str]]) -> list[KeyLine]:
        pipe = self.redis.pipeline(transaction=False)
        for ordering_key, _ in batch:
            pipe.llen(keys.order_line_key(endpoint_id, ordering_key))
        return [KeyLine(ordering_key, *_head(value), int(waiting))
                for (ordering_key, value), waiting in zip(batch, pipe.execute(), strict=True)]

    def counts(self, endpoint_id: str) -> tuple[int, int]:
        """(keys with a delivery out, deliveries waiting in all the lines): two reads."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hlen(keys.order_heads_key(endpoint_id))
        pipe.hget(keys.endpoint_key(endpoint_id), "order_waiting")
        active, waiting = pipe.execute()
        return int(active), int(waiting or 0)

    def census(self, endpoint_ids: list[str], *, sample: int = 0) -> list[LineCounts]:
        """The counts of the ordered ones among ``endpoint_ids`` (one gone or not ordered is
        left out), and the heads of up to ``sample`` keys of each: one pipelined round trip,
        whatever the number of keys."""
        if not endpoint_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in endpoint_ids:
            pipe.hmget(keys.endpoint_key(endpoint_id), "url", "ordered", "order_policy", "app",
                       "order_waiting")
            pipe.hlen(keys.order_heads_key(endpoint_id))
            if sample:
                pipe.hscan(keys.order_heads_key(endpoint_id), 0, count=sample)
        replies = iter(pipe.execute())
        found = []
        for endpoint_id in endpoint_ids:
            (url, ordered, policy, app, waiting), active = next(replies), next(replies)
            heads = next(replies)[1] if sample else {}
            if url and ordered == "1":
                sampled = tuple((key, _head(value)[0]) for key, value in heads.items())
                found.append(LineCounts(endpoint_id, app or None, policy or "block",
                                        int(active), int(waiting or 0), sampled[:sample]))
        return found
