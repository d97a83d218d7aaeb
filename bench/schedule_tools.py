"""Helpers of ``bench.schedule``: a worker's memory, waiting on it, publishing to its queue."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.common import Worker

ENDPOINT = "bench"
REFUSED_URL = "http://127.0.0.1:9/"
NO_BREAKER = str(10**9)
#: The receivers are on loopback, which Hookline refuses unless allowed.
LOOPBACK = "127.0.0.0/8"


def worker_env(url: str, workdir: Path) -> dict[str, str]:
    """A Hookline worker's environment: its own Redis, no breaker, loopback allowed."""
    return {"REDIS_URL": url, "HOOKLINE_BROKER_URL": url, "HOOKLINE_LOG_FORMAT": "text",
            "HOOKLINE_BREAKER_THRESHOLD": NO_BREAKER, "HOOKLINE_ALLOWED_NETWORKS": LOOPBACK,
            "HOOKLINE_METRICS_PORT": "0",
            "HOOKLINE_DLQ_SPOOL": str(workdir / "dlq-spool.jsonl")}


def memory(pid: int) -> dict[str, float]:
    """RSS and peak RSS (VmHWM) in MB of a process and its children (Linux /proc)."""
    pids = [pid]
    try:
        import psutil

        pids += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    rss = peak = 0
    for each in pids:
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{each}/status").read_text().splitlines() if ":" in line)
        rss += int(fields["VmRSS"].split()[0])
        peak += int(fields["VmHWM"].split()[0])
    return {"rss_mb": round(rss / 1024, 1), "peak_mb": round(peak / 1024, 1),
            "processes": len(pids)}


def kill_worker(worker: Worker) -> None:
    """SIGKILL the worker's process group: its Redis is thrown away, nothing to hand back."""
    if worker.process.poll() is None:
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait()


def wait_consuming(client: redis.Redis, worker: Worker, timeout: float = 60.0) -> None:
    """Until the worker's consumer blocks: on BRPOP (kombu's transport) or BLMPOP (Hookline's,
    on its doorbell, BLPOP before Redis 7; its releaser blocks with BLPOP, on the schedule's
    wake list)."""
    deadline = time.monotonic() + timeout

    def blocked() -> bool:
        commands = [c.get("cmd") for c in client.client_list()]
        return "brpop" in commands or commands.count("blmpop") + commands.count("blpop") >= 2

    while not blocked():
        worker.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker did not start consuming in {timeout:.0f}s")
        time.sleep(0.1)


def wait_count(count: Callable[[], int], target: int, worker: Worker, timeout: float,
               label: str) -> list[dict[str, float]]:
    """Until ``count()`` reaches ``target``; progress (count, worker RSS) every 10 s, returned."""
    started = last = time.monotonic()
    progress = []
    while (got := count()) < target:
        worker.check_alive()
        now = time.monotonic()
        if now - started > timeout:
            raise TimeoutError(f"{label}: {got} of {target} after {timeout:.0f}s")
        if now - last >= 10:
            rss = memory(worker.process.pid)["rss_mb"]
            progress.append({"seconds": round(now - started), "count": got, "rss_mb": rss})
            print(f"  {label}: {got}/{target} after {now - started:.0f}s, worker RSS {rss} MB",
                  flush=True)
            last = now
        time.sleep(0.2)
    return progress


def publish(client: redis.Redis, celery_app: Any, task: str, queue: str, count: int,
            prefix: str) -> float:
    """LPUSH ``count`` first deliveries onto ``queue`` in pipelines of 1000; seconds taken."""
    from hookline.store.connection import ring
    from hookline.transport.envelope import build_message

    started = time.perf_counter()
    for start in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(count, start + 1000)):
            event_id = f"{prefix}-{n:06d}"
            pipe.lpush(queue, build_message(
                celery_app, task_name=task, task_id=event_id,
                args=[ENDPOINT, "bench.retry", {"n": n}], kwargs={"event_id": event_id},
                retries=0, queue=queue))
        ring(pipe, queue, min(count, start + 1000) - start)  # one token per message, as on publish
        pipe.execute()
    return time.perf_counter() - started


class LagSampler:
    """A thread looking at a schedule every 0.1 s: how overdue its earliest retry is (due but
    not released yet: the releaser's lag, or the retry queue at its limit) and how deep the
    queues are, so retry lateness splits into releasing late and waiting for a worker."""

    def __init__(self, port: int) -> None:
        from hookline.store.schedule import RetrySchedule

        self.client = redis.Redis(port=port, decode_responses=True)
        self.schedule = RetrySchedule(self.client)
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            pipe = self.client.pipeline(transaction=False)
            pipe.llen("hookline.retry")
            pipe.llen("hookline")
            retry_queue, first_queue = pipe.execute()
            self.samples.append((self.schedule.stats().lag, retry_queue, first_queue))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(5)
        self.client.close()
        lags = [lag for lag, _, _ in self.samples] or [0.0]
        return {"samples": len(self.samples),
                "schedule_lag_ms_max": round(max(lags) * 1000, 1),
                "retry_queue_max": max((r for _, r, _ in self.samples), default=0),
                "first_queue_max": max((f for _, _, f in self.samples), default=0)}


def marginal_kb(progress: list[dict[str, float]], count: int, rss_mb: float) -> float | None:
    """Worker KB per waiting retry past the warm-up: RSS growth from the first progress sample
    with at least 10% of ``count`` waiting to the end, over the retries added since."""
    base = next((p for p in progress if p["count"] >= count / 10), None)
    if base is None or count - base["count"] < count / 2:
        return None
    return round((rss_mb - base["rss_mb"]) * 1024 / (count - base["count"]), 2)


def hold_signals(*exc_info: Any) -> bool:
    """While stopping what it started after an error or Ctrl-C, the benchmark ignores a
    second Ctrl-C (pushed last onto an ExitStack, so it runs first)."""
    if not exc_info or exc_info[0] is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return False
