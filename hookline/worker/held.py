"""Held endpoints, as this worker process last saw them: the cheap deferral.

On a Redis broker the consume script parks a held endpoint's deliveries before any worker
takes them (``hookline/transport/lua/consume.lua``). RabbitMQ cannot be asked to look inside a
message first: every delivery reaches a worker. When the gate has just told this process that
an endpoint is held (its breaker open, its half-open probe out, a Retry-After block), the next
deliveries for it within that hold are parked straight away, due when the hold ends: one
Redis round trip (park.lua) instead of two (admit, then park), no HTTP, no gate. Rate-limited
events are not held here: each one needs a slot of its own, booked by the gate.

Only the gate decides that an endpoint is held; this remembers it for as long as the gate
said, but at most :data:`REMEMBER_AT_MOST` seconds: the next delivery after that asks the gate
again, so an operator's ``hookline breaker reset`` reaches every worker within that time
(deliveries parked from the memory meanwhile wait at most that long). Used on a RabbitMQ
broker only (``hookline/worker/tasks.py``): on a Redis broker consume.lua parks them first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hookline.delivery.engine import Deferred

#: Most endpoints remembered per process (the oldest holds are forgotten first).
MAX_REMEMBERED = 10_000
#: Longest a hold is remembered, seconds: how late a worker may see a ``breaker reset``.
REMEMBER_AT_MOST = 5.0


class HeldEndpoints:
    """Endpoint id -> (reason, monotonic time the hold ends), for the holds the gate reported.

    :param clock: monotonic seconds (default ``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._holds: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def remember(self, endpoint_id: str, deferred: Deferred) -> None:
        """Note the hold a deferral reports (``Deferred.hold``; none for one event's own).
        A pause is not remembered: its deliveries are parked until resume, and one parked from
        a memory older than the resume would wait a month."""
        if deferred.hold <= 0 or deferred.reason == "paused":
            return
        until = self._clock() + min(deferred.hold, REMEMBER_AT_MOST)
        with self._lock:
            if len(self._holds) >= MAX_REMEMBERED and endpoint_id not in self._holds:
                self._holds.pop(next(iter(self._holds)))
            self._holds[endpoint_id] = (deferred.reason, until)

    def held(self, endpoint_id: str) -> tuple[str, float] | None:
        """(reason, seconds left) while the endpoint's remembered hold lasts, else None."""
        found = self._holds.get(endpoint_id)
        if found is None:
            return None
        reason, until = found
        left = until - self._clock()
        if left <= 0:
            with self._lock:
                if self._holds.get(endpoint_id) == found:
                    del self._holds[endpoint_id]
            return None
        return reason, left

    def forget(self, endpoint_id: str) -> None:
        with self._lock:
            self._holds.pop(endpoint_id, None)


#: This process's memory of held endpoints (the delivery task's).
HELD_ENDPOINTS = HeldEndpoints()
