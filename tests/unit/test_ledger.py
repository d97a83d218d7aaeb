"""The ledger of what a consuming channel holds (hookline/transport/ledger.py), without Redis:
an entry lives from the take to its release, the request carries it to the task in the process
that took the message, and it never crosses into another process (a prefork child gets None).
Its settle, fence and acknowledgement against Redis: tests/store/test_broker.py."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from celery.app.task import Context

from hookline.transport.ledger import Entry, Ledger, entry_of
from hookline.worker.request import ENTRY_KEY, held_entry

CHANNEL = SimpleNamespace(unacked_key="unacked")


def test_an_entry_is_held_from_its_take_to_its_release() -> None:
    ledger = Ledger(CHANNEL)
    taken = ledger.take("tag-1", b"member-1")
    assert "tag-1" in ledger and taken.held and not taken.accepted and taken.gone is None
    assert taken.records_key == "unacked_records" and taken.channel is CHANNEL
    assert ledger.accept("tag-1") is taken and taken.accepted
    ledger.take("tag-2", b"member-2")  # on its way to its consumer: held all the same
    assert ledger.members() == {b"member-1", b"member-2"}
    assert ledger.release("tag-1") is taken and not taken.held
    assert ledger.release("tag-1") is None and ledger.entry("tag-1") is None
    assert ledger.accept("kombus-own-layout") is None
    ledger.release_all()
    assert list(ledger) == [] and ledger.members() == set()


def test_a_message_on_another_broker_has_no_entry() -> None:
    ledger = Ledger(CHANNEL)
    ledger.take("tag-1", b"member-1")
    ours = SimpleNamespace(unacked_key="unacked", qos=SimpleNamespace(ledger=ledger))
    assert entry_of(SimpleNamespace(channel=ours, delivery_tag="tag-1")) is not None
    assert entry_of(SimpleNamespace(channel=ours, delivery_tag="tag-2")) is None
    rabbitmq = SimpleNamespace()  # py-amqp's channel has no QoS object
    assert entry_of(SimpleNamespace(channel=rabbitmq, delivery_tag=1)) is None


def test_the_task_reads_its_entry_from_its_request() -> None:
    entry = Ledger(CHANNEL).take("tag-1", b"member-1")
    assert held_entry(Context({"id": "t-1", ENTRY_KEY: entry})) is entry
    assert held_entry(Context({"id": "t-1"})) is None
    # A header of that name is no entry.
    assert held_entry(Context({"id": "t-1", ENTRY_KEY: "forged"})) is None


def test_an_entry_sent_to_a_prefork_child_arrives_as_none() -> None:
    entry = Entry(CHANNEL, "unacked_records", "tag-1", b"member-1")
    request = pickle.loads(pickle.dumps({"id": "t-1", ENTRY_KEY: entry}))
    assert request[ENTRY_KEY] is None and held_entry(Context(request)) is None
