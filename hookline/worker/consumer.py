"""The worker's consumer, with one change: a message that is not a valid task never vanishes.

Celery acknowledges and drops a message it cannot decode, and rejects (deletes, on Redis) one
naming an unknown task or carrying a malformed body. Hookline first keeps such a message in the
dead-letter queue (reason ``malformed``, the raw body kept as text) so an operator can see what
was sent, then lets Celery go on as usual. Configured by ``worker_consumer`` in celeryconfig.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.consumer import Consumer

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.core.messages import TASK_NAME
from hookline.transport.malformed import dead_letter_raw


class HooklineConsumer(Consumer):
    """Celery's consumer with three changes: unusable messages are dead-lettered (below), task
    events are published in batches, and deliveries the broker parks are shown to Flower.

    Celery buffers task events and publishes the buffer on the event loop's next turn, which
    on a busy worker is one Redis publish per event, three per delivery: a tenth of a
    worker's CPU. Here the buffer goes out at most every ``HOOKLINE_EVENTS_FLUSH_INTERVAL``
    seconds (0.1) after its first event, or when it holds the buffer limit (256 events; Celery: 24),
    as one ``task.multi`` message, which Flower reads the same way; and at shutdown, once the
    running tasks are done. See hookline/worker/task_events.py for what keeps every event and one
    thread's order.
    """

    _events_flush_pending = False

    class Blueprint(Consumer.Blueprint):
        # Without Celery's native delayed delivery (5.5+), which a worker on RabbitMQ with
        # quorum queues would set up: 28 exchanges and quorum queues per vhost for countdown
        # and ETA tasks, which Hookline never publishes (a retry waits in its schedule).
        default_steps = [step for step in Consumer.Blueprint.default_steps
                         if not step.endswith(":DelayedDelivery")]

    def connect(self) -> Any:
        """Celery's consuming connection (made again after each reconnect), with this
        consumer registered for the deliveries its channels park (Hookline's connection,
        hookline/transport/amqp.py; another has none to tell)."""
        connection = super().connect()
        register = getattr(connection, "on_parked", None)
        if register is not None:
            register(self._announce_parked)
        return connection

    def _announce_parked(self, parked: list[tuple[str, str, str, str, float]]) -> None:
        """Deliveries the consume script parked for held endpoints never reach a task: tell
        Flower they wait for a retry (``task-retried``, RETRY) instead of leaving them PENDING
        with no worker. Buffered with the other task events (one publish per batch). The
        event names the task: without publishers' ``task-sent`` (HOOKLINE_TASK_SENT_EVENTS)
        it is the first Flower hears of the delivery, and Flower merges its fields."""
        dispatcher = getattr(self, "event_dispatcher", None)
        if dispatcher is None or not dispatcher.enabled:
            return
        for task_id, endpoint_id, event_id, reason, countdown in parked:
            dispatcher.send("task-retried", uuid=task_id, traceback="", name=TASK_NAME,
                            kwargs=repr({"endpoint_id": endpoint_id, "event_id": event_id}),
                            exception=f"deferred by the consumer: {reason}, "
                                      f"next look in {countdown:g}s")

    def on_send_event_buffered(self) -> None:
        # Called from pool threads: only call_soon is safe there; the timer is set on the loop.
        if not settings().events_flush_interval:
            super().on_send_event_buffered()
            return
        if self.hub and not self._events_flush_pending:
            self._events_flush_pending = True
            self.hub.call_soon(self._schedule_events_flush)

    def _schedule_events_flush(self) -> None:
        self.hub.call_later(settings().events_flush_interval, self._flush_batched_events)

    def shutdown(self) -> None:
        """The worker's last step (its pool has finished the running tasks): publish the task
        events still buffered, which the event loop's timer no longer will and Celery's
        shutdown would drop with the dispatcher, so Flower gets each delivery's last state."""
        try:
            self._flush_events()
        except Exception as exc:  # never stops the shutdown; the events are only Flower's
            log_event("flower.event_failed", level=logging.WARNING, error=type(exc).__name__)
        super().shutdown()

    def _flush_batched_events(self) -> None:
        self._events_flush_pending = False
        self._flush_events()

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        dead_letter_raw(message, f"undecodable message: {type(exc).__name__}: {exc}")
        super().on_decode_error(message, exc)

    def on_unknown_message(self, body: Any, message: Any) -> None:
        dead_letter_raw(message, "not a task message")
        super().on_unknown_message(body, message)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        dead_letter_raw(message, f"unknown task: {exc}")
        super().on_unknown_task(body, message, exc)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        dead_letter_raw(message, f"invalid task message: {exc}")
        super().on_invalid_task(body, message, exc)
