"""Per-minute outcome counts for "deliveries over time": counted in memory, written in batches.

Each delivery's outcome (delivered, dead_lettered, retry_scheduled, deferred, ...) is added to
this process's counts; a timer thread writes them every :data:`FLUSH_INTERVAL` seconds into
``hookline:stats:<minute>`` hashes (``keys.stats_key``, kept ``keys.STATS_TTL``) in one
pipelined round trip: a few commands per process per interval, none per delivery, so a
delivery's Redis cost does not grow. The worker's shutdown writes what is left. A write that
fails keeps its counts for the next one. ``hookline.service.stats.series`` reads them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis
from celery.signals import task_postrun, worker_process_shutdown, worker_shutdown

from hookline.core.logs import log_event
from hookline.core.messages import TASK_NAME
from hookline.store import connection as store
from hookline.store import keys

#: Seconds between two writes of one process's counts.
FLUSH_INTERVAL = 10.0
#: The outcomes counted by name (a task's ``outcome``); anything else counts as ``other``.
OUTCOMES = frozenset({"delivered", "dead_lettered", "retry_scheduled", "deferred", "waiting",
                      "duplicate", "fenced"})


class MinuteTallies:
    """This process's outcome counts by minute, flushed by a daemon thread started with the
    first count (again in a forked child, which starts with none of its parent's)."""

    def __init__(self, *, interval: float = FLUSH_INTERVAL,
                 clock: Callable[[], float] = time.time,
                 client: Callable[[], Any] = store.client) -> None:
        self.interval = interval
        self.clock = clock
        self.client = client
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._counts: Counter[tuple[int, str]] = Counter()
        self._timer: threading.Thread | None = None

    def _own(self) -> None:
        """After a fork: the parent's counts are the parent's to write, its thread is gone."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._counts = Counter()
            self._timer = None

    def count(self, outcome: str, n: int = 1) -> None:
        self._own()
        name = outcome if outcome in OUTCOMES else "other"
        with self._lock:
            self._counts[(int(self.clock() // 60), name)] += n
            if self._timer is None and self.interval > 0:
                self._timer = threading.Thread(target=self._run, name="hookline-tallies",
                                               daemon=True)
                self._timer.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush()

    def flush(self) -> int:
        """Write the counts so far in one round trip; returns how many fields it added to."""
        self._own()
        with self._lock:
            counts, self._counts = self._counts, Counter()
        if not counts:
            return 0
        try:
            pipe = self.client().pipeline(transaction=False)
            for (minute, outcome), n in sorted(counts.items()):
                pipe.hincrby(keys.stats_key(minute), outcome, n)
            for minute in sorted({minute for minute, _ in counts}):
                pipe.expire(keys.stats_key(minute), keys.STATS_TTL)
            pipe.execute()
        except redis.RedisError as exc:  # kept for the next write; only a chart waits
            with self._lock:
                self._counts.update(counts)
            log_event("stats.flush_failed", level=logging.WARNING, error=type(exc).__name__)
            return 0
        return len(counts)


#: This process's counts.
TALLIES = MinuteTallies()


@task_postrun.connect
def _count_delivery(sender: Any = None, retval: Any = None, **_: Any) -> None:
    """A delivery task's outcome, from its result (``{"outcome": ...}``)."""
    if getattr(sender, "name", None) == TASK_NAME and isinstance(retval, dict):
        outcome = retval.get("outcome")
        if isinstance(outcome, str):
            TALLIES.count(outcome)


@worker_process_shutdown.connect
@worker_shutdown.connect
def _flush_at_exit(**_: Any) -> None:
    TALLIES.flush()
