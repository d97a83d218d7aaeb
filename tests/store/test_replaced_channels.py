"""A broker channel a reconnect replaced is let go: nothing of Hookline's keeps it alive.

A worker's consuming channel, starved of room (its prefetch full), registers its QoS to be
told when an attempt starts waiting on a receiver (hookline/core/attempts.py). Held strongly,
that registration kept every channel a Redis restart replaced for the life of the process,
with its table of unacknowledged messages, its ledger and its connection pools: the soak's
workers grew at every Redis fault (docs/operations/fault-runs.md)."""

from __future__ import annotations

import contextlib
import gc
import weakref
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue

from hookline.core import attempts
from tests.conftest import PrivateRedis

QUEUE = Queue("replaced-test", Exchange("replaced-test"), routing_key="replaced-test")
TRANSPORT = "hookline.transport.redis:Transport"


@pytest.fixture
def server(tmp_path):
    """A redis-server of this test's own (it is restarted)."""
    private = PrivateRedis(tmp_path)
    client = private.start()
    yield private
    client.close()
    private.stop()


def starved_channel(url: str, held: list[Any]) -> tuple[Connection, Any]:
    """A connection whose consumer holds one message with a prefetch of one: its QoS has no
    room and has registered to be told when some frees."""
    conn = Connection(url, transport=TRANSPORT)
    Producer(conn.channel(), exchange=QUEUE.exchange, routing_key=QUEUE.routing_key,
             serializer="json").publish({"n": 1}, declare=[QUEUE])
    consumer = Consumer(conn, [QUEUE], callbacks=[lambda body, m: held.append(m)],
                        prefetch_count=1)
    consumer.consume()
    conn.drain_events(timeout=5)
    assert len(held) == 1
    channel = consumer.channel
    assert not channel.qos.can_consume()  # starved: registered
    return conn, channel


@pytest.mark.slow
def test_channels_replaced_after_redis_restarts_are_let_go(server):
    before = attempts.listening()
    replaced: list[weakref.ref[Any]] = []
    for _ in range(3):
        held: list[Any] = []
        conn, channel = starved_channel(server.url, held)
        assert attempts.listening() == before + 1  # only the live channel's
        replaced += [weakref.ref(channel), weakref.ref(channel.qos)]
        server.shutdown()  # Redis restarts from its AOF under the channel
        server.start()
        with contextlib.suppress(Exception):  # what the worker's event loop meets
            conn.drain_events(timeout=1)
        conn.collect()  # what Celery does with a connection that failed
        del conn, channel, held
        gc.collect()
    assert [ref for ref in replaced if ref() is not None] == []
    assert attempts.listening() == before
