"""The index of disabled endpoints: what the console's overview lists, every one of them,
without reading every endpoint.

``hookline:endpoints:disabled``, a sorted set: endpoint id -> Unix seconds it was disabled
(or first seen disabled). An endpoint's hash stays the truth (``enabled``,
``disabled_reason``, ``disabled_at``); the index only says where to look, and its readers
check each member against the hash, so a member left behind (an endpoint enabled or removed
by a process that died before it updated the index) is never shown, and is dropped when read.
Who keeps it:

- ``EndpointRegistry.disable`` adds, ``enable`` and ``remove`` drop (after the hash's write);
- a 410 disables the endpoint inside settle.lua: ``Gate.settle`` adds it right after;
- every delivery that admit.lua turns away because its endpoint is disabled adds it again
  (ZADD NX: the time stays the first one), so a worker killed between a 410's settle and its
  index write leaves it out only until that endpoint's next delivery;
- :func:`rebuild` (a worker's start) adds every disabled endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from hookline.store import keys

#: Disabled endpoints by when they were disabled (not hash-tagged: one key for all).
DISABLED_KEY = "hookline:endpoints:disabled"
#: The fields a reader checks in each member's hash.
FIELDS = ("url", "enabled", "disabled_reason", "disabled_at", "disabled_by", "app")


def mark(redis_client: Any, endpoint_id: str, at: float | None = None, *,
         keep_first: bool = False) -> None:
    """``endpoint_id`` is disabled since ``at`` (now when None). ``keep_first``: an earlier
    time already indexed stays."""
    redis_client.zadd(DISABLED_KEY, {endpoint_id: time.time() if at is None else at},
                      nx=keep_first)


def clear(redis_client: Any, endpoint_id: str) -> None:
    redis_client.zrem(DISABLED_KEY, endpoint_id)


def count(redis_client: Any) -> int:
    """Members indexed (a member left behind counts until a reader drops it)."""
    return int(redis_client.zcard(DISABLED_KEY))


def disabled(redis_client: Any, *, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` disabled endpoints, the latest disabled first: each one's id and the
    fields of its hash (:data:`FIELDS`), checked (members whose endpoint is enabled or gone
    are dropped from the index, not returned)."""
    ids = [str(member) for member in redis_client.zrevrange(DISABLED_KEY, 0, max(0, limit - 1))]
    if not ids:
        return []
    pipe = redis_client.pipeline(transaction=False)
    for endpoint_id in ids:
        pipe.hmget(keys.endpoint_key(endpoint_id), FIELDS)
    found, stale = [], []
    for endpoint_id, values in zip(ids, pipe.execute(), strict=True):
        data = dict(zip(FIELDS, values, strict=True))
        if not data["url"] or data["enabled"] != "0":
            stale.append(endpoint_id)
            continue
        found.append({"id": endpoint_id, **data})
    if stale:
        redis_client.zrem(DISABLED_KEY, *stale)
    return found


def rebuild(redis_client: Any, endpoint_ids: Iterable[str], *, batch: int = 500) -> int:
    """Index every disabled endpoint among ``endpoint_ids`` (every registered one, at a
    worker's start): reads each one's ``enabled`` and ``disabled_at`` a batch at a time.
    Nothing is dropped here (an endpoint disabled meanwhile would be): :func:`disabled`
    drops the members left behind. Returns how many are disabled."""
    ids = list(endpoint_ids)
    found: dict[str, float] = {}
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]
        pipe = redis_client.pipeline(transaction=False)
        for endpoint_id in chunk:
            pipe.hmget(keys.endpoint_key(endpoint_id), ("enabled", "disabled_at"))
        for endpoint_id, (enabled, disabled_at) in zip(chunk, pipe.execute(), strict=True):
            if enabled == "0":
                found[endpoint_id] = float(disabled_at or 0) or time.time()
    if found:
        redis_client.zadd(DISABLED_KEY, found, nx=True)
    return len(found)
