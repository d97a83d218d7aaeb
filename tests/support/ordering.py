"""An ordered endpoint's lines written as admit.lua and consume.lua leave them (the format
piece_order.lua states), for the tests of what operators see: a head per key and the
deliveries waiting behind it."""

from __future__ import annotations

from typing import Any

from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue


def line_up(client: Any, endpoint_id: str, key: str, events: list[str]) -> None:
    """Key ``key`` of ``endpoint_id``: ``events[0]`` is its head (sequence 1), the others
    wait behind it in order (sequences 2, 3, ...), each to go onto the queue ``hookline``."""
    client.hset(keys.order_heads_key(endpoint_id), key, f"{events[0]}\n1")
    for sequence, event_id in enumerate(events[1:], start=2):
        client.rpush(keys.order_line_key(endpoint_id, key),
                     f"{event_id}\n{sequence}\nhookline\n{{}}")
    client.hset(keys.order_seq_key(endpoint_id), key, len(events))
    client.hincrby(keys.endpoint_key(endpoint_id), "order_waiting", len(events) - 1)


def dead_letter_head(endpoint_id: str, event_id: str, reason: str = "rejected") -> None:
    """The head ``event_id`` dead-lettered, as the engine keeps it."""
    DeadLetterQueue().add(DeadLetter(endpoint_id=endpoint_id, event_id=event_id,
                                     event_type="order.updated", payload={"n": 1},
                                     reason=reason, last_status=400, attempts=1, sequence=1))
