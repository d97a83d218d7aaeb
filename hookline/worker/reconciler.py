"""The reconciler: the counts Redis keeps for this process agree again with what it holds.

A worker's attempts are counted in Redis (each endpoint's leases and ``inflight`` count,
``hookline.store.leases``). When Redis goes away under a running attempt (a restart, a
failover, a partition) its settle is lost, and the count would hold a slot of the endpoint
for nothing, stranding the deliveries that wait for that slot. The scripts prune leases that
ran out whenever they decide by the count; this thread does it sooner and everywhere:

- **after Redis comes back** (the heartbeat says so: a beat accepted after failed ones, or a
  registration lost with the data), it drops this process's own leases of attempts it no
  longer runs, at every endpoint it attempted since its last sweep and every endpoint with
  deliveries waiting for a slot, and wakes a consumer for those that have room again;
- **on a periodic sweep** (``HOOKLINE_RECONCILE_INTERVAL``, 30 s; one process of all does the
  full sweep in each interval, by a lock in Redis), the same over every endpoint whose count
  says something is in flight.

What each count means and who mends it: docs/internals/counts.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from hookline.core.logs import log_event
from hookline.store.leases import Leases, Mended, token_owner, unheld
from hookline.transport.liveness import process_liveness

#: The lock that lets one process do the full sweep per interval.
SWEEP_LOCK = "hookline:reconcile:sweep"


class RunningAttempts:
    """The attempts this process runs now (their tokens), the prefixes it ever made tokens
    with, and the endpoints it attempted since the last sweep. A token is added before its
    admit and removed after its settle, so a lease of this process whose token is not here
    has no attempt behind it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._prefixes: set[str] = set()
        self._touched: set[str] = set()

    def start(self, token: str, endpoint_id: str) -> None:
        with self._lock:
            self._running.add(token)
            self._prefixes.add(token_owner(token))
            self._touched.add(endpoint_id)

    def finish(self, token: str) -> None:
        with self._lock:
            self._running.discard(token)

    def snapshot(self) -> tuple[set[str], set[str]]:
        """``(tokens running, prefixes ever used)``."""
        with self._lock:
            return set(self._running), set(self._prefixes)

    def take_touched(self) -> set[str]:
        with self._lock:
            touched, self._touched = self._touched, set()
            return touched


#: This process's attempts (the delivery task registers them).
RUNNING = RunningAttempts()


class Reconciler:
    """A daemon thread mending this process's counts (module docstring). ``interval``:
    seconds between sweeps. ``waiting``: a callable giving the endpoints with deliveries
    waiting for a slot (empty where the broker is not the state's Redis)."""

    def __init__(self, leases: Leases, *, interval: float, running: RunningAttempts = RUNNING,
                 waiting: Callable[[], Iterable[str]] | None = None) -> None:
        self.leases = leases
        self.interval = interval
        self.running = running
        self._waiting: Callable[[], Iterable[str]] = waiting or (lambda: ())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Reconciler:
        self._thread = threading.Thread(target=self._run, name="hookline-reconciler",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            resumed = self._wait_for_cause(self.interval)
            if self._stop.is_set():
                return
            try:
                self.sweep(full=not resumed and self._take_sweep_lock())
            except Exception as exc:  # Redis away: the next resumption sweeps
                log_event("reconcile.failed", level=logging.WARNING,
                          error=type(exc).__name__)

    def _wait_for_cause(self, timeout: float) -> bool:
        """Wait for Redis to come back (True) or the interval to pass (False). The heartbeat
        that says so starts with the process's first consume, after this thread."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            live = process_liveness(create=False)
            if live is None:
                self._stop.wait(min(left, 1.0))
            elif live.resumed.wait(min(left, 1.0)):
                live.resumed.clear()
                return True
        return False

    def _take_sweep_lock(self) -> bool:
        lock_time = max(1, int(self.interval * 0.9))
        return bool(self.leases.redis.set(SWEEP_LOCK, "1", nx=True, ex=lock_time))

    def sweep(self, *, full: bool = False) -> list[Mended]:
        """Mend the counts of the endpoints this process attempted since the last sweep and
        of those with deliveries waiting for a slot (every counted endpoint when ``full``):
        what changed."""
        endpoints = self.running.take_touched() | set(self._waiting())
        if full:
            endpoints |= set(self.leases.counted())
        holders = self.leases.holders(sorted(endpoints))
        running, own = self.running.snapshot()  # after the holders: see unheld
        gone = unheld(holders, own=own, running=running)
        mended = [self.leases.reconcile(endpoint_id, drop=gone.get(endpoint_id, ()))
                  for endpoint_id in sorted(endpoints)]
        changed = [m for m in mended if m.before != m.after]
        for m in changed:
            log_event("inflight.reconciled", level=logging.WARNING, endpoint_id=m.endpoint_id,
                      counted=m.before, held=m.after,
                      detail="an attempt's count outlived it (Redis went away under it, or "
                             "its worker died); given back")
        return changed
