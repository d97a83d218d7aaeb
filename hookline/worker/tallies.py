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
#: Seconds :meth:`ProcessTally.stop` waits for the thread's write in progress.
STOP_WAIT = 5.0
#: The outcomes counted by name (a task's ``outcome``); anything else counts as ``other``.
OUTCOMES = frozenset({"delivered", "dead_lettered", "retry_scheduled", "deferred", "waiting",
                      "duplicate", "fenced"})


class ProcessTally:
    """What this process counted since its last write, written by a daemon thread every
    ``interval`` seconds (started with the first count; again in a forked child, which starts
    with none of its parent's counts and no thread). ``interval`` 0: no thread, :meth:`flush`
    writes. A subclass keeps its counts in what :meth:`_fresh` makes, adds to them under
    ``self._lock`` through :meth:`_added`, and writes them in :meth:`flush`."""

    #: The writing thread's name.
    thread_name = "hookline-tally"

    def __init__(self, *, interval: float | None = None,
                 clock: Callable[[], float] = time.time,
                 client: Callable[[], Any] = store.client) -> None:
        self._interval = interval
        self.clock = clock
        self.client = client
        self._pid = os.getpid()
        self._reset()

    @property
    def interval(self) -> float:
        return self._interval if self._interval is not None else self.default_interval()

    def default_interval(self) -> float:
        return FLUSH_INTERVAL

    def _fresh(self) -> None:
        """Empty this process's counts (``self._lock`` held, or before any thread)."""
        raise NotImplementedError

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._fresh()

    def _own(self) -> None:
        """After a fork: the parent's counts are the parent's to write, its thread is gone."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._reset()

    def _added(self) -> None:
        """After a count, ``self._lock`` held: start the writing thread if none runs."""
        if self._thread is None and not self._stop.is_set() and self.interval > 0:
            self._thread = threading.Thread(target=self._run, name=self.thread_name,
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        stop = self._stop
        while not stop.wait(self.interval):
            self.flush()

    def flush(self) -> int:
        raise NotImplementedError

    def stop(self, timeout: float = STOP_WAIT) -> None:
        """Stop the thread (waiting at most ``timeout`` for a write in progress) and write
        what is left."""
        self._own()
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.flush()


class MinuteTallies(ProcessTally):
    """This process's outcome counts by minute."""

    thread_name = "hookline-tallies"

    def _fresh(self) -> None:
        self._counts: Counter[tuple[int, str]] = Counter()

    def count(self, outcome: str, n: int = 1) -> None:
        self._own()
        name = outcome if outcome in OUTCOMES else "other"
        with self._lock:
            self._counts[(int(self.clock() // 60), name)] += n
            self._added()

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
