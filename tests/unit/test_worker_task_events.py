"""The worker's task-event dispatcher loses no event a pool thread sends while the buffer is
being published (celery/celery#10434 in Celery < 5.7), and keeps their order.

Celery's own dispatcher on its in-memory transport; the producer stands for the socket write,
during which another thread sends an event, as a pool thread does on a busy worker.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery

from hookline.worker.celery import worker_app
from hookline.worker.task_events import EVENTS_CLASS, EventDispatcher


class SlowWrite:
    """A producer whose first publish lets another thread send ``during`` meanwhile."""

    def __init__(self, during: Any) -> None:
        self.during = during
        self.published: list[list[str]] = []

    def publish(self, body: Any, **_: Any) -> None:
        events = body if isinstance(body, list) else [body]
        self.published.append([f"{e['type']}:{e['uuid']}" for e in events])
        if len(self.published) == 1:
            thread = threading.Thread(target=self.during)
            thread.start()
            thread.join()


def published_by(dispatcher: Any) -> list[str]:
    producer = SlowWrite(lambda: dispatcher.send("task-retried", uuid="b"))
    dispatcher.producer = producer
    dispatcher.send("task-started", uuid="a")
    dispatcher.send("task-started", uuid="b")
    dispatcher.flush()  # a pool thread sends b's outcome during this publish
    dispatcher.flush()
    return [event for batch in producer.published for event in batch]


def test_an_event_sent_during_a_publish_is_published_next_in_order() -> None:
    app = Celery("t", set_as_current=False, broker="memory://", events=EVENTS_CLASS)
    with app.connection_for_write() as connection:
        dispatcher = app.events.Dispatcher(connection, hostname="t@h", buffer_group=["task"])
        assert isinstance(dispatcher, EventDispatcher)
        assert published_by(dispatcher) == [
            "task-started:a", "task-started:b", "task-retried:b"]


def test_the_worker_app_uses_it() -> None:
    assert issubclass(worker_app.events.Dispatcher, EventDispatcher)


class Recorder:
    def __init__(self) -> None:
        self.published: list[list[str]] = []

    def publish(self, body: Any, **_: Any) -> None:
        events = body if isinstance(body, list) else [body]
        self.published.append([f"{e['type']}:{e['uuid']}" for e in events])


def test_a_flush_from_send_publishes_only_a_full_buffer() -> None:
    """Pool threads whose event filled the buffer all flush; those that got the lock after
    the first published it find one or two events, which the timer publishes instead of a
    message each."""
    from hookline.worker import task_events

    app = Celery("t", set_as_current=False, broker="memory://", events=EVENTS_CLASS)
    with app.connection_for_write() as connection:
        dispatcher = app.events.Dispatcher(connection, hostname="t@h", buffer_group=["task"],
                                           buffer_limit=3)
        dispatcher.producer = producer = Recorder()
        dispatcher.send("task-started", uuid="a")
        task_events._sending.active = True  # as in a send that reached the limit meanwhile
        try:
            dispatcher.flush()
        finally:
            task_events._sending.active = False
        assert producer.published == []
        dispatcher.send("task-started", uuid="b")
        dispatcher.send("task-started", uuid="c")  # the limit: published from send
        assert producer.published == [["task-started:a", "task-started:b", "task-started:c"]]
        dispatcher.send("task-succeeded", uuid="a")
        dispatcher.flush()  # the timer's: whatever there is
        assert producer.published[-1] == ["task-succeeded:a"]


def test_a_dispatcher_replaced_after_a_reconnect_hands_on_its_buffered_events() -> None:
    app = Celery("t", set_as_current=False, broker="memory://", events=EVENTS_CLASS)
    with app.connection_for_write() as connection:
        old = app.events.Dispatcher(connection, hostname="t@h", buffer_group=["task"])
        old.send("task-started", uuid="a")
        new = app.events.Dispatcher(connection, hostname="t@h", buffer_group=["task"])
        new.producer = producer = Recorder()
        new.extend_buffer(old)
        new.flush()
        assert producer.published == [["task-started:a"]]
        assert not old._group_buffer["task"]
