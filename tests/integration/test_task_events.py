"""Flower's view: a real worker's task events, read with Celery's own EventReceiver (what
Flower runs), arrive for a delivery even though the worker publishes them in batches
(``task.multi`` messages, hookline/worker/consumer.py): within the batching window, none lost
(a stopping worker publishes what it still holds), and show no payload or secret."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.store.endpoints import EndpointRegistry
from hookline.transport.envelope import build_message
from hookline.worker.celery import worker_app
from tests.conftest import flushed, isolated_url, wait_until

STOP_URL = isolated_url(6)


def test_task_events_reach_an_event_receiver(worker, receiver):
    endpoint = EndpointRegistry().add("flower-view", receiver.route("/flower", always(Reply(204))))
    seen: list[dict] = []
    ready = threading.Event()

    class Listener(worker_app.events.Receiver):  # type: ignore[misc,name-defined]
        def on_consume_ready(self, *args, **kwargs):
            ready.set()  # the queue is bound: no event sent from now on is missed

    with worker_app.connection_for_read() as connection:
        listener = Listener(connection, handlers={"*": seen.append})
        thread = threading.Thread(target=listener.capture, kwargs={"wakeup": False},
                                  daemon=True)
        thread.start()
        try:
            assert ready.wait(10)
            event_id = send_webhook(endpoint.id, "order.created", {"secret-ish": "x" * 40})

            def types() -> set[str]:
                return {e["type"] for e in list(seen) if e.get("uuid") == event_id}

            wait_until(lambda: {"task-received", "task-started", "task-succeeded"} <= types(),
                       timeout=20)
        finally:
            listener.should_stop = True
            thread.join(5)
    received = next(e for e in seen if e.get("uuid") == event_id and e["type"] == "task-received")
    assert received["name"] == "hookline.deliver"
    assert "flower-view" in received["args"] and "x" * 40 not in received["args"]
    assert all(secret not in repr(seen) for secret in endpoint.secrets)


class Heard:
    """Task events as an event receiver (Flower's) gets them: each message's arrival time and
    events (type, task id, the worker's timestamp)."""

    def __init__(self) -> None:
        self.messages: list[tuple[float, list[tuple[str, str, float]]]] = []

    def events(self) -> list[tuple[str, str, float]]:
        return [event for _, events in list(self.messages) for event in events]

    def types(self, task_id: str) -> list[str]:
        return [kind for kind, uuid, _ in self.events() if uuid == task_id]


@contextlib.contextmanager
def hearing(connection: Any) -> Iterator[Heard]:
    heard = Heard()
    ready = threading.Event()

    class Listener(worker_app.events.Receiver):  # type: ignore[misc,name-defined]
        def on_consume_ready(self, *args: Any, **kwargs: Any) -> None:
            ready.set()

        def _receive(self, body: Any, message: Any, **kwargs: Any) -> None:
            events = body if isinstance(body, list) else [body]
            heard.messages.append((time.time(), [
                (e["type"], e.get("uuid", ""), float(e["timestamp"])) for e in events]))
            super()._receive(body, message)

    listener = Listener(connection, handlers={"*": lambda event: None})
    thread = threading.Thread(target=listener.capture, kwargs={"wakeup": False}, daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        yield heard
    finally:
        listener.should_stop = True
        thread.join(5)


def test_task_events_come_in_batches_within_the_window_and_none_is_lost(worker, receiver):
    """Under load a worker publishes its task events a batch at a time (at most every 0.1 s,
    or at 24 events), not one message per event, and each reaches the receiver soon after it
    happened: every delivery's received, started and succeeded, in that order."""
    endpoint = EndpointRegistry().add("events-batch", receiver.route("/batch",
                                                                     always(Reply(204))))
    with worker_app.connection_for_read() as connection, hearing(connection) as heard:
        task_ids = [send_webhook(endpoint.id, "order.created", {"n": n}) for n in range(120)]
        wanted = ["task-received", "task-started", "task-succeeded"]
        wait_until(lambda: all(heard.types(t)[-1:] == ["task-succeeded"] for t in task_ids),
                   timeout=60)
        time.sleep(0.3)  # anything late would show as a repeat or a reordering below
        for task_id in task_ids:  # the worker's (task-sent is this process's)
            assert [t for t in heard.types(task_id) if t != "task-sent"] == wanted, task_id
        ours = [(arrived, events) for arrived, events in heard.messages
                if any(uuid in task_ids for _, uuid, _ in events)]
        worker_messages = [events for _, events in ours if events[0][0] != "task-sent"]
        published = sum(len(events) for events in worker_messages)
        assert published >= 3 * len(task_ids)
        assert len(worker_messages) <= published / 4, [len(e) for e in worker_messages]
        lateness = [arrived - stamp for arrived, events in ours for _, _, stamp in events]
        assert max(lateness) < 2.0, max(lateness)  # 0.1 s plus a busy machine's delays


@pytest.fixture
def stop_db() -> Iterator[redis.Redis]:
    yield from flushed(STOP_URL)


def test_a_stopping_worker_publishes_the_task_events_it_holds(stop_db, receiver, start_worker):
    """A 10 s window, a warm shutdown while attempts are running: the worker finishes them
    and publishes their events on its way out, well before the window would have."""
    endpoint = EndpointRegistry(stop_db).add(
        "events-stop", receiver.route("/events-stop", always(Reply(204, delay=0.5))))
    worker = start_worker("events-stop", concurrency=8, extra_env={
        "REDIS_URL": STOP_URL, "HOOKLINE_EVENTS_FLUSH_INTERVAL": "10"})
    event_ids = [f"evt-stop-{n}" for n in range(5)]  # 15 events: under the buffer limit
    with Connection(STOP_URL) as connection, hearing(connection) as heard:
        pipe = stop_db.pipeline(transaction=False)
        for event_id in event_ids:
            pipe.lpush("hookline", build_message(
                worker_app, task_name="hookline.deliver", task_id=event_id,
                args=[endpoint.id, "order.created", {"id": event_id}],
                kwargs={"event_id": event_id}, retries=0, queue="hookline"))
        pipe.execute()
        assert receiver.wait_for(lambda got: len(got) >= 5, timeout=20)
        stopped = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        worker.process.wait(30)
        assert time.monotonic() - stopped < 8
        wait_until(lambda: all("task-succeeded" in heard.types(e) for e in event_ids),
                   timeout=5, what=lambda: {e: heard.types(e) for e in event_ids})
