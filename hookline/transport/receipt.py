"""The acknowledgement of a delivery's message, folded into the settle of its attempt.

Where the broker is Hookline's own Redis, the message an attempt runs for is held as one member
of the unacked records set (hookline/transport/records.py). The transport hands the worker a
:class:`RecordReceipt` for it; the worker gives it to the delivery engine, which treats it as
opaque and passes it to ``Gate.settle``; the gate folds the receipt's keys and arguments into
settle.lua and tells it how the settle went (``hookline.store.gates.Receipt``). So, in one
atomic step and one round trip:

- a delivered outcome removes the member: the message is acknowledged as the event is marked
  done, and Celery's acknowledgement after the task sends nothing more (:meth:`QoS
  <hookline.transport.unacked.QoS>` knows it as *settled*);
- an outcome for a message whose member is gone is refused (``fenced``): it was restored to
  another worker, because this process was declared dead meanwhile
  (hookline/transport/liveness.py).

Neither the engine nor the gates know what the receipt holds: how a delivery is acknowledged
is the transport's to decide. Where there is no receipt (RabbitMQ, a broker elsewhere, a
message in kombu's own layout), Celery's acknowledgement does it after the task.
"""

from __future__ import annotations

import uuid
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
from hookline.transport.records import member_owner, parse_member

if TYPE_CHECKING:
    from hookline.transport.unacked import QoS


class HeldMessages:
    """The messages this process's channels hold with a records-set member, by delivery tag
    (one per process: :data:`HELD`): what a delivery's settle may acknowledge itself."""

    def __init__(self) -> None:
        self._by_tag: dict[str, QoS] = {}

    def hold(self, delivery_tag: str, qos: QoS) -> None:
        self._by_tag[delivery_tag] = qos

    def release(self, delivery_tag: str, qos: QoS | None = None) -> None:
        """Forget ``delivery_tag`` (only if ``qos`` holds it, when given)."""
        if qos is None or self._by_tag.get(delivery_tag) is qos:
            self._by_tag.pop(delivery_tag, None)

    def holder(self, delivery_tag: Any) -> QoS | None:
        return self._by_tag.get(delivery_tag) if isinstance(delivery_tag, str) else None


#: This process's held messages (the QoS of each consuming channel records them).
HELD = HeldMessages()


class RecordReceipt:
    """What acknowledges one held message: its member in the unacked records set
    ``records_key``. Meets ``hookline.store.gates.Receipt``: settle.lua takes the set as its
    ``records`` and the member and whether to remove it as ``member`` and ``acknowledge``.

    ``delivery_tag``: the message's tag in this process ('' for a receipt made by hand, as
    tests do: then nothing is told to a channel)."""

    def __init__(self, records_key: str, member: bytes, delivery_tag: str = "") -> None:
        self.records_key = records_key
        self.member = member
        self.delivery_tag = delivery_tag

    def settle_keys(self) -> list[str]:
        return [self.records_key]

    def settle_args(self, outcome: str) -> list[Any]:
        """The member (the fence: no member, no outcome) and '1' to remove it, only for a
        delivered outcome: any other leaves the message to Celery's ack or reject."""
        return [self.member, "1" if outcome == "delivered" else "0"]

    def after_settle(self, outcome: str, *, fenced: bool) -> None:
        """The settle ran: a delivered outcome removed the member, a fenced one found it gone
        (or another attempt holding the lease); either way the acknowledgement sends nothing."""
        if fenced or outcome == "delivered":
            self.settled()

    def settled(self) -> None:
        """The member is gone (removed by a settle, or restored to another worker): the
        channel's acknowledgement of the message sends nothing more to Redis."""
        qos = HELD.holder(self.delivery_tag)
        if qos is not None:
            qos.mark_settled(self.delivery_tag)

    def still_ours(self) -> bool:
        """Whether this process may attempt the message: it was taken under this process's
        current liveness registration, or, taken under an earlier one (this process found
        itself no longer registered), its member is still there, so nobody restored it (the
        registry was lost rather than this process declared dead). A process just back from
        a pause longer than most of the liveness window first waits for its heartbeat to say
        where it stands. When not, nothing is left to acknowledge (:meth:`settled`)."""
        from hookline.transport.liveness import process_liveness

        live = process_liveness(create=False)
        if live is not None and not live.fresh():
            live.wait_fresh(live.window)
        owner = member_owner(self.member)
        if not owner or live is None or owner == live.current().token:
            return True
        qos = HELD.holder(self.delivery_tag)
        ours = False
        if qos is not None:
            with qos.channel.conn_or_acquire() as client:
                ours = client.zscore(self.records_key, self.member) is not None
        if not ours:
            self.settled()
        return ours


def receipt_for(delivery_tag: Any) -> RecordReceipt | None:
    """The receipt of the message with ``delivery_tag`` when a channel of this process holds
    it with a records-set member (the consuming process runs the task: the threads or solo
    pool), else None."""
    qos = HELD.holder(delivery_tag)
    member = qos.member_of(delivery_tag) if qos is not None else None
    return None if qos is None or member is None else RecordReceipt(qos.records_key, member,
                                                                    delivery_tag)


def wait_for_share(delivery_tag: Any, endpoint_id: str) -> bool:
    """Move the message of ``delivery_tag`` (held by this process, the broker being Hookline's
    Redis) to the front of its endpoint's waiting list (wait_share.lua): admit said the
    endpoint is at its cap. False when it cannot be (not held here with a records-set
    member); then the caller parks it for a moment instead."""
    qos = HELD.holder(delivery_tag)
    member = qos.member_of(delivery_tag) if qos is not None else None
    parsed = parse_member(member) if member is not None else None
    if qos is None or member is None or parsed is None:
        return False
    channel = qos.channel
    payload, exchange, routing_key = loads(parsed[1])
    queues = sorted(channel._lookup(exchange, routing_key))
    if not queues:
        return False
    priority = channel._get_message_priority(payload, reverse=False)
    # A new delivery tag: this very process may take it again while kombu still holds the
    # old one until its acknowledgement.
    payload["properties"]["delivery_tag"] = uuid.uuid4().hex
    entry = f"{channel._q_for_pri(queues[0], priority)}\n{dumps(payload)}"
    with channel.conn_or_acquire() as client:
        WAIT_SHARE.run(client, records=qos.records_key, waiting=fair_waiting_key(endpoint_id),
                       waiting_set=FAIR_WAITING_KEY, endpoint=endpoint_key(endpoint_id),
                       doorbell=doorbell_key(queues[0]), leases=leases_key(endpoint_id),
                       member=member, entry=entry, endpoint_id=endpoint_id)
    # moved, or gone (restored elsewhere): nothing left to acknowledge, not parked here
    qos.mark_settled(delivery_tag)
    return True
