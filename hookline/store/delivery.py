"""One event's delivery record at one endpoint (``hookline:{ep}:delivery:<event>``).

The gates keep everything they know about one (endpoint, event) pair in one Redis string, so
the admit and settle scripts each read it with one GET and write it with one SET
(``hookline/store/lua/piece_record.lua`` is the format's other half): a JSON object on the
first line, then, when the history lives here (``Settings.history_in_record``), one JSON
attempt record per line, oldest first. The object's fields, each absent when unset:

- ``d``: the content digest the event id is bound to (``hookline.core.identity``);
- ``done``: 1 once delivered (the idempotency marker);
- ``t``, ``lu``: the in-flight lease's token and its end (ms of Redis time);
- ``s``, ``su``: attempts started and not settled, and until when they count (ms);
- ``hn``: attempt records that follow.

The record expires ``Settings.record_ttl`` seconds after its latest write. Hookline 0.2 kept
the done marker and the binding in keys of their own (``keys.done_key``, ``keys.digest_key``):
they are still honoured here, by admit and by enqueue.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hookline.store import keys


@dataclass(frozen=True)
class DeliveryRecord:
    digest: str = ""
    done: bool = False
    lease_token: str = ""
    #: Milliseconds of Redis time the lease ends at; 0 when none is held.
    lease_until: int = 0
    #: The attempt records (JSON text), oldest first, when they live in the record.
    attempts: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, text: str | None) -> DeliveryRecord:
        if not text:
            return cls()
        head, _, rest = text.partition("\n")
        try:
            state = json.loads(head)
        except ValueError:
            state = {}
        if not isinstance(state, dict):
            state = {}
        return cls(
            digest=str(state.get("d") or ""),
            done=bool(state.get("done")),
            lease_token=str(state.get("t") or ""),
            lease_until=int(state.get("lu") or 0) if state.get("t") else 0,
            attempts=tuple(line for line in rest.split("\n") if line) if rest else (),
        )


def delivered(redis_client: Any, pairs: Iterable[tuple[str, str]]) -> list[bool]:
    """For each (endpoint id, event id): whether it was delivered (its record's done marker,
    or Hookline 0.2's); one round trip for them all."""
    pairs = list(pairs)
    if not pairs:
        return []
    pipe = redis_client.pipeline(transaction=False)
    for endpoint_id, event_id in pairs:
        # GETs, not one MGET: a Redis Cluster pipeline refuses multi-key commands.
        pipe.get(keys.delivery_key(endpoint_id, event_id))
        pipe.get(keys.done_key(endpoint_id, event_id))
    replies = pipe.execute()
    return [bool(replies[2 * n + 1]) or DeliveryRecord.parse(replies[2 * n]).done
            for n in range(len(pairs))]


def read(redis_client: Any, endpoint_id: str, event_id: str) -> DeliveryRecord:
    return DeliveryRecord.parse(redis_client.get(keys.delivery_key(endpoint_id, event_id)))
