"""Issue 23's targets for attempts in flight: a slow endpoint's isolation, throughput against a
slow receiver, recovery after a worker's SIGKILL, and a per-endpoint in-flight cap.

    python -m bench.inflight [--quick] [--parts isolation,slow,candidates,recovery,cap]
                             [--out PATH] [--rounds N] [--recovery-timeout SECONDS]

Every worker under test is started the README way, ``celery -A hookline.worker worker -n
NAME@%h``, with nothing else on its command line: Celery's and Hookline's default pool,
concurrency and log level (whatever ``hookline/celeryconfig.py`` says today), gossip, mingle
and heartbeats on. It is ready when its metrics port (a free one per worker) answers: Hookline
opens it in Celery's ``worker_ready`` signal. Events are published with
``hookline.deliver.delay(endpoint, "order.paid", payload, event_id=...)`` from this process;
each part has a private redis-server (broker and state) of its own. The receiver is
bench/inflight_receiver.py, in this process: per path a delay, then ``204``, keep-alive.

An event is done when Hookline recorded it delivered (``hookline.store.delivery.delivered``:
its delivery record's done marker), polled every 50 ms for the events whose request the
receiver has answered; a part ends when all of its events are, or at its timeout.

1. **isolation**: one worker. (a) 1,000 events (``--quick`` 500) to ``fast`` (answers at once),
   all queued before the worker starts; seconds from the worker's ready to the last one
   delivered. (b) On a fresh Redis, 1,000 to ``slow`` (answers after 2 s) then 1,000 to
   ``fast``, published in that order and all queued before the worker starts; seconds from
   ready to fast's last one delivered. Slow's events are not waited for: (b) stops once
   fast's are done (how many of slow's were delivered by then is reported). (a) and (b) in
   turn ``--rounds`` times (2, ``--quick`` 1), each on a fresh Redis and worker; the ratio
   of their totals, (b) / (a): target <= 1.25.
2. **slow**: the only endpoint answering after 1 s. A worker delivers 64 events (its
   connections and threads open), its idle RSS and threads are read, and it is stopped
   (warm shutdown); then 4,000 events (``--quick`` 2,000) are queued and one fresh worker
   started. Steady deliveries/s (the middle 80% of the deliveries; target >= 400) and
   overall (from its ready to the last delivery); its peak RSS (VmHWM, pool children
   included), largest sampled RSS and threads (every 0.2 s), the receiver's largest
   in-flight count and RSS per in-flight attempt = (peak - idle) / that count.
3. **candidates**: the concurrency settings one worker process could have, side by side in
   one run, each against a receiver answering at once (0 ms) and one answering after 1 s:
   ``threads-64`` (``CELERY_WORKER_CONCURRENCY=64``, the old default), ``threads-512-unbounded``
   (``CELERY_WORKER_CONCURRENCY=512 HOOKLINE_RUNNABLE_ATTEMPTS=512``: no bound on runnable
   attempts), ``threads-512`` (no override: the default, 512 slots and at most 64 runnable
   attempts) and ``gevent-500`` (``CELERY_WORKER_POOL=gevent CELERY_WORKER_CONCURRENCY=500``;
   skipped, with the reason, when the worker's Python cannot import gevent). Set in the
   worker's environment, so the default worker's command line is the one measured. Per
   candidate and receiver: a fresh Redis, 3,000 events (``--quick`` 1,500) queued before the
   worker starts; from its ready to the last delivery, deliveries/s overall and steady (the
   middle 80%), its CPU seconds per delivery (/proc/PID/stat utime + stime, at ready and at
   the end), peak RSS (VmHWM) and largest thread count, the receiver's largest in-flight
   count; against the 1 s receiver also an idle worker's RSS first (as **slow** does: a
   worker of that candidate after 64 deliveries, stopped) and RSS per in-flight attempt =
   (peak - idle) / that count. All candidates in turn, ``--rounds`` times (2, ``--quick``
   1), the order reversed every other round; per candidate the median of its rounds.
4. **recovery**: receiver answering after 3 s. Worker A alone; 64 events; once the receiver
   has 64 requests in flight, worker B is started and waited for (ready), then A's process
   group is SIGKILLed (its main process, and any pool children) at T. The answers to A's
   requests are held until T (else B's start-up, a few seconds, could outlast the 3 s and A
   would deliver them itself); B's requests wait 3 s. Seconds from T until all 64 are
   delivered (waiting at most ``--recovery-timeout``: 420 s, ``--quick`` 60 s), those not
   delivered by then, and the receiver's duplicates (webhook-ids requested more than once):
   whether each is one that had reached the receiver before T (A's attempt cut off by the
   kill), and any requested twice after T.
5. **cap**: an endpoint registered with ``hookline endpoint add cap --url URL --max-in-flight
   5`` (skipped, with the CLI's message, when the CLI refuses the option); three workers;
   receiver answering after 200 ms; 300 events (``--quick`` 150) published once all three are
   ready. The receiver's largest in-flight count (target <= 5) and deliveries/s.

Prints a markdown table (``| target | measured | met |``; **candidates** adds its own) and
writes
``bench/results/inflight.json`` (machine, options, per-part numbers, targets), each part with
the cores the machine's other processes used meanwhile (``bench.compare_meters.LoadMonitor``:
a test run beside it shows there). HOOKLINE_*,
CELERY_* and REDIS_URL of the calling shell are ignored. Everything it starts is stopped on
the way out, Ctrl-C included; a part that fails is recorded with its error and the next runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.common import (
    ROOT,
    RedisServer,
    Worker,
    bench_environment,
    free_port,
    machine,
    private_redis,
    run_bench,
    stop_process,
)
from bench.compare_meters import LoadMonitor
from bench.inflight_receiver import InflightReceiver
from bench.schedule_tools import hold_signals, memory
from hookline.transport.liveness import registry

RESULTS = Path(__file__).resolve().parent / "results" / "inflight.json"
PARTS = ("isolation", "slow", "candidates", "recovery", "cap")
EVENT_TYPE = "order.paid"
#: How often the delivery records of answered events are read.
POLL = 0.05
ISOLATION_SLOW_DELAY, SLOW_DELAY, RECOVERY_DELAY, CAP_DELAY = 2.0, 1.0, 3.0, 0.2
RECOVERY_EVENTS, WARM_EVENTS, CAP, CAP_WORKERS = 64, 64, 5, 3
#: The ``hookline`` console script's body.
CLI = "import sys; from hookline.cli import main; sys.exit(main(prog_name='hookline'))"
BUSY_NOTE = "above ~0.2 the numbers are disturbed (this machine has 2 cores)"
TARGETS = {"isolation_ratio": 1.25, "slow_per_second": 400.0, "cap_in_flight": CAP}


def payload(n: int) -> dict[str, Any]:
    return {"id": f"evt_{n:07d}", "object": "order", "amount": 1999 + n % 100,
            "currency": "eur", "livemode": False}


def publish(endpoint_id: str, prefix: str, count: int) -> list[str]:
    """``count`` events to ``endpoint_id`` through ``hookline.deliver.delay``; their ids."""
    import hookline

    event_ids = [f"{prefix}-{n:06d}" for n in range(count)]
    for n, event_id in enumerate(event_ids):
        hookline.deliver.delay(endpoint_id, EVENT_TYPE, payload(n), event_id=event_id)
    return event_ids


class DefaultWorker(Worker):
    """``celery -A hookline.worker worker -n NAME@%h`` in its own session: every other setting
    Celery's and Hookline's default, its environment ``env`` on top of this process's."""

    def __init__(self, env: dict[str, str], log_path: Path, name: str) -> None:
        self.name = name
        self.metrics_port = free_port()  # opened at worker_ready: the readiness probe
        self.log_path = log_path
        command = [sys.executable, "-m", "celery", "-A", "hookline.worker", "worker",
                   "-n", f"{name}@%h"]
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **env, "HOOKLINE_METRICS_PORT": str(self.metrics_port),
                     "PYTHONUNBUFFERED": "1"})
        self.started = time.time()

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=0.5):
                return True
        except OSError:
            return " ready." in self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90.0) -> float:
        """Until the worker is ready; Unix time it was first seen so."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {self.name} not ready after {timeout:.0f}s")
            time.sleep(0.02)
        return time.time()

    def stop(self) -> None:
        """SIGKILL its process group: its Redis is thrown away, nothing to hand back."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def process_threads(pid: int) -> int:
    """Threads of a process and its children."""
    import psutil

    process = psutil.Process(pid)
    return sum(each.num_threads() for each in [process, *process.children(recursive=True)])


class ProcessSampler:
    """The largest RSS (MB, children included) and thread count of a process, every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss_mb, self.threads = pid, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil

        # A process exiting: its owner's check_alive says so.
        with contextlib.suppress(OSError, KeyError, psutil.Error):
            self.rss_mb = max(self.rss_mb, memory(self.pid)["rss_mb"])
            self.threads = max(self.threads, process_threads(self.pid))

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(5)
        self._sample()
        return {"rss_max_mb": round(self.rss_mb, 1), "threads_max": self.threads}


class Completions:
    """When each of ``event_ids`` at ``endpoint_id`` was first seen recorded delivered. Only
    the events whose request the receiver answered (on ``route``) are read: no other can be."""

    def __init__(self, client: redis.Redis, receiver: InflightReceiver, endpoint_id: str,
                 route: str, event_ids: list[str]) -> None:
        self.client, self.receiver = client, receiver
        self.endpoint_id, self.route = endpoint_id, route
        self.pending = set(event_ids)
        self.at: dict[str, float] = {}

    def poll(self) -> int:
        from hookline.store.delivery import delivered

        candidates = sorted(self.receiver.answered(self.route) & self.pending)
        if candidates:
            flags = delivered(self.client, [(self.endpoint_id, e) for e in candidates])
            now = time.time()
            for event_id, done in zip(candidates, flags, strict=True):
                if done:
                    self.at[event_id] = now
                    self.pending.discard(event_id)
        return len(self.at)

    def wait(self, timeout: float, alive: Callable[[], None]) -> bool:
        """Until every event is delivered (True) or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if not self.pending:
                return True
            alive()
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL)

    @property
    def last(self) -> float:
        return max(self.at.values())

    def steady_rate(self) -> float | None:
        """Deliveries/s over the middle 80% of them (ramp-up and tail left out)."""
        times = sorted(self.at.values())
        first, last = len(times) // 10, len(times) - len(times) // 10 - 1
        if last - first < 10 or times[last] <= times[first]:
            return None
        return round((last - first) / (times[last] - times[first]), 1)


@dataclass
class Bench:
    options: argparse.Namespace
    workdir: Path
    receiver: InflightReceiver

    def fresh_redis(self, stack: ExitStack, name: str) -> tuple[RedisServer, redis.Redis]:
        """A private Redis that this process publishes to from now on."""
        from hookline.core.config import configure

        server, client = private_redis(stack, name, self.workdir)
        os.environ["REDIS_URL"] = server.url
        configure()
        return server, client

    def worker(self, stack: ExitStack, server: RedisServer, name: str,
               env: dict[str, str] | None = None) -> DefaultWorker:
        """A worker on ``server``, ``env`` added to its environment."""
        worker = DefaultWorker({"REDIS_URL": server.url,
                                "HOOKLINE_DLQ_SPOOL": str(self.workdir / f"spool-{name}.jsonl"),
                                **(env or {})},
                               self.workdir / f"worker-{name}.log", name)
        stack.callback(worker.stop)
        return worker

    def endpoint(self, client: redis.Redis, endpoint_id: str, route: str, delay: float,
                 **options: Any) -> None:
        from hookline.store.endpoints import EndpointRegistry

        EndpointRegistry(client).add(endpoint_id, self.receiver.route(route, delay, **options))


def _isolation_run(bench: Bench, label: str, delays: dict[str, float],
                   count: int) -> dict[str, Any]:
    """``count`` events to each endpoint of ``delays`` (in that order), then a worker; seconds
    from its ready to the last of fast's delivered."""
    with ExitStack() as part:
        server, client = bench.fresh_redis(part, label)
        ids = {}
        for endpoint_id, delay in delays.items():
            bench.endpoint(client, endpoint_id, f"{label}-{endpoint_id}", delay)
            ids[endpoint_id] = publish(endpoint_id, f"{label}-{endpoint_id}", count)
        worker = bench.worker(part, server, label)
        ready = worker.wait_ready()
        fast = Completions(client, bench.receiver, "fast", f"{label}-fast", ids["fast"])
        timeout = 60 + count * 0.3
        done = fast.wait(timeout, worker.check_alive)
        first_request = min(bench.receiver.snapshot(f"{label}-{name}").arrivals[0][0]
                            for name in delays)
        result: dict[str, Any] = {
            "events": {name: count for name in delays}, "timeout_seconds": timeout,
            "startup_seconds": round(ready - worker.started, 2),
            # Below 0: the worker sent before it was seen ready (the clock starts late).
            "first_request_after_ready_seconds": round(first_request - ready, 3),
            "fast_delivered": len(fast.at),
            "fast_seconds": round(fast.last - ready, 2) if done else None}
        if "slow" in delays:
            slow = Completions(client, bench.receiver, "slow", f"{label}-slow", ids["slow"])
            result["slow_delivered_by_then"] = slow.poll()
        return result


def isolation(bench: Bench) -> dict[str, Any]:
    """(a) and (b) in turn, ``--rounds`` times (the machine's speed drifts by a sixth from
    one worker to the next); the ratio is of their totals."""
    count, rounds = bench.options.isolation_events, []
    for number in range(bench.options.rounds):
        alone = _isolation_run(bench, f"iso{number}-alone", {"fast": 0.0}, count)
        beside = _isolation_run(bench, f"iso{number}-beside",
                                {"slow": ISOLATION_SLOW_DELAY, "fast": 0.0}, count)
        print(f"  round {number + 1}: fast alone {alone['fast_seconds']} s, behind slow's "
              f"backlog {beside['fast_seconds']} s", flush=True)
        rounds.append({"alone": alone, "beside_slow": beside})
    alone_seconds = [r["alone"]["fast_seconds"] for r in rounds]
    beside_seconds = [r["beside_slow"]["fast_seconds"] for r in rounds]
    within = None not in alone_seconds and None not in beside_seconds
    return {"events": count, "slow_delay_seconds": ISOLATION_SLOW_DELAY,
            "timeout_seconds": rounds[0]["alone"]["timeout_seconds"],
            "alone_seconds": alone_seconds, "beside_slow_seconds": beside_seconds,
            "slow_delivered_by_then": [r["beside_slow"]["slow_delivered_by_then"]
                                       for r in rounds],
            "ratio": round(sum(beside_seconds) / sum(alone_seconds), 2) if within else None,
            "rounds": rounds,
            "method": "all events queued before the worker starts (slow's first); clock from "
                      "the worker's ready to fast's last delivery; slow's not waited for"}


def _idle_worker(bench: Bench, part: ExitStack, server: RedisServer, client: redis.Redis,
                 endpoint: str = "slow", env: dict[str, str] | None = None) -> dict[str, Any]:
    """A worker (``env`` in its environment) after ``WARM_EVENTS`` deliveries to ``endpoint``
    (its route of the same name; its connections and threads open), idle: its RSS and
    threads; then its warm shutdown."""
    worker = bench.worker(part, server, f"{endpoint}-warm", env)
    worker.wait_ready()
    warm = Completions(client, bench.receiver, endpoint, endpoint,
                       publish(endpoint, f"{endpoint}-warm", WARM_EVENTS))
    if not warm.wait(60, worker.check_alive):
        raise TimeoutError(f"warm-up: {len(warm.at)} of {WARM_EVENTS} delivered in 60 s")
    pid = worker.process.pid
    idle = {"rss_idle_mb": memory(pid)["rss_mb"], "threads_idle": process_threads(pid)}
    stop_process(worker.process, timeout=60)
    return idle


def slow(bench: Bench) -> dict[str, Any]:
    """The idle numbers from a warmed-up worker; the run on a fresh one started with every
    event queued, so that the publisher neither paces it nor shares the CPU with it."""
    count, receiver = bench.options.slow_events, bench.receiver
    with ExitStack() as part:
        server, client = bench.fresh_redis(part, "slow")
        bench.endpoint(client, "slow", "slow", SLOW_DELAY)
        idle = _idle_worker(bench, part, server, client)
        receiver.reset_most("slow")
        done = Completions(client, receiver, "slow", "slow", publish("slow", "slow", count))
        worker = bench.worker(part, server, "slow")
        sampler = ProcessSampler(worker.process.pid)
        ready = worker.wait_ready()
        timeout = 60 + count / 20
        finished = done.wait(timeout, worker.check_alive)
        sampled = sampler.stop()
        peak = memory(worker.process.pid)["peak_mb"]
        route = receiver.snapshot("slow")
        declared = registry(client)["declared_dead"]
    most = route.most_in_flight
    return {"events": count, "delay_seconds": SLOW_DELAY, "timeout_seconds": timeout,
            "delivered": len(done.at),
            "seconds": round(done.last - ready, 2) if finished else None,
            "per_second": round(count / (done.last - ready), 1) if finished else None,
            "steady_per_second": done.steady_rate(), "receiver_most_in_flight": most,
            **idle, **sampled, "rss_peak_mb": peak,
            "rss_per_in_flight_kb": round((peak - idle["rss_idle_mb"]) * 1024 / most, 1)
            if most else None,
            "duplicates": sum(1 for n in route.requests.values() if n > 1),
            "declared_dead": declared,
            "method": "idle RSS and threads: a worker after 64 deliveries, then stopped; "
                      "the run: a fresh worker started with every event queued, clock from "
                      "its ready; steady = the middle 80% of the deliveries"}


# -- candidates: one worker process's concurrency settings, side by side ----------------------

#: The receivers' delays, and their names in the results.
CANDIDATE_DELAYS = {"0ms": 0.0, "1s": 1.0}


@dataclass
class Candidate:
    """A concurrency setting: what it adds to the worker's environment, and why it is here."""

    name: str
    env: dict[str, str]
    note: str


CANDIDATES = (
    Candidate("threads-64", {"CELERY_WORKER_CONCURRENCY": "64"}, "the old default"),
    Candidate("threads-512-unbounded",
              {"CELERY_WORKER_CONCURRENCY": "512", "HOOKLINE_RUNNABLE_ATTEMPTS": "512"},
              "512 slots, no bound on runnable attempts"),
    Candidate("threads-512", {},
              "the default (hookline/celeryconfig.py): 512 slots, HOOKLINE_RUNNABLE_ATTEMPTS 64"),
    Candidate("gevent-500", {"CELERY_WORKER_POOL": "gevent", "CELERY_WORKER_CONCURRENCY": "500"},
              "gevent pool, chosen in the configuration only: Celery monkey-patches only for "
              "-P/--pool on the command line (celery.maybe_patch_concurrency)"),
)


def candidate_unavailable(candidate: Candidate) -> str | None:
    """Why the worker's Python cannot run ``candidate``'s pool, or None."""
    pool = candidate.env.get("CELERY_WORKER_POOL", "threads")
    if pool not in ("gevent", "eventlet"):
        return None
    probe = subprocess.run([sys.executable, "-c", f"import {pool}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60, start_new_session=True)
    if probe.returncode == 0:
        return None
    error = (probe.stderr or probe.stdout).strip().splitlines()
    return (f"{sys.executable} -c 'import {pool}' failed"
            + (f": {error[-1]}" if error else f" ({probe.returncode})") + "; not installed here")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) and its live children, from
    /proc/PID/stat (utime and stime, fields 14 and 15)."""
    import psutil

    pids = [pid]
    with contextlib.suppress(psutil.Error):
        pids += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    ticks = 0
    for each in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            # After the command's ")": field 3 (state) onwards.
            fields = Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


#: A worker's log line at WARNING or above: its level and message.
LOG_WARNING = re.compile(r"^\[[^\]]*: (WARNING|ERROR|CRITICAL)/[^\]]*\] (.*)$")
UUID = re.compile(r"\[[0-9a-f-]{36}\]")


def log_warnings(path: Path, most: int = 5) -> dict[str, int]:
    """The ``most`` commonest warnings (and worse) of a worker's log: a structured event's
    name (and its ``error=``), else the message with task ids left out and cut short."""
    seen: Counter[str] = Counter()
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            found = LOG_WARNING.match(line)
            if found is None:
                continue
            level, message = found.groups()
            first, _, rest = message.partition(" ")
            if " " not in first and "." in first and "=" in rest:  # event key=value ...
                error = re.search(r"\berror=(\S+)", rest)
                key = first + (f" error={error.group(1)}" if error else "")
            else:
                key = UUID.sub("[id]", message)[:100]
            seen[f"{level} {key}"] += 1
    return dict(seen.most_common(most))


def _candidate_run(bench: Bench, candidate: Candidate, receiver_name: str,
                   number: int) -> dict[str, Any]:
    """``candidate`` against the receiver ``receiver_name``: events queued, a fresh worker
    (after, for a slow receiver, an idle one's RSS and threads), measured from its ready."""
    delay, receiver = CANDIDATE_DELAYS[receiver_name], bench.receiver
    count = bench.options.candidate_events[receiver_name]
    label = f"cand{number}-{candidate.name}-{receiver_name}"
    monitor = LoadMonitor()
    try:
        with ExitStack() as part:
            server, client = bench.fresh_redis(part, label)
            bench.endpoint(client, label, label, delay)
            idle = _idle_worker(bench, part, server, client, label, candidate.env) if delay \
                else {}
            receiver.reset_most(label)
            done = Completions(client, receiver, label, label, publish(label, label, count))
            worker = bench.worker(part, server, label, candidate.env)
            pid = worker.process.pid
            sampler = ProcessSampler(pid)
            ready = worker.wait_ready()
            cpu_start = cpu_seconds(pid)
            timeout = 60 + count * (delay / 20 + 0.1)
            finished = done.wait(timeout, worker.check_alive)
            cpu = cpu_seconds(pid) - cpu_start
            sampled = sampler.stop()
            peak = memory(pid)["peak_mb"]
            snap = receiver.snapshot(label)
            warnings = log_warnings(worker.log_path)
            declared = registry(client)["declared_dead"]
    finally:
        others = monitor.stop()
    most, delivered = snap.most_in_flight, len(done.at)
    result: dict[str, Any] = {
        "candidate": candidate.name, "receiver": receiver_name, "delay_seconds": delay,
        "round": number + 1, "events": count, "timeout_seconds": timeout,
        "delivered": delivered, "startup_seconds": round(ready - worker.started, 2),
        "seconds": round(done.last - ready, 2) if finished else None,
        "per_second": round(count / (done.last - ready), 1) if finished else None,
        "steady_per_second": done.steady_rate(),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_delivery": round(cpu * 1000 / delivered, 3) if delivered else None,
        "receiver_most_in_flight": most, **idle, **sampled, "rss_peak_mb": peak,
        "duplicates": sum(1 for wid, n in snap.requests.items()
                          if n > 1 and not wid.startswith(f"{label}-warm")),
        "worker_warnings": warnings, "others_cpu": others,
        # a busy worker taken for dead would show here (it must stay 0)
        "declared_dead": declared}
    if delay:
        result["rss_per_in_flight_kb"] = (round((peak - idle["rss_idle_mb"]) * 1024 / most, 1)
                                          if most else None)
    return result


#: Per candidate and receiver, the medians reported.
CANDIDATE_MEASURES = ("per_second", "steady_per_second", "seconds", "cpu_ms_per_delivery",
                      "rss_peak_mb", "rss_max_mb", "threads_max", "receiver_most_in_flight",
                      "rss_idle_mb", "threads_idle", "rss_per_in_flight_kb")


def _median(values: list[Any]) -> float | None:
    known = [value for value in values if value is not None]
    return round(statistics.median(known), 3) if known else None


def candidates(bench: Bench) -> dict[str, Any]:
    """Every available candidate against each receiver, in turn, ``--rounds`` times (the
    order reversed every other round: the machine's speed drifts); medians per candidate."""
    skipped = {c.name: reason for c in CANDIDATES
               if (reason := candidate_unavailable(c)) is not None}
    runnable = [c for c in CANDIDATES if c.name not in skipped]
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in runnable}
    for number in range(bench.options.rounds):
        order = runnable if number % 2 == 0 else runnable[::-1]
        receivers = list(CANDIDATE_DELAYS) if number % 2 == 0 else list(CANDIDATE_DELAYS)[::-1]
        for candidate in order:
            for receiver_name in receivers:
                try:
                    measured = _candidate_run(bench, candidate, receiver_name, number)
                except Exception as exc:  # recorded; the other runs still go on
                    traceback.print_exc()
                    measured = {"candidate": candidate.name, "receiver": receiver_name,
                                "round": number + 1,
                                "error": f"{type(exc).__name__}: {exc}"[:2000]}
                runs[candidate.name].append(measured)
                print(f"  round {number + 1}: {candidate.name} at {receiver_name}: "
                      + _run_summary(measured), flush=True)
    results: dict[str, Any] = {}
    for candidate in CANDIDATES:
        entry: dict[str, Any] = {"env": candidate.env, "note": candidate.note}
        if candidate.name in skipped:
            results[candidate.name] = {**entry, "skipped": True,
                                       "reason": skipped[candidate.name]}
            continue
        mine = runs[candidate.name]
        medians = {}
        for receiver_name in CANDIDATE_DELAYS:
            done = [r for r in mine if r["receiver"] == receiver_name and "error" not in r]
            medians[receiver_name] = {key: _median([r.get(key) for r in done])
                                      for key in CANDIDATE_MEASURES if
                                      any(key in r for r in done)}
            medians[receiver_name]["rounds_measured"] = len(done)
        results[candidate.name] = {**entry, "skipped": False, "median": medians,
                                   "errors": [r["error"] for r in mine if "error" in r],
                                   "runs": mine}
    return {"events": dict(bench.options.candidate_events),
            "delays_seconds": CANDIDATE_DELAYS, "rounds": bench.options.rounds,
            "candidates": results, "table": _candidate_table(results),
            "method": "per candidate and receiver a fresh Redis and every event queued before "
                      "a fresh worker starts (its concurrency set in its environment); clock "
                      "from its ready to the last delivery (done markers); steady = the "
                      "middle 80% of the deliveries; CPU = the worker's utime + stime from "
                      "its ready to the end over the deliveries; idle RSS (1 s only): a "
                      "worker of the candidate after 64 deliveries, then stopped; KB per "
                      "in-flight = (peak RSS - idle) / the receiver's largest in-flight "
                      "count; candidates in turn, the order reversed every other round; "
                      "medians of the rounds"}


def _run_summary(measured: dict[str, Any]) -> str:
    if "error" in measured:
        return f"error {measured['error'][:200]}"
    return (f"{measured['per_second']}/s (steady {measured['steady_per_second']}), "
            f"{measured['cpu_ms_per_delivery']} CPU ms/delivery, peak "
            f"{measured['rss_peak_mb']} MB, {measured['threads_max']} threads, "
            f"{measured['receiver_most_in_flight']} in flight, other processes "
            f"{measured['others_cpu']['other_cores_mean']} cores")


def _candidate_table(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per candidate: the medians the report's table shows."""
    rows = []
    for name, entry in results.items():
        if entry["skipped"]:
            rows.append({"candidate": name, "skipped": entry["reason"]})
            continue
        fast, late = entry["median"]["0ms"], entry["median"]["1s"]
        rows.append({"candidate": name,
                     "per_second_0ms": fast.get("per_second"),
                     "steady_per_second_0ms": fast.get("steady_per_second"),
                     "per_second_1s": late.get("per_second"),
                     "steady_per_second_1s": late.get("steady_per_second"),
                     "cpu_ms_per_delivery_0ms": fast.get("cpu_ms_per_delivery"),
                     "rss_peak_mb_1s": late.get("rss_peak_mb"),
                     "rss_per_in_flight_kb_1s": late.get("rss_per_in_flight_kb"),
                     "threads_max_1s": late.get("threads_max"),
                     "receiver_most_in_flight_1s": late.get("receiver_most_in_flight"),
                     "errors": len(entry["errors"])})
    return rows


def candidates_table(part: dict[str, Any]) -> str:
    """The candidates' markdown table."""
    def rate(overall: Any, steady: Any) -> str:
        return "-" if overall is None else f"{overall:g} ({steady:g})" if steady is not None \
            else f"{overall:g}"

    def value(number: Any) -> str:
        return "-" if number is None else f"{number:g}"

    lines = ["| candidate | 0 ms/s | 1 s/s | CPU ms/delivery at 0 ms | peak RSS MB (1 s) "
             "| KB per in-flight | threads (1 s) |", "|---|---|---|---|---|---|---|"]
    for row in part["table"]:
        if "skipped" in row:
            lines.append(f"| {row['candidate']} | skipped: "
                         f"{row['skipped'].replace('|', '/')} | | | | | |")
            continue
        errors = f" ({row['errors']} runs failed)" if row["errors"] else ""
        lines.append(f"| {row['candidate']}{errors} "
                     f"| {rate(row['per_second_0ms'], row['steady_per_second_0ms'])} "
                     f"| {rate(row['per_second_1s'], row['steady_per_second_1s'])} "
                     f"| {value(row['cpu_ms_per_delivery_0ms'])} "
                     f"| {value(row['rss_peak_mb_1s'])} "
                     f"| {value(row['rss_per_in_flight_kb_1s'])} "
                     f"| {value(row['threads_max_1s'])} |")
    events = part["events"]
    lines += ["", f"Medians of {part['rounds']} round(s); {events['0ms']:,} events at 0 ms, "
              f"{events['1s']:,} at 1 s, one worker process; deliveries/s overall (steady: the "
              "middle 80%), from the worker's ready to the last delivery."]
    notes = [note for entry in part["candidates"].values() for run in entry.get("runs", [])
             if (note := _run_note(run))]
    if notes:
        lines += ["", "Runs with errors, duplicates or worker warnings:", "",
                  *(f"- {note}" for note in notes)]
    return "\n".join(lines)


def _run_note(run: dict[str, Any]) -> str:
    """What went wrong in one run, or ""."""
    where = f"{run['candidate']} at {run['receiver']}, round {run['round']}"
    if "error" in run:
        return f"{where}: error {run['error'][:300]}"
    said = [f"{run['duplicates']} webhook-ids requested more than once"] \
        if run["duplicates"] else []
    said += [f"{count} x {text}" for text, count in run["worker_warnings"].items()]
    if not said:
        return ""
    return (f"{where} ({run['per_second']}/s, {run['cpu_ms_per_delivery']} CPU ms/delivery): "
            + "; ".join(said)).replace("|", "/")


def recovery(bench: Bench) -> dict[str, Any]:
    receiver, timeout = bench.receiver, bench.options.recovery_timeout
    with ExitStack() as part:
        server, client = bench.fresh_redis(part, "recovery")
        bench.endpoint(client, "recovery", "recovery", RECOVERY_DELAY, held=True)
        first = bench.worker(part, server, "recovery-a")
        first.wait_ready()
        ids = publish("recovery", "recovery", RECOVERY_EVENTS)
        route = receiver.routes["recovery"]
        full = receiver.wait_until(lambda: route.in_flight >= RECOVERY_EVENTS, 60,
                                   first.check_alive)
        second = bench.worker(part, server, "recovery-b")
        second_ready = second.wait_ready() - second.started
        in_flight_at_kill = receiver.in_flight("recovery")
        killed_at = time.time()
        first.stop()  # SIGKILL to A's process group
        receiver.release("recovery")
        done = Completions(client, receiver, "recovery", "recovery", ids)
        recovered = done.wait(timeout, second.check_alive)
        snap = receiver.snapshot("recovery")
    before = {wid for at, wid in snap.arrivals if at < killed_at}
    duplicates = sorted(wid for wid, n in snap.requests.items() if n > 1)
    after = Counter(wid for at, wid in snap.arrivals if at >= killed_at)
    return {"events": RECOVERY_EVENTS, "delay_seconds": RECOVERY_DELAY,
            "a_reached_all_in_flight": full, "in_flight_at_kill": in_flight_at_kill,
            "b_startup_seconds": round(second_ready, 2), "timeout_seconds": timeout,
            "recovered_seconds": round(done.last - killed_at, 2) if recovered else None,
            "delivered": len(done.at), "lost": len(done.pending),
            "requests": len(snap.arrivals), "arrived_before_kill": len(before),
            "requests_after_kill": sum(after.values()),
            "duplicates": len(duplicates),
            "duplicates_arrived_before_kill": set(duplicates) <= before,
            "requested_twice_after_kill": sorted(w for w, n in after.items() if n > 1)}


def cap(bench: Bench) -> dict[str, Any]:
    count, receiver = bench.options.cap_events, bench.receiver
    with ExitStack() as part:
        server, client = bench.fresh_redis(part, "cap")
        url = receiver.route("cap", CAP_DELAY)
        # `hookline endpoint add`, run so that it imports the hookline the workers run (the
        # one in ROOT, as `python -m celery` there does), whatever the virtualenv installed.
        added = subprocess.run(
            [sys.executable, "-c", CLI, "endpoint", "add", "cap", "--url", url,
             "--max-in-flight", str(CAP)],
            cwd=ROOT, capture_output=True, text=True, timeout=60, start_new_session=True)
        if added.returncode != 0:
            message = (added.stderr or added.stdout).strip().splitlines()
            return {"skipped": True, "reason": message[-1] if message else
                    f"hookline endpoint add exited {added.returncode}"}
        workers = [bench.worker(part, server, f"cap-{n}") for n in range(CAP_WORKERS)]
        for worker in workers:
            worker.wait_ready()

        def alive() -> None:
            for worker in workers:
                worker.check_alive()

        started = time.time()
        done = Completions(client, receiver, "cap", "cap", publish("cap", "cap", count))
        timeout = 60 + count * CAP_DELAY / CAP * 2
        finished = done.wait(timeout, alive)
        snap = receiver.snapshot("cap")
    return {"skipped": False, "events": count, "workers": CAP_WORKERS, "max_in_flight": CAP,
            "delay_seconds": CAP_DELAY, "timeout_seconds": timeout, "delivered": len(done.at),
            "receiver_most_in_flight": snap.most_in_flight,
            "seconds": round(done.last - started, 2) if finished else None,
            "per_second": round(count / (done.last - started), 1) if finished else None,
            "ideal_per_second": CAP / CAP_DELAY,
            "duplicates": sum(1 for n in snap.requests.values() if n > 1)}


MEASURES: dict[str, Callable[[Bench], dict[str, Any]]] = {
    "isolation": isolation, "slow": slow, "candidates": candidates, "recovery": recovery,
    "cap": cap}


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-inflight-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        _, control = private_redis(stack, "control", workdir)
        bench_environment(workdir, HOOKLINE_LOG_FORMAT="text")
        info = machine(control)
        receiver = InflightReceiver()
        stack.callback(receiver.stop)
        stack.callback(hold_signals)
        bench = Bench(options, workdir, receiver)
        parts: dict[str, Any] = {}
        for name in options.parts:
            print(f"part {name}", flush=True)
            monitor = LoadMonitor()  # the CPU that other processes of the machine took
            own, wall = os.times(), time.monotonic()
            try:
                parts[name] = MEASURES[name](bench)
            except Exception as exc:  # recorded; the other parts still run
                traceback.print_exc()
                parts[name] = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
            finally:
                others = monitor.stop()
            spent = os.times()
            parts[name]["others_cpu"] = others
            # This process's share: the receiver's threads and the polling (a bound if ~1).
            parts[name]["bench_process_cores"] = round(
                (spent.user + spent.system - own.user - own.system)
                / (time.monotonic() - wall), 2)
            print(f"  {parts[name]}", flush=True)
        info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        settings = {key: str(value) if isinstance(value, Path) else value
                    for key, value in vars(options).items()}
        return {"machine": info, "options": settings, "target_values": TARGETS,
                "parts": parts}


def _row(target: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"target": target, "measured": measured, "met": met}


def _isolation_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    alone, beside = part["alone_seconds"], part["beside_slow_seconds"]
    target = (f"isolation: fast's {part['events']:,} behind slow's {part['events']:,} "
              f"({part['slow_delay_seconds']:g} s) / fast's alone <= "
              f"{TARGETS['isolation_ratio']}")
    if part["ratio"] is None:
        return [_row(target, f"not within {part['timeout_seconds']:.0f} s (s behind slow: "
                     f"{beside}; alone: {alone})", False)]
    return [_row(target, f"{part['ratio']} ({' + '.join(map(str, beside))} s / "
                 f"{' + '.join(map(str, alone))} s; slow's delivered by then: "
                 f"{', '.join(map(str, part['slow_delivered_by_then']))})",
                 part["ratio"] <= TARGETS["isolation_ratio"])]


def _slow_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    steady = part["steady_per_second"]
    overall = (f"overall {part['per_second']}/s" if part["per_second"] else
               f"{part['delivered']:,} of {part['events']:,} delivered in "
               f"{part['timeout_seconds']:.0f} s")
    return [
        _row(f"slow receiver ({part['delay_seconds']:g} s), one worker: steady deliveries/s "
             f">= {TARGETS['slow_per_second']:g}",
             f"{steady}/s ({overall}; {part['receiver_most_in_flight']} in flight at most)",
             steady is not None and steady >= TARGETS["slow_per_second"]),
        _row("slow: worker memory (reported)",
             f"peak RSS {part['rss_peak_mb']} MB (idle {part['rss_idle_mb']} MB), threads "
             f"{part['threads_max']} (idle {part['threads_idle']}); "
             f"{part['rss_per_in_flight_kb']} KB RSS per in-flight attempt", None),
    ]


def _recovery_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    events, timeout = part["events"], part["timeout_seconds"]
    seconds = part["recovered_seconds"]
    explained = part["duplicates_arrived_before_kill"]
    twice = part["requested_twice_after_kill"]
    return [
        _row(f"recovery: all {events} delivered after kill -9 of worker A "
             f"({part['in_flight_at_kill']} in flight), within {timeout:.0f} s",
             f"{seconds} s" if seconds is not None else
             f"not within {timeout:.0f} s ({part['delivered']} of {events} delivered)",
             seconds is not None),
        _row("recovery: none lost", f"{part['lost']} not delivered when the wait ended",
             part["lost"] == 0),
        _row("recovery: duplicates only of attempts cut off by the kill",
             f"{part['duplicates']} webhook-ids requested more than once, each also before "
             f"the kill: {'yes' if explained else 'no'}; {len(twice)} requested more than "
             f"once after it ({part['requests_after_kill']} requests after it)",
             (explained and not twice) if part["requests_after_kill"] else None),
    ]


def _cap_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    limit = TARGETS["cap_in_flight"]
    target = f"cap: --max-in-flight {CAP}, receiver's most in flight <= {limit}"
    if part["skipped"]:
        return [_row(target, f"skipped: {part['reason']}", None)]
    rate = (f"{part['per_second']}/s" if part["per_second"] else
            f"{part['delivered']} of {part['events']} delivered in "
            f"{part['timeout_seconds']:.0f} s")
    return [_row(target, str(part["receiver_most_in_flight"]),
                 part["receiver_most_in_flight"] <= limit),
            _row(f"cap: deliveries/s, {part['workers']} workers (reported; at most "
                 f"{part['ideal_per_second']:g}/s)", rate, None)]


def _candidates_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    rows = part["table"]
    measured = [row for row in rows if "skipped" not in row]
    failed = sum(row["errors"] for row in measured)
    skipped = [row["candidate"] for row in rows if "skipped" in row]
    return [_row("candidates: one worker's concurrency settings at 0 ms and 1 s (reported)",
                 f"{len(measured)} measured ({failed} runs failed), skipped: "
                 f"{', '.join(skipped) or 'none'}; table below", None)]


ROWS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "isolation": _isolation_rows, "slow": _slow_rows, "candidates": _candidates_rows,
    "recovery": _recovery_rows, "cap": _cap_rows}


def finish(result: dict[str, Any]) -> None:
    """The verdict on each target."""
    rows = []
    for name, part in result["parts"].items():
        if "error" in part:
            rows.append(_row(name, f"error: {part['error'][:300]}", False))
        else:
            rows += ROWS[name](part)
    result["targets"] = rows


def report(result: dict[str, Any]) -> str:
    info = result["machine"]
    lines = [f"{info['date']}, {info['cpus']} cores {info['cpu_model']}, load "
             f"{info['load_average'][0]}, Python {info['python']}, Celery {info['celery']}, "
             f"Redis {info['redis_server']}, commit {info['commit']}"
             + (f" (uncommitted: {', '.join(info['uncommitted'])})"
                if info["uncommitted"] else ""),
             "", "| target | measured | met |", "|---|---|---|"]
    verdict = {True: "yes", False: "no", None: "-"}
    for row in result["targets"]:
        measured = str(row["measured"]).replace("|", "/").replace("\n", " ")
        lines.append(f"| {row['target']} | {measured} | {verdict[row['met']]} |")
    others = [f"{name} {part['others_cpu']['other_cores_mean']} "
              f"({part['others_cpu']['other_cores_peak_2s']})"
              for name, part in result["parts"].items()]
    own = [f"{name} {part['bench_process_cores']}" for name, part in result["parts"].items()]
    lines += ["", "Cores other processes of the machine used meanwhile, mean (busiest 2 s): "
              + ", ".join(others) + f"; {BUSY_NOTE}. This process (receiver, publisher, "
              "polling): " + ", ".join(own) + " cores."]
    part = result["parts"].get("candidates", {})
    if "table" in part:
        lines += ["", "Candidates:", "", candidates_table(part)]
    return "\n".join(lines)


def parse_parts(text: str) -> list[str]:
    parts = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in parts if name not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"parts are {', '.join(PARTS)} (comma-separated); "
                                         f"got {text!r}")
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="500 isolation events, 2,000 slow, 1,500 per candidate and "
                        "receiver, 150 capped, recovery timeout 60 s")
    parser.add_argument("--parts", type=parse_parts, default=list(PARTS),
                        help=f"comma-separated, in the order to run (default "
                        f"{','.join(PARTS)})")
    parser.add_argument("--rounds", type=int,
                        help="rounds of isolation's (a) and (b), in turn, and of the "
                        "candidates (2; --quick 1)")
    parser.add_argument("--recovery-timeout", type=float, metavar="SECONDS",
                        help="how long to wait for recovery's events after the kill "
                        "(420; --quick 60)")
    parser.add_argument("--out", "--output", dest="output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    quick = options.quick
    options.isolation_events = 500 if quick else 1000
    options.slow_events = 2000 if quick else 4000
    options.cap_events = 150 if quick else 300
    options.candidate_events = {name: 1500 if quick else 3000 for name in CANDIDATE_DELAYS}
    if options.recovery_timeout is None:
        options.recovery_timeout = 60.0 if quick else 420.0
    if options.rounds is None:
        options.rounds = 1 if quick else 2
    if options.recovery_timeout <= 0 or options.rounds < 1:
        parser.error("--recovery-timeout must be positive, --rounds at least 1")
    return run_bench(run, options, report, finish=finish)


if __name__ == "__main__":
    sys.exit(main())
