"""Endpoint health, counted in memory and written in batches: each attempt's outcome,
latency and answer, per endpoint and minute (``hookline.store.health``).

``Gate.settle`` hands every settled attempt to :data:`HEALTH` (``ATTEMPT_OBSERVERS``): a
lock and a few dict updates, no Redis. A daemon thread writes what was counted every
``HOOKLINE_HEALTH_INTERVAL`` seconds in one pipelined round trip for all the endpoints
touched; the worker's shutdown (and a pool process's) stops it and writes the rest. A write
that fails (Redis away, stalled past ``HOOKLINE_REDIS_TIMEOUT``) is logged and its counts
kept for the next one, within bounds: counts older than a day, past :data:`MOST_MINUTES`
(endpoint, minute) pairs, or attempts of more than :data:`MOST_ENDPOINTS` endpoints are
dropped (and the number logged). Nothing here raises into a delivery, and nothing here is
held by anyone: a worker killed with -9 loses at most one interval of health.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from celery.signals import worker_process_shutdown, worker_shutdown

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.store import connection as store
from hookline.store import health
from hookline.store.gates import ATTEMPT_OBSERVERS
from hookline.store.history import AttemptRecord
from hookline.worker.tallies import ProcessTally

#: Most (endpoint, minute) counts kept in memory while writes fail (each ~0.3 KB).
MOST_MINUTES = 50_000
#: Most endpoints whose latest attempts are kept in memory while writes fail (each at most
#: ``health.ATTEMPTS_KEPT`` attempts of ~0.5 KB).
MOST_ENDPOINTS = 2_000
#: Seconds between two trims of the failing set by one process.
TRIM_EVERY = 600.0


class HealthTally(ProcessTally):
    """This process's endpoint health since its last write, and the thread that writes it
    (:class:`~hookline.worker.tallies.ProcessTally`; ``interval`` by default
    ``HOOKLINE_HEALTH_INTERVAL``)."""

    thread_name = "hookline-health"

    def __init__(self, *, interval: float | None = None,
                 clock: Callable[[], float] = time.time,
                 client: Callable[[], Any] = store.client) -> None:
        self._trimmed = 0.0
        #: Writes that failed, and (endpoint, minute) counts dropped, since the start.
        self.failed_writes = 0
        self.dropped = 0
        super().__init__(interval=interval, clock=clock, client=client)

    def default_interval(self) -> float:
        return settings().health_interval

    def _fresh(self) -> None:
        self._batch = health.HealthBatch()

    def observe(self, endpoint_id: str, event_id: str, record: AttemptRecord) -> None:
        """Count one settled attempt (``Gate.settle``'s observer)."""
        self._own()
        seen = health.SeenAttempt.of(event_id, record)
        with self._lock:
            self._batch.add(endpoint_id, seen)
            self._added()

    def flush(self) -> int:
        """Write what was counted in one round trip; returns the commands sent (0: nothing
        to write, or the write failed and its counts wait for the next)."""
        self._own()
        with self._lock:
            batch, self._batch = self._batch, health.HealthBatch()
        if not batch:
            return 0
        now = self.clock()
        trim = now - health.FAILING_WINDOW if now - self._trimmed >= TRIM_EVERY else None
        try:
            sent = health.write(self.client(), batch, trim_failing_before=trim)
        except Exception as exc:  # Redis away or stalled: kept for the next write
            self.failed_writes += 1
            with self._lock:  # under what was counted during the write
                dropped = self._batch.merge_older(
                    batch, most_minutes=MOST_MINUTES, most_endpoints=MOST_ENDPOINTS,
                    oldest_minute=int(now // 60) - health.MINUTES_KEPT)
            self.dropped += dropped
            log_event("health.write_failed", level=logging.WARNING, error=type(exc).__name__,
                      endpoints=len(batch.attempts), dropped=dropped or None)
            return 0
        if trim is not None:
            self._trimmed = now
        return sent


#: This process's health tally.
HEALTH = HealthTally()


def install() -> None:
    """Hand every settled attempt of this process to :data:`HEALTH` (the worker's task
    module calls it at its import; twice is once)."""
    if HEALTH.observe not in ATTEMPT_OBSERVERS:
        ATTEMPT_OBSERVERS.append(HEALTH.observe)


@worker_process_shutdown.connect
@worker_shutdown.connect
def _write_at_exit(**_: Any) -> None:
    try:
        HEALTH.stop()
    except Exception as exc:  # never in the way of a shutdown
        log_event("health.write_failed", level=logging.WARNING, error=type(exc).__name__)
