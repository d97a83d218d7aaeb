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
"""

from __future__ import annotations

from typing import Any

from celery.app.events import Events as CeleryEvents
from celery.events.dispatcher import EventDispatcher as CeleryEventDispatcher

#: ``Celery(events=EVENTS_CLASS)``.
EVENTS_CLASS = "hookline.worker.events:Events"


class EventDispatcher(CeleryEventDispatcher):
    def flush(self, errors: bool = True, groups: bool = True) -> None:
        """Publish what failed to publish before (Celery's own code), then each group's
        buffered events: a snapshot, removed once published; events appended meanwhile
        stay for the next flush."""
        if errors:
            super().flush(errors=True, groups=False)
        if not groups:
            return
        with self.mutex:
            if getattr(self, "_closed", False):  # Celery 5.7: closed, keep for enable()
                return
            for group, events in self._group_buffer.items():
                if not events:
                    continue
                batch = list(events)
                # A failed publish is re-buffered (buffer_while_offline) as this very list,
                # or raises and leaves the events here for the next flush.
                self._publish(batch, self.producer, f"{group}.multi")
                del events[: len(batch)]


class Events(CeleryEvents):
    dispatcher_cls: Any = "hookline.worker.events:EventDispatcher"
