"""Tests' access to an event's delivery record (``hookline.store.delivery``): what a worker's
death or the passing of time does to it, done directly."""

from __future__ import annotations

import json
from typing import Any

from hookline.store import keys


def _rewrite(client: Any, endpoint_id: str, event_id: str, change: dict[str, Any]) -> None:
    key = keys.delivery_key(endpoint_id, event_id)
    head, newline, rest = (client.get(key) or "{}").partition("\n")
    state = {**json.loads(head), **change}
    client.set(key, json.dumps({k: v for k, v in state.items() if v is not None})
               + newline + rest, keepttl=True)


def expire_lease(client: Any, endpoint_id: str, event_id: str) -> None:
    """As if the event's in-flight lease had run out (in its record and the endpoint's
    leases)."""
    head = (client.get(keys.delivery_key(endpoint_id, event_id)) or "{}").partition("\n")[0]
    token = json.loads(head).get("t")
    if token:
        client.zadd(keys.leases_key(endpoint_id), {token: 1}, xx=True)
    _rewrite(client, endpoint_id, event_id, {"lu": 1})


def set_starts(client: Any, endpoint_id: str, event_id: str, starts: int) -> None:
    """As if ``starts`` attempts had started and never settled, just now."""
    seconds, micros = client.time()
    _rewrite(client, endpoint_id, event_id,
             {"s": starts, "su": seconds * 1000 + micros // 1000 + 60_000})


def lease_seconds_left(client: Any, endpoint_id: str, event_id: str) -> float:
    """Seconds until the event's lease ends (Redis time), 0 when none is held."""
    head = (client.get(keys.delivery_key(endpoint_id, event_id)) or "{}").partition("\n")[0]
    state = json.loads(head)
    if not state.get("t"):
        return 0.0
    seconds, micros = client.time()
    return max(0.0, (state["lu"] - (seconds * 1000 + micros // 1000)) / 1000.0)
