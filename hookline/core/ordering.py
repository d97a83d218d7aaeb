"""Ordered endpoints: what they promise, the names they use. Pure: no Redis.

An endpoint marked ordered (``hookline endpoint add|update ID --ordered``) delivers the events
of one ordering key (``send_webhook(..., ordering_key=...)``, ``publish(...,
ordering_key=...)``; default: the endpoint itself) one at a time, in the order they were
enqueued (for ``publish``, the order of the publish calls): the next goes only when the one
before it is delivered. That holds across retries, Retry-After and breaker holds, pause and
resume, several workers and a worker's crash (``hookline/store/lua/piece_order.lua``: the
broker's consume script keeps a key's later deliveries in the key's line, outside the queue,
holding no worker slot; the settle of a delivered head lets the next go in the same step).
Other keys, and other endpoints, go on meanwhile.

A head that is dead-lettered follows the endpoint's policy:

- ``block`` (the default): its key waits until the dead letter is replayed (it goes again as
  the key's head, then the rest follow) or discarded (``hookline dlq purge``: the next goes).
  The default because a receiver that needs order (a state machine, a ledger) is better
  served by a visible stop than by a silent gap.
- ``skip``: the next delivery goes at once; the receiver sees the gap in the sequence.

Every delivery of an ordered endpoint carries :data:`SEQUENCE_HEADER` (its place in its
key's line, 1, 2, ...) and :data:`KEY_HEADER`. A replayed dead letter keeps its sequence
number: under ``skip`` it joins the end of its key's line (after the events already waiting,
in the order replayed), and the receiver recognises it by a number below the ones it saw.

What a crash can cause, as for any delivery: a head sent and not yet recorded when its worker
died is sent again before the next (the same webhook-id twice in a row), never after it.
"""

from __future__ import annotations

#: What a key does when its head is dead-lettered.
POLICIES = ("block", "skip")
DEFAULT_POLICY = "block"
#: The headers every delivery of an ordered endpoint carries.
SEQUENCE_HEADER = "Hookline-Sequence"
KEY_HEADER = "Hookline-Ordering-Key"
