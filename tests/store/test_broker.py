"""Hookline's broker transport (hookline/transport/redis.py) on a real Redis: a message is taken
off its queue and recorded as unacknowledged in one atomic step, so a consumer that dies at any
instant loses nothing; idle consumers wake on the doorbell; garbage on a queue is dead-lettered."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from hookline.store.gates import Gate, Receipt
from hookline.store.keys import FAIR_WAITING_KEY, doorbell_key, schedule_shards
from hookline.store.lua import schedule
from hookline.transport.ledger import Gone, entry_of
from hookline.transport.lua import CONSUME
from hookline.transport.records import (
    UNACKED_RECORDS_KEY,
    held_count,
    held_messages,
    member_owner,
    parse_member,
    record_member,
)
from tests.conftest import PrivateRedis, flushed, isolated_url, wait_until

URL = isolated_url(9)
QUEUE = Queue("broker-test", Exchange("broker-test"), routing_key="broker-test")
TRANSPORT = "hookline.transport.redis:Transport"
DOORBELL = doorbell_key("broker-test")

#: The retry schedule's keys consume.lua parks in: the one shard.
ONE_SHARD = schedule_shards(1)[0]


@pytest.fixture
def db():
    yield from flushed(URL)


def connect(**options) -> Connection:
    return connect_to(URL, **options)


def connect_to(url: str, **options) -> Connection:
    return Connection(url, transport=TRANSPORT, transport_options=options)


def publish(conn: Connection, body: dict) -> None:
    Producer(conn.channel(), exchange=QUEUE.exchange, routing_key=QUEUE.routing_key,
             serializer="json").publish(body, declare=[QUEUE])


def acking(conn: Connection, got: list) -> Consumer:
    """A consumer of the test queue that keeps each body in ``got`` and acknowledges it."""
    return Consumer(conn, [QUEUE], callbacks=[lambda body, m: (got.append(body), m.ack())])


def no_unacked_record(db: redis.Redis) -> bool:
    return (held_count(db) == 0 and db.zcard("unacked_index") == 0
            and db.zcard(UNACKED_RECORDS_KEY) == 0)


def drain_until(conn: Connection, condition, timeout: float = 10.0) -> None:
    """Drain events (each wait at most 1 s) until ``condition()`` holds or ``timeout`` ends."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=1)


@pytest.mark.slow
def test_a_message_is_recorded_unacked_before_its_reply_leaves_redis(db):
    """The consumer sends its take, then dies before reading the reply (the window in which
    kombu's BRPOP loses a message): the message is in the unacked records, and the restore
    sweep puts it back on its queue."""
    with connect(visibility_timeout=1) as conn:
        publish(conn, {"n": 1})
        assert db.llen("broker-test") == 1
        channel = conn.default_channel
        channel.basic_consume("broker-test", no_ack=False, callback=lambda m: None,
                              consumer_tag="t1")
        channel._waiting = False
        conn.transport.cycle._register_BRPOP(channel)  # sends the take on the consuming connection
        wait_until(lambda: db.llen("broker-test") == 0)
        channel.client.connection.disconnect()  # "dies": the reply is never read
        [member] = db.zrange(UNACKED_RECORDS_KEY, 0, -1)
        assert not db.exists("unacked", "unacked_index")  # one record, in the set only
        tag, record = parse_member(member)
        message, exchange, routing_key = json.loads(record)
        assert message["properties"]["delivery_tag"] == tag
        assert (exchange, routing_key) == ("broker-test", "broker-test")

        # A sweep after the visibility timeout brings it back, unchanged.
        wait_until(lambda: time.time() - db.zscore(UNACKED_RECORDS_KEY, member) > 1.0,
                   timeout=5)
        channel.qos.restore_visible(num=10, interval=1)
        assert db.llen("broker-test") == 1 and held_count(db) == 0

    with connect() as conn:
        got = []
        with acking(conn, got):
            conn.drain_events(timeout=5)
        assert got == [{"n": 1}]
        assert no_unacked_record(db)


def test_an_acknowledged_message_leaves_no_record_and_a_rejected_one_goes_back(db):
    with connect() as conn:
        publish(conn, {"n": 1})
        publish(conn, {"n": 2})
        seen = []

        def handle(body, message):
            seen.append(body["n"])
            if body["n"] == 1:
                message.ack()
            else:
                message.reject(requeue=True)

        # One message per consume call (a prefetch of one), so the requeued one is not
        # taken again within these two.
        with Consumer(conn, [QUEUE], callbacks=[handle], prefetch_count=1):
            conn.drain_events(timeout=5)
            conn.drain_events(timeout=5)
        assert seen == [1, 2]
        assert no_unacked_record(db)
        assert db.llen("broker-test") == 1  # the rejected one, back on its queue


def test_an_idle_consumer_wakes_on_the_doorbell_not_its_timeout(db):
    """With a 30 s blocking timeout, a message published while the consumer blocks still
    arrives within the 10 s drain: the push rang the doorbell."""
    with connect(brpop_timeout=30) as conn, connect() as producer_conn:
        got = []
        with acking(conn, got):
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)  # queue empty: now blocked on the doorbell
            assert conn.default_channel._waiting
            # This consumer's own connection is blocked (the suite's other workers may be too).
            wait_until(lambda: blocked_connection(db, conn.default_channel))
            publish(producer_conn, {"n": 7})
            drain_until(conn, lambda: got)  # the token wakes it, then it takes the message
        assert got == [{"n": 7}]


@pytest.mark.slow
def test_a_push_that_rings_no_doorbell_is_taken_after_the_blocking_timeout(db):
    """A producer on kombu's stock transport does not ring; its message is still taken."""
    with connect(brpop_timeout=1) as conn:
        got = []
        with acking(conn, got):
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)
            with Connection(URL) as stock:  # kombu's own Redis transport
                publish(stock, {"n": 3})
            drain_until(conn, lambda: got)
        assert got == [{"n": 3}]


def test_a_no_ack_consumer_leaves_no_unacked_record(db):
    with connect() as conn:
        publish(conn, {"n": 1})
        got = []
        with Consumer(conn, [QUEUE], no_ack=True, callbacks=[lambda body, m: got.append(body)]):
            conn.drain_events(timeout=5)
        assert got == [{"n": 1}]
        assert no_unacked_record(db)


def test_the_consume_script_is_loaded_again_after_a_script_flush(db):
    with connect() as conn:
        publish(conn, {"n": 1})
        db.script_flush()
        got = []
        with acking(conn, got):
            drain_until(conn, lambda: got)
        assert got == [{"n": 1}]


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of this test's own: its command counts are this test's alone."""
    server = PrivateRedis(tmp_path)
    client = server.start()
    yield server.url, client
    client.close()
    server.stop()


def idle_consumers(url: str, count: int, got: list, stop: threading.Event,
                   queue: Queue = QUEUE) -> list:
    """``count`` consumers of ``queue``, each on its own connection and thread, with a 30 s
    blocking timeout (no wake-up but a push's during a test)."""
    def consume() -> None:
        with Connection(url, transport=TRANSPORT, transport_options={"brpop_timeout": 30}
                        ) as conn, Consumer(conn, [queue], callbacks=[
                            lambda body, m: (got.append(body), m.ack())]):
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    conn.drain_events(timeout=0.3)

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def blocked_connection(client: redis.Redis, channel: Any) -> bool:
    """Whether ``channel``'s consuming connection is blocked on the doorbell."""
    host, port = channel.client.connection._sock.getsockname()[:2]
    return any(c["addr"] == f"{host}:{port}" and c["cmd"] in ("blmpop", "blpop")
               for c in client.client_list())


def blocked(client: redis.Redis) -> int:
    """Consumers blocked on the doorbell (BLMPOP; BLPOP before Redis 7)."""
    return sum(c["cmd"] in ("blmpop", "blpop") for c in client.client_list())


@pytest.mark.slow
def test_a_message_wakes_one_idle_consumer_not_all(private_redis):
    """Six idle consumers, messages published one at a time: each message wakes one of them,
    which takes it and waits again (one consume-script call per message), instead of all six
    (a doorbell every consumer reads: six or more calls per message)."""
    url, client = private_redis
    got: list = []
    stop = threading.Event()
    threads = idle_consumers(url, 6, got, stop)
    try:
        wait_until(lambda: blocked(client) == 6, what=lambda: client.client_list())
        client.config_resetstat()
        messages = 20
        with connect_to(url) as producer:
            for n in range(messages):
                publish(producer, {"n": n})
                wait_until(lambda n=n: len(got) == n + 1 and blocked(client) == 6,
                           what=lambda: (len(got), blocked(client)))
        calls = int(client.info("commandstats")["cmdstat_evalsha"]["calls"])
        assert sorted(body["n"] for body in got) == list(range(messages))
        assert calls / messages <= 1.5, f"{calls} consume calls for {messages} messages"
        assert not client.exists(DOORBELL)  # no token left behind
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


@pytest.mark.slow
def test_tokens_of_messages_taken_meanwhile_wake_no_one_later(private_redis):
    """Messages published while no consumer waits leave their tokens; the consumer that takes
    the messages and finds the queues empty clears them, so they wake nobody afterwards."""
    url, client = private_redis
    with connect_to(url) as producer:
        for n in range(5):
            publish(producer, {"n": n})
    assert client.llen(DOORBELL) == 5
    got: list = []
    stop = threading.Event()
    threads = idle_consumers(url, 1, got, stop)
    try:
        wait_until(lambda: len(got) == 5 and blocked(client) == 1)
        assert not client.exists(DOORBELL)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def envelope(tag: str) -> str:
    """A kombu message for the test queue, with delivery tag ``tag``."""
    return json.dumps({
        "body": "e30=", "content-encoding": "utf-8", "content-type": "application/json",
        "headers": {}, "properties": {
            "delivery_tag": tag, "body_encoding": "base64", "priority": 0,
            "delivery_info": {"exchange": "broker-test", "routing_key": "broker-test"}}})


def consume_once(db, owner: str = "") -> list:
    """One consume.lua call on the test queue: nothing parked, no fair shares, one message."""
    return CONSUME.run(
        db, records=UNACKED_RECORDS_KEY, **schedule(ONE_SHARD), wake=ONE_SHARD.wake,
        waiting_set=FAIR_WAITING_KEY, queues=["broker-test"],
        doorbells=[DOORBELL], endpoint_keys=[], now=repr(time.time()), park_held="0",
        max_total=1000, max_per_endpoint=1000, budget=200, queue_count=1, most=1, owner=owner,
        slots=0, dig_above=0, look_all="0", max_age=0, endpoints=[])


def test_the_doorbell_is_trimmed_as_messages_are_taken(db):
    """Producers push a token per message; while every consumer is busy nobody pops them.
    A take whose delivery tag ends in 0 (one in 16 of kombu's uuid tags) trims the list to
    1,000 tokens; the queue is not empty yet, so it is not emptied."""
    db.lpush(DOORBELL, *["1"] * 1500)
    db.lpush("broker-test", envelope("first-1"), envelope("second-0"), envelope("third-1"))
    def take() -> list:
        return consume_once(db)

    assert take()[:4] == ["message", "0", 1, "broker-test"]  # first-1: no trim
    assert db.llen(DOORBELL) == 1500
    assert take()[:4] == ["message", "0", 1, "broker-test"]  # second-0
    assert db.llen(DOORBELL) == 1000
    assert sorted(parse_member(m)[0] for m in db.zrange(UNACKED_RECORDS_KEY, 0, -1)) == [
        "first-1", "second-0"]
    take()
    assert take()[0] == "empty" and not db.exists(DOORBELL)


@pytest.mark.slow
def test_a_message_wakes_a_consumer_of_its_queue_not_one_of_another(private_redis):
    """Each queue has its doorbell: a consumer waiting longer on another queue (as a worker's
    does beside ``celery inspect``'s reply queue) is not handed this queue's token, which
    would leave the message until the 30 s timeout."""
    url, client = private_redis
    other = Queue("broker-other", Exchange("broker-other"), routing_key="broker-other")
    others: list = []
    got: list = []
    stop = threading.Event()
    threads = idle_consumers(url, 1, others, stop, other)
    try:
        wait_until(lambda: blocked(client) == 1)  # the other queue's consumer waits first
        threads += idle_consumers(url, 1, got, stop)
        wait_until(lambda: blocked(client) == 2)
        with connect_to(url) as producer:
            publish(producer, {"n": 1})
        wait_until(lambda: got, timeout=10)
        assert got == [{"n": 1}] and others == []
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def test_a_batched_publish_leaves_a_token_per_message(db):
    """kombu 5.7's ``Producer.batch()`` publishes through one pipeline: each message still
    pushes its queue's token."""
    with connect() as conn:
        producer = Producer(conn.channel(), exchange=QUEUE.exchange,
                            routing_key=QUEUE.routing_key, serializer="json")
        if not hasattr(producer, "batch"):
            pytest.skip("kombu before 5.7 has no batched publish")
        with producer.batch():
            for n in range(3):
                producer.publish({"n": n}, declare=[QUEUE])
        assert db.llen("broker-test") == 3 and db.llen(DOORBELL) == 3


# -- the unacked records (hookline/transport/unacked.py) --------------------------------------

@pytest.mark.parametrize("tag", ["3b0c8a0e-6f5e-4d1c-9f0a-5b7c2d1e9a40", 'a"quote', "x/y\\z",
                                 "caf\u00e9 \u2603", "[not a record]", ""])
def test_a_member_gives_back_its_tag_and_record_whatever_the_tag(db, tag):
    """The member consume.lua writes and the one :func:`record_member` builds agree, and
    parse back to the tag and kombu's record, for tags with quotes, slashes, non-ASCII."""
    message = json.loads(envelope(tag))
    item = json.dumps(message)
    db.lpush("broker-test", item)
    reply = consume_once(db, owner="0123abcd")
    member = reply[4]
    assert member.startswith("0123abcd ")
    assert db.zrange(UNACKED_RECORDS_KEY, 0, -1) == [member]
    parsed_tag, record = parse_member(member)
    assert parsed_tag == tag
    assert json.loads(record) == [message, "broker-test", "broker-test"]
    assert parse_member(record_member(tag, item, "broker-test", "broker-test")) == (tag, record)
    assert parse_member(tag) is None  # a bare tag of kombu's index is not a member


def test_the_acknowledgement_removes_the_member_with_one_command(private_redis):
    url, client = private_redis
    with connect_to(url) as conn:
        publish(conn, {"n": 1})
        held = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(m)]):
            conn.drain_events(timeout=5)
            assert client.zcard(UNACKED_RECORDS_KEY) == 1
            client.config_resetstat()
            held[0].ack()
            calls = {name: int(v["calls"]) for name, v in
                     client.info("commandstats").items()}
        assert client.zcard(UNACKED_RECORDS_KEY) == 0 and not client.exists("unacked")
        assert calls.get("cmdstat_zrem") == 1 and "cmdstat_hdel" not in calls
        assert "cmdstat_multi" not in calls


def test_a_backlog_comes_several_messages_per_consume_call_within_the_prefetch(
        private_redis):
    """Behind a backlog one consume call takes as many messages as the consumer's free
    prefetch slots allow (at most CONSUME_BATCH), each recorded unacknowledged, in order; the
    call that empties the queues empties the doorbell too, so the consumer blocks next."""
    url, client = private_redis
    with connect_to(url) as conn:
        for n in range(7):
            publish(conn, {"n": n})
        got: list[Any] = []
        held: list[Any] = []

        def handle(body: Any, message: Any) -> None:
            got.append(body["n"])
            if len(got) > 3:
                message.ack()
            else:
                held.append(message)

        with Consumer(conn, [QUEUE], callbacks=[handle], prefetch_count=3):
            client.config_resetstat()
            conn.drain_events(timeout=5)
            assert got == [0, 1, 2]  # the prefetch's three, in one call
            assert client.zcard(UNACKED_RECORDS_KEY) == 3 and client.llen("broker-test") == 4
            for message in held:
                message.ack()
            drain_until(conn, lambda: len(got) == 7)
            calls = {name: int(v["calls"]) for name, v in
                     client.info("commandstats").items()}
        assert got == list(range(7))
        assert calls["cmdstat_evalsha"] == 3, calls  # 3 + 3 + 1 messages
        assert no_unacked_record(client) and not client.exists(DOORBELL)


def test_a_failed_hand_over_puts_the_rest_of_the_batch_back_at_once(private_redis):
    """Should handing a message of a batch to its consumer fail, the messages after it go back
    on their queue at once (not after the visibility timeout) and are taken again."""
    url, client = private_redis
    with connect_to(url) as conn:
        for n in range(3):
            publish(conn, {"n": n})
        got: list[int] = []

        def handle(body, message):
            got.append(body["n"])
            if got == [0]:
                raise RuntimeError("the consumer broke")
            message.ack()

        with Consumer(conn, [QUEUE], callbacks=[handle]):
            with pytest.raises(RuntimeError):
                conn.drain_events(timeout=5)
            assert client.llen("broker-test") == 2 and client.zcard(UNACKED_RECORDS_KEY) == 1
            drain_until(conn, lambda: len(got) == 3)
        assert got == [0, 1, 2]


def test_a_record_settled_with_its_delivery_is_acknowledged_without_a_command(private_redis):
    """A delivered event's settle, through the message's entry in its channel's ledger
    (``entry_of``, as the worker's request reads it), removes the message's member: the entry
    is settled, the acknowledgement then sends nothing, and the ledger lets the entry go; a
    settled message that is rejected with requeue is not pushed back (it was delivered)."""
    url, client = private_redis
    gate = Gate(redis.Redis.from_url(url, decode_responses=True))
    with connect_to(url) as conn:
        publish(conn, {"n": 1})
        publish(conn, {"n": 2})
        held = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(m)]):
            drain_until(conn, lambda: len(held) == 2)
            entries = [entry_of(message) for message in held]
            for n, entry in enumerate(entries):
                assert entry is not None and entry.held and entry.gone is None
                assert entry.receipt == Receipt(UNACKED_RECORDS_KEY, entry.member)
                assert client.zscore(UNACKED_RECORDS_KEY, entry.member) is not None
                settlement = entry.settle(gate, "ep-1", f"evt-{n}", f"tok-{n}", "delivered")
                assert not settlement.fenced and entry.gone is Gone.SETTLED
                assert client.zscore(UNACKED_RECORDS_KEY, entry.member) is None
            client.config_resetstat()
            held[0].ack()
            calls = {name: int(v["calls"]) for name, v in
                     client.info("commandstats").items()}
            held[1].reject(requeue=True)
            ledger = conn.default_channel.qos.ledger
            assert list(ledger) == [] and ledger.entry("no-such-tag") is None
        assert set(calls) == {"cmdstat_config|resetstat"}, calls
        assert client.llen("broker-test") == 0 and no_unacked_record(client)
        assert all(entry_of(message) is None for message in held)
        assert not any(entry.held for entry in entries if entry is not None)


def test_an_outcome_for_a_restored_record_is_fenced_and_acknowledged_without_a_command(
        private_redis):
    """The member was restored to another worker while this one attempted: the settle
    through the entry is refused (fenced), and the acknowledgement sends nothing."""
    url, client = private_redis
    gate = Gate(redis.Redis.from_url(url, decode_responses=True))
    with connect_to(url) as conn:
        publish(conn, {"n": 1})
        held = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(m)]):
            drain_until(conn, lambda: len(held) == 1)
            entry = entry_of(held[0])
            assert entry is not None
            client.zrem(UNACKED_RECORDS_KEY, entry.member)  # restored elsewhere
            assert entry.settle(gate, "ep-1", "evt-1", "tok-1", "delivered").fenced
            assert entry.gone is Gone.FENCED
            client.config_resetstat()
            held[0].ack()
            calls = {name: int(v["calls"]) for name, v in
                     client.info("commandstats").items()}
        assert set(calls) == {"cmdstat_config|resetstat"}, calls
        assert not gate.is_delivered("ep-1", "evt-1")


def test_the_workers_request_carries_the_messages_entry_to_its_task(private_redis):
    """The worker's request (``TaskRequest``), made as the consumer receives a task message,
    puts the message's ledger entry where the task's ``self.request`` reads it back
    (``held_entry``); a message the ledger never took (a bare kombu message) gets none."""
    from celery.app.task import Context

    from hookline.worker.request import TaskRequest, held_entry

    url, _ = private_redis
    task = SimpleNamespace(ignore_result=True)
    with connect_to(url) as conn:
        Producer(conn.channel(), exchange=QUEUE.exchange, routing_key=QUEUE.routing_key,
                 serializer="json").publish([[], {}, {}], declare=[QUEUE],
                                            headers={"id": "t-1", "task": "hookline.deliver"})
        held = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(m)]):
            drain_until(conn, lambda: held)
            [message] = held
            request = TaskRequest(message, hostname="t@h", task=task)
            entry = held_entry(Context(request.request_dict))
            assert entry is not None and entry is entry_of(message)
            message.ack()
            assert not entry.held
        bare = SimpleNamespace(headers={"id": "t-2", "task": "hookline.deliver"}, body=([], {}, {}),
                               payload=([], {}, {}), content_type="application/json",
                               content_encoding="utf-8", delivery_info={}, properties={},
                               delivery_tag="t-2", channel=conn.default_channel)
        assert held_entry(Context(TaskRequest(bare, hostname="t@h", task=task,
                                              decoded=True).request_dict)) is None


def old_worker_holds(db: redis.Redis, tag: str, taken_at: float) -> None:
    """A message taken by a worker of the previous version (or kombu's stock transport): its
    record in kombu's hash, its tag in kombu's index."""
    db.hset("unacked", tag, json.dumps([json.loads(envelope(tag)), "broker-test",
                                        "broker-test"]))
    db.zadd("unacked_index", {tag: taken_at})


def test_the_sweep_restores_records_of_kombus_layout_only_once_overdue(db):
    """A rolling upgrade: an earlier worker's records (hash + index) are restored by the new
    sweep as kombu's would, once past the visibility timeout, and not before: the earlier
    worker may still hold them, and acknowledges them its own way (HDEL + ZREM by tag)."""
    old_worker_holds(db, "overdue-1", time.time() - 120)
    old_worker_holds(db, "held-1", time.time())
    old_worker_holds(db, "acked-1", time.time())
    with connect(visibility_timeout=60) as conn:
        channel = conn.default_channel
        QUEUE(channel).declare()  # its binding: where kombu's restore pushes
        channel.qos.restore_visible(num=10, interval=1)
        [restored] = [json.loads(item) for item in db.lrange("broker-test", 0, -1)]
        assert restored["properties"]["delivery_tag"] == "overdue-1"
        assert restored["headers"]["redelivered"] is True
        assert db.llen(DOORBELL) == 1  # it rings, as this transport's restores do
        assert sorted(db.hkeys("unacked")) == ["acked-1", "held-1"]
        assert db.zcard("unacked_index") == 2
    # The earlier worker acknowledges its own.
    db.pipeline(transaction=False).hdel("unacked", "acked-1").zrem("unacked_index",
                                                                   "acked-1").execute()
    assert db.hkeys("unacked") == ["held-1"]


def test_the_sweep_restores_an_overdue_member_once_and_leaves_a_fresh_one(db):
    """Two records of the new layout written by a worker that then died: the overdue one
    goes back on its queue (and rings), the other stays until it is overdue too; a second
    sweep restores nothing twice."""
    fresh = record_member("fresh-1", envelope("fresh-1"), "broker-test", "broker-test")
    overdue = record_member("late-1", envelope("late-1"), "broker-test", "broker-test")
    db.zadd(UNACKED_RECORDS_KEY, {fresh: time.time(), overdue: time.time() - 120})
    with connect(visibility_timeout=60) as conn:
        channel = conn.default_channel
        QUEUE(channel).declare()  # its binding: where kombu's restore pushes
        channel.qos.restore_visible(num=10, interval=1)
        channel.qos.restore_visible(num=10, interval=1)
    [restored] = [json.loads(item) for item in db.lrange("broker-test", 0, -1)]
    assert restored["properties"]["delivery_tag"] == "late-1"
    assert restored["properties"]["delivery_info"]["redelivered"] is True
    assert db.zrange(UNACKED_RECORDS_KEY, 0, -1) == [fresh]
    assert db.llen(DOORBELL) == 1


def test_a_member_acknowledged_meanwhile_is_not_restored(db):
    """The sweep's push happens only if the member is still there (restore.lua): a worker
    that acknowledged it first wins."""
    member = record_member("gone-1", envelope("gone-1"), "broker-test", "broker-test")
    with connect(visibility_timeout=60) as conn:
        channel = conn.default_channel
        QUEUE(channel).declare()  # its binding: where kombu's restore pushes
        with channel.conn_or_acquire() as client:
            assert channel.qos.restore_member(client, member) is False
    assert db.llen("broker-test") == 0 and not db.exists(DOORBELL)


def test_held_messages_go_back_at_close_and_count_in_both_layouts(db):
    """A consumer closing with messages it never acknowledged puts them back (kombu's
    restore at shutdown, one script call each); the readers' count sees both layouts."""
    old_worker_holds(db, "old-1", time.time())
    with connect() as conn:
        publish(conn, {"n": 1})
        publish(conn, {"n": 2})
        held = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(body)]):
            drain_until(conn, lambda: len(held) == 2)
            assert db.zcard(UNACKED_RECORDS_KEY) == 2
            assert held_count(db) == 3 and len(held_messages(db)) == 3
    assert db.zcard(UNACKED_RECORDS_KEY) == 0 and db.llen("broker-test") == 2
    assert held_count(db) == 1  # the earlier worker's, its own to acknowledge


@pytest.mark.slow
def test_with_a_global_keyprefix_the_records_and_the_sweep_are_kombus(db):
    """A ``global_keyprefix`` turns this transport back into kombu's BRPOP: the record is
    kombu's (prefixed hash and index) and the sweep is kombu's, which restores it."""
    with connect(global_keyprefix="pfx:", visibility_timeout=1) as conn:
        publish(conn, {"n": 1})
        held = []
        with Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(m)]):
            drain_until(conn, lambda: held)
            assert db.hlen("pfx:unacked") == 1 and not db.exists(UNACKED_RECORDS_KEY)
            channel = conn.default_channel
            channel.qos._delivered.clear()  # as if this worker had died: no restore at close
            time.sleep(1.2)
            channel.qos.restore_visible(num=10, interval=1)
        assert db.llen("pfx:broker-test") == 1 and db.hlen("pfx:unacked") == 0


@pytest.mark.slow
def test_a_requeue_redis_did_not_answer_leaves_the_message_to_the_heartbeat_not_held(tmp_path):
    """A reject with requeue while Redis is paused (a stalled host) fails after the timeout:
    the record stays in Redis, and the channel no longer counts the message as held, so this
    process's next look for its own orphans puts it back. Kept held, it came back only when
    its worker died (the soak: two events ten minutes late)."""
    import signal

    server = PrivateRedis(tmp_path)
    client = server.start()
    try:
        with Connection(server.url, transport=TRANSPORT,
                        transport_options={"socket_timeout": 1, "brpop_timeout": 0.2}) as conn:
            publish(conn, {"n": 1})
            got: list[Any] = []
            with Consumer(conn, [QUEUE], callbacks=[lambda body, m: got.append(m)]):
                wait_until(lambda: conn.drain_events(timeout=1) or got, timeout=10)
            qos = conn.default_channel.qos
            [message] = got
            owner = member_owner(next(iter(qos.held_members())))
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(redis.RedisError):
                    message.reject(requeue=True)
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert qos.held_members() == set()  # held by nobody now
            assert held_count(client) == 1  # still recorded
            assert qos.restore_own(owner, qos.held_members(), older_than=0) == 1
            assert held_count(client) == 0 and client.llen("broker-test") == 1
    finally:
        server.stop()
