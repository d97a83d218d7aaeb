"""What a consuming process holds for each message it took from Hookline's Redis: one ledger.

consume.lua takes a message and records it in the same step, as one member of the unacked
records set (hookline/transport/records.py). From then on this process holds it, and one
:class:`Entry` in its channel's :class:`Ledger` (kept by the channel's QoS,
hookline/transport/unacked.py) says all it knows of it: the member, the delivery tag, the
channel, whether the ledger still holds it, and why the member is gone when it is (:class:`Gone`):

- **settled**: a delivered event's settle removed the member in the step that marked the event
  done (settle.lua): the message is acknowledged, and Celery's acknowledgement after the task
  sends nothing more;
- **fenced**: the member was gone when this process looked (its settle was refused, or
  :meth:`Entry.still_ours` found it restored to another worker: this process was declared dead
  meanwhile, hookline/transport/liveness.py);
- **waiting**: :meth:`Entry.wait_share` moved the message to its endpoint's waiting list
  (wait_share.lua), where consume.lua takes it when the endpoint is back under its cap.

The kombu callbacks (append, ack, reject, restore) ask the ledger by delivery tag, within one
channel. The task gets its message's entry from its request (hookline/worker/request.py), never
by a lookup of its own, and hands it to the delivery engine, which treats it as opaque and
settles through it (:meth:`Entry.settle`): the entry gives the gate its :class:`Receipt
<hookline.store.gates.Receipt>`, plain data, and reads what the gate answers. The store never
calls back into the transport. Where there is no entry (RabbitMQ, a broker elsewhere, a message
in kombu's own layout, a task run in a prefork child), Celery's acknowledgement does it after
the task.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kombu.utils.json import dumps, loads

from hookline.store.keys import (
    FAIR_WAITING_KEY,
    doorbell_key,
    endpoint_key,
    fair_waiting_key,
    leases_key,
)
from hookline.transport.lua import WAIT_SHARE
from hookline.transport.records import member_owner, parse_member, records_key

if TYPE_CHECKING:
    from hookline.store.gates import Gate, Receipt, Settlement

# A process that only publishes loads this module with the transport (unacked.py) but never
# consumes: the gates are imported where a settle needs them.


class Gone(enum.StrEnum):
    """Why a held message's member is no longer in the records set (module docstring)."""

    SETTLED = "settled"
    FENCED = "fenced"
    WAITING = "waiting"


def _not_held() -> None:
    """What an entry becomes in another process (see :meth:`Entry.__reduce__`)."""
    return None


class Entry:
    """One message a channel of this process holds with a records-set member.

    ``tag``: its delivery tag; ``member``: its member of ``records_key``, as Redis sent it
    (the acknowledgement removes these bytes); ``channel``: the kombu channel that took it.
    """

    __slots__ = ("accepted", "channel", "gone", "held", "member", "records_key", "tag")

    def __init__(self, channel: Any, records_key: str, tag: str, member: bytes) -> None:
        self.channel = channel
        self.records_key = records_key
        self.tag = tag
        self.member = member
        #: kombu's QoS took it over (:meth:`Ledger.accept`); until then the channel is handing
        #: it to its consumer.
        self.accepted = False
        #: Why its member is gone already (None: still there as far as this process knows);
        #: once gone, its acknowledgement sends nothing.
        self.gone: Gone | None = None
        #: The ledger still holds it (False once acknowledged, rejected, restored or forgotten).
        self.held = True

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        """An entry is this process's: sent to a prefork child with the task's request, it
        arrives as None, and Celery's acknowledgement after the task does it, as on any broker."""
        return _not_held, ()

    @property
    def receipt(self) -> Receipt:
        """What the gate folds into the settle: the member, the fence and the acknowledgement."""
        from hookline.store.gates import Receipt

        return Receipt(self.records_key, self.member)

    def settle(self, gate: Gate, endpoint_id: str, event_id: str, token: str, outcome: str,
               **options: Any) -> Settlement:
        """``gate.settle`` of the attempt's ``outcome`` (its options as they are) with this
        message's receipt: a delivered outcome removes the member (:attr:`Gone.SETTLED`), and
        one for a message whose member is gone is refused (:attr:`Gone.FENCED`)."""
        settlement = gate.settle(endpoint_id, event_id, token, outcome, receipt=self.receipt,
                                 **options)
        if settlement.fenced:
            self.gone = Gone.FENCED
        elif outcome == "delivered":
            self.gone = Gone.SETTLED
        return settlement

    def still_ours(self) -> bool:
        """Whether this process may attempt the message: it was taken under this process's
        current liveness registration, or, taken under an earlier one (this process found
        itself no longer registered), its member is still there, so nobody restored it (the
        registry was lost rather than this process declared dead). A process just back from
        a pause longer than most of the liveness window first waits for its heartbeat to say
        where it stands. When not, it is fenced: nothing is left to acknowledge."""
        from hookline.transport.liveness import process_liveness

        live = process_liveness(create=False)
        if live is not None and not live.fresh():
            live.wait_fresh(live.window)
        owner = member_owner(self.member)
        if not owner or live is None or owner == live.current().token:
            return True
        ours = False
        if self.held:
            with self.channel.conn_or_acquire() as client:
                ours = client.zscore(self.records_key, self.member) is not None
        if not ours:
            self.gone = Gone.FENCED
        return ours

    def wait_share(self, endpoint_id: str) -> bool:
        """Move the message to the front of its endpoint's waiting list (wait_share.lua):
        admit said the endpoint is at its cap. False when it cannot be (no longer held here,
        or no queue to go back to); then the caller parks it for a moment instead."""
        parsed = parse_member(self.member)
        if not self.held or parsed is None:
            return False
        channel = self.channel
        payload, exchange, routing_key = loads(parsed[1])
        queues = sorted(channel._lookup(exchange, routing_key))
        if not queues:
            return False
        priority = channel._get_message_priority(payload, reverse=False)
        # A new delivery tag: this very process may take it again while kombu still holds the
        # old one until its acknowledgement.
        payload["properties"]["delivery_tag"] = uuid.uuid4().hex
        waiting = f"{channel._q_for_pri(queues[0], priority)}\n{dumps(payload)}"
        with channel.conn_or_acquire() as client:
            moved = WAIT_SHARE.run(client, records=self.records_key,
                                   waiting=fair_waiting_key(endpoint_id),
                                   waiting_set=FAIR_WAITING_KEY, endpoint=endpoint_key(endpoint_id),
                                   doorbell=doorbell_key(queues[0]),
                                   leases=leases_key(endpoint_id), member=self.member,
                                   entry=waiting, endpoint_id=endpoint_id)
        # moved, or gone (restored elsewhere): nothing left to acknowledge, not parked here
        self.gone = Gone.WAITING if moved else Gone.FENCED
        return True


class Ledger:
    """The messages one consuming channel holds with a records-set member, by delivery tag
    (kept by the channel's QoS; module docstring)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self._entries: dict[str, Entry] = {}

    @property
    def records_key(self) -> str:
        return records_key(self.channel.unacked_key)

    def __contains__(self, tag: object) -> bool:
        return tag in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def take(self, tag: str, member: bytes) -> Entry:
        """consume.lua took the message of ``tag`` and recorded it as ``member``: held from
        now on, on its way to its consumer."""
        entry = self._entries[tag] = Entry(self.channel, self.records_key, tag, member)
        return entry

    def accept(self, tag: str) -> Entry | None:
        """kombu's QoS takes the message of ``tag`` over (``QoS.append``): its entry, or None
        for a message this ledger never took (kombu's own layout)."""
        entry = self._entries.get(tag)
        if entry is not None:
            entry.accepted = True
        return entry

    def entry(self, tag: str) -> Entry | None:
        return self._entries.get(tag)

    def release(self, tag: str) -> Entry | None:
        """The ledger lets the message of ``tag`` go (acknowledged, rejected, restored, or
        forgotten): its entry, no longer held, or None when it held none."""
        entry = self._entries.pop(tag, None)
        if entry is not None:
            entry.held = False
        return entry

    def release_all(self) -> None:
        for tag in list(self._entries):
            self.release(tag)

    def members(self) -> set[bytes]:
        """The records-set members of every message held, accepted or on its way."""
        return {bytes(entry.member) for entry in self}


def entry_of(message: Any) -> Entry | None:
    """The entry of a kombu message a channel of this process holds with a records-set member
    (the consuming process, when it receives it); None on any other broker or layout."""
    ledger = getattr(getattr(message, "channel", None), "qos", None)
    ledger = getattr(ledger, "ledger", None)
    return ledger.entry(message.delivery_tag) if isinstance(ledger, Ledger) else None
