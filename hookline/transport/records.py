"""The unacked record of Hookline's Redis broker: its format, and the readers that count it.

kombu records a message a worker holds twice: the record ``[message, exchange, routing key]``
in the ``unacked`` hash under its delivery tag, and the tag in the ``unacked_index`` sorted set.
Hookline's record lives in the member of a sorted set of its own, ``<unacked_key>_records``
(:func:`record_member`), scored with the time it was taken: consume.lua writes it, restore.lua
and the acknowledgement remove it (hookline/transport/unacked.py). Readers (``bench/``,
tests, an operator) count both layouts: :func:`held_count`, :func:`held_messages`.
"""

from __future__ import annotations

import json
from typing import Any

from kombu.utils.encoding import bytes_to_str

#: kombu's default ``unacked_key`` (its hash of records) and ``unacked_index_key``.
KOMBU_UNACKED_KEY = "unacked"
KOMBU_UNACKED_INDEX_KEY = "unacked_index"
#: The records set of a channel whose ``unacked_key`` is kombu's default.
UNACKED_RECORDS_KEY = f"{KOMBU_UNACKED_KEY}_records"

_TAG = json.JSONDecoder()


def records_key(unacked_key: str) -> str:
    """The records set beside kombu's hash ``unacked_key`` (a transport option)."""
    return f"{unacked_key}_records"


def record_member(tag: str, message: str, exchange: str, routing_key: str,
                  owner: str = "") -> str:
    """The member consume.lua writes: the owner's liveness token and a space (none for a
    consumer without one), the delivery tag as a JSON string, then kombu's record ``[message,
    exchange, routing key]`` (``message``: the raw JSON envelope). A JSON string ends at its
    first unescaped quote, so no tag can run into the record."""
    head = f"{owner} " if owner else ""
    return (head + json.dumps(tag)
            + f"[{message},{json.dumps(exchange)},{json.dumps(routing_key)}]")


def parse_member(member: str | bytes) -> tuple[str, str] | None:
    """``(delivery tag, record JSON)`` of a records-set member; None for anything else (a
    bare tag of kombu's index, garbage)."""
    text = bytes_to_str(member)
    start = 0
    if not text.startswith('"'):
        start = text.find(' "', 0, 80) + 1
        if start == 0:
            return None
    try:
        tag, end = _TAG.raw_decode(text, start)
    except ValueError:
        return None
    if not isinstance(tag, str) or not text.startswith("[", end):
        return None
    return tag, text[end:]


def member_owner(member: str | bytes) -> str:
    """The liveness token of the process that took the message of ``member`` ('' for a
    record written without one: an earlier Hookline, no liveness)."""
    head = member[:80]
    if isinstance(head, bytes):
        head = head.decode("ascii", "replace")
    if head.startswith('"'):
        return ""
    space = head.find(" ")
    return head[:space] if space > 0 else ""


def held_count(client: Any, unacked_key: str = KOMBU_UNACKED_KEY) -> int:
    """Messages workers hold unacknowledged, in either layout (``client``: the broker's)."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(records_key(unacked_key))
    pipe.hlen(unacked_key)
    return sum(int(count) for count in pipe.execute())


def held_messages(client: Any, unacked_key: str = KOMBU_UNACKED_KEY) -> list[str]:
    """The raw records (``[message, exchange, routing key]`` JSON) of those messages."""
    records = [parsed[1] for member in client.zrange(records_key(unacked_key), 0, -1)
               if (parsed := parse_member(member)) is not None]
    return records + [bytes_to_str(record) for record in client.hvals(unacked_key)]
