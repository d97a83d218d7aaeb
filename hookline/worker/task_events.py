"""The worker's task-event dispatcher (``Celery(events=EVENTS_CLASS)``): no task event lost.

The worker buffers task events (``buffer_group=['task']``) and publishes the buffer as one
``task.multi`` message (``hookline.worker.consumer``). Under the threads pool the pool threads
append to that buffer while the event loop (or a thread whose append filled it) publishes it.
Celery up to 5.6 publishes the live list and then empties it (``events[:] = []``): an event
a pool thread appends during the publish (the socket write, long on a busy machine) is
dropped without a trace (celery/celery#10434, fixed in 5.7). A dropped ``task-retried`` or
``task-failed`` leaves the delivery STARTED in Flower for good; a dropped ``task-started`` is
harmless, which is why the symptom was "STARTED" and only under load.

Here the buffer is published as a copy and only the events that copy holds are removed, as
Celery 5.7 does; the same code runs on every supported version. Order is kept: one thread's
events are appended in the order it sends them, and batches are published one at a time
under the dispatcher's lock, oldest first.

The buffer is published at most every ``HOOKLINE_EVENTS_FLUSH_INTERVAL`` (the consumer's
timer, hookline/worker/consumer.py) or when it reaches the buffer limit (:data:`BUFFER_LIMIT`,
256 events, unless the caller passes one; Celery's own is 24). Every pool
thread whose event fills it calls ``flush``; the threads that waited for the lock meanwhile
find a batch of one or two events, each a publish of its own. A flush from ``send`` therefore
publishes only a buffer still at the limit (the timer takes the rest). Two more ways Celery
loses buffered task events are closed here: a dispatcher replaced after a broker reconnect
hands on its buffers, not only its failed publishes (``extend_buffer``), and the worker
publishes the buffer at shutdown (hookline/worker/consumer.py).
"""

from __future__ import annotations

import threading
from typing import Any

from celery.app.events import Events as CeleryEvents
from celery.events.dispatcher import EventDispatcher as CeleryEventDispatcher

#: ``Celery(events=EVENTS_CLASS)``.
EVENTS_CLASS = "hookline.worker.task_events:Events"


#: Set in a thread while it runs ``EventDispatcher.send`` (whose flush at the buffer limit
#: publishes only a full buffer).
_sending = threading.local()

#: Task events buffered before a pool thread publishes them itself (Celery's default is 24:
#: a publish every 8 deliveries, a fifth of the events' cost). The timer publishes the buffer
#: at most HOOKLINE_EVENTS_FLUSH_INTERVAL after its first event anyway, so this only bounds
#: one message (about 250 events of a few hundred bytes) at high rates.
BUFFER_LIMIT = 256


class EventDispatcher(CeleryEventDispatcher):
    def __init__(self, *args: Any, buffer_limit: int = BUFFER_LIMIT, **kwargs: Any) -> None:
        super().__init__(*args, buffer_limit=buffer_limit, **kwargs)

    def send(self, type: str, *args: Any, **fields: Any) -> Any:
        _sending.active = True
        try:
            return super().send(type, *args, **fields)
        finally:
            _sending.active = False

    def flush(self, errors: bool = True, groups: bool = True) -> None:
        """Publish what failed to publish before (Celery's own code), then each group's
        buffered events: a snapshot, removed once published; events appended meanwhile
        stay for the next flush. Called from ``send`` (the buffer reached its limit), only
        a buffer still at the limit."""
        if errors:
            super().flush(errors=True, groups=False)
        if not groups:
            return
        full_only = getattr(_sending, "active", False)
        with self.mutex:
            if getattr(self, "_closed", False):  # Celery 5.7: closed, keep for enable()
                return
            for group, events in self._group_buffer.items():
                if not events or (full_only and len(events) < self.buffer_limit):
                    continue
                batch = list(events)
                # A failed publish is re-buffered (buffer_while_offline) as this very list,
                # or raises and leaves the events here for the next flush.
                self._publish(batch, self.producer, f"{group}.multi")
                del events[: len(batch)]

    def extend_buffer(self, other: Any) -> None:
        """Take over ``other``'s unpublished events (Celery: after a broker reconnect the
        consumer replaces its dispatcher with a new one and flushes it): its failed
        publishes, as Celery does, and its group buffers, which Celery leaves behind."""
        super().extend_buffer(other)
        with other.mutex:
            for group, events in other._group_buffer.items():
                if events:
                    self._group_buffer[group].extend(events)
                    events.clear()


class Events(CeleryEvents):
    dispatcher_cls: Any = "hookline.worker.task_events:EventDispatcher"
