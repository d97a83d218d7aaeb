"""An endpoint's attempts in flight, kept as leases so that no count outlives what it counts.

Each admitted attempt adds its token to the endpoint's leases (``keys.leases_key``: a sorted
set scored with the end of the attempt's lease, admit.lua) and its settle removes it
(settle.lua; release_dead.lua for a dead process's). The endpoint hash's ``inflight`` field,
which fair shares, ``--max-in-flight``, the gauges and ``hookline stats`` read, is a count of
the set that the same scripts keep in step. A settle that never comes (Redis restarted under
a running attempt, the worker killed, a partition) leaves a lease that runs out by itself: the
scripts that decide by the count prune the set first when it says anything is in flight
(piece_leases.lua), and mend the count. The reconciler (``hookline.worker.reconciler``) does
the same sooner, and drops this process's own leases that it no longer runs, after Redis comes
back and on a periodic sweep
(docs/internals/counts.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hookline.core.messages import DELIVERY_QUEUE
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import registered_ids
from hookline.store.lua import RECONCILE_LEASES


@dataclass(frozen=True)
class Mended:
    """One endpoint's count before and after a reconciliation."""

    endpoint_id: str
    before: int
    after: int


def token_owner(token: str) -> str:
    """The process prefix of an attempt token (``<prefix>-<n>``, hookline.worker.tasks)."""
    return token.rpartition("-")[0]


class Leases:
    """The leases of every endpoint on one Redis (the state's). ``doorbell``: a
    reconciliation that frees a slot rings the consume doorbell, which lives in this Redis
    when it is the broker too (the default; the caller says: ``BrokerFace.doorbell``)."""

    def __init__(self, redis_client: Any = None, *, doorbell: bool = True) -> None:
        self.redis: Any = redis_client or store.client()
        self._doorbell = keys.doorbell_key(DELIVERY_QUEUE) if doorbell else None
        self._reconcile = RECONCILE_LEASES.register(self.redis)

    def counted(self) -> list[str]:
        """The endpoints whose count says something is in flight: the ones a sweep looks at
        (one pipelined read per registered endpoint; the scripts that add a lease count it in
        the same step, so an endpoint holding leases has a count)."""
        ids = registered_ids(self.redis)
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.hget(keys.endpoint_key(endpoint_id), "inflight")
        values = pipe.execute() if ids else []
        return [endpoint_id for endpoint_id, count in zip(ids, values, strict=True)
                if int(count or 0)]

    def holders(self, endpoint_ids: Iterable[str]) -> dict[str, list[str]]:
        """The attempt tokens holding leases at each endpoint, run out or not."""
        ids = list(endpoint_ids)
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.zrange(keys.leases_key(endpoint_id), 0, -1)
        return {endpoint_id: [_text(token) for token in tokens]
                for endpoint_id, tokens in zip(ids, pipe.execute() if ids else [], strict=True)}

    def reconcile(self, endpoint_id: str, *, drop: Iterable[str] = ()) -> Mended:
        """Drop the leases that ran out and those in ``drop`` (tokens no live process holds),
        mend the endpoint's count, and wake a consumer when deliveries wait for its share and
        it has room now."""
        before, after = self._reconcile(
            leases=keys.leases_key(endpoint_id), endpoint=keys.endpoint_key(endpoint_id),
            doorbell=self._doorbell, tokens=list(drop))
        return Mended(endpoint_id, int(before), int(after))


def unheld(holders: Mapping[str, list[str]], *, own: set[str], running: set[str]
           ) -> dict[str, list[str]]:
    """Per endpoint, the tokens of this process's attempts (prefixes ``own``) that are not in
    ``running``: their settle was lost (Redis went away under them). Pure: the reconciler
    reads ``holders`` before ``running``, so an attempt admitted meanwhile is never among
    them. Other processes' leases are left to run out, or to the liveness reaper
    (release_dead.lua) when their process is declared dead."""
    found: dict[str, list[str]] = {}
    for endpoint_id, tokens in holders.items():
        gone = [token for token in tokens
                if token_owner(token) in own and token not in running]
        if gone:
            found[endpoint_id] = gone
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
