"""Flower's view: a real worker's task events, read with Celery's own EventReceiver (what
Flower runs), arrive for a delivery even though the worker publishes them in batches
(``task.multi`` messages, hookline/worker/consumer.py), and show no payload or secret."""

from __future__ import annotations

import threading

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.store.endpoints import EndpointRegistry
from hookline.worker.celery import app
from tests.conftest import wait_until


def test_task_events_reach_an_event_receiver(worker, receiver):
    endpoint = EndpointRegistry().add("flower-view", receiver.route("/flower", always(Reply(204))))
    seen: list[dict] = []
    ready = threading.Event()

    class Listener(app.events.Receiver):  # type: ignore[misc,name-defined]
        def on_consume_ready(self, *args, **kwargs):
            ready.set()  # the queue is bound: no event sent from now on is missed

    with app.connection_for_read() as connection:
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
