"""What ``bench.compare`` measures beside its timings: a worker's memory over a batch, the CPU
each process spent on it, and how busy the rest of the machine was."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from bench.common import Worker
from bench.schedule_tools import memory


class RssSampler:
    """Worker RSS (children included) every 0.2 s while a batch runs; the maximum."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.pids = [w.process.pid for w in workers]
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with contextlib.suppress(OSError, KeyError):  # a worker exiting: check_alive says so
            self.peak = max(self.peak, sum(memory(pid)["rss_mb"] for pid in self.pids))

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        self._sample()
        return round(self.peak, 1)


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its live children."""
    import psutil

    process = psutil.Process(pid)
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = each.cpu_times()
            total += times.user + times.system
    return total


class CpuMeter:
    """CPU seconds spent during a batch by the workers, their Redis and the receiver."""

    def __init__(self, workers: Sequence[Worker], client: redis.Redis,
                 receiver_pid: int) -> None:
        self.workers, self.client, self.receiver_pid = workers, client, receiver_pid
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        info = self.client.info("cpu")
        calls = {name.removeprefix("cmdstat_"): float(value["calls"])
                 for name, value in self.client.info("commandstats").items()}
        return {**{f"redis_calls:{name}": n for name, n in calls.items()},
                "worker": sum(_process_cpu(w.process.pid) for w in self.workers),
                "redis": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
                "receiver": _process_cpu(self.receiver_pid)}

    def per_event(self, events: int) -> tuple[dict[str, float], dict[str, float]]:
        """(CPU ms per event by process, Redis commands per event by name: INFO
        commandstats, which counts the commands Lua scripts run too; the meter's own INFO
        calls left out)."""
        end = self._read()
        cpu = {key: round((end[key] - self.start[key]) * 1000 / events, 3)
               for key in ("worker", "redis", "receiver")}
        calls = {key.split(":", 1)[1]: round((n - self.start.get(key, 0)) / events, 3)
                 for key, n in end.items() if key.startswith("redis_calls:")
                 and key != "redis_calls:info" and n > self.start.get(key, 0)}
        return cpu, dict(sorted(calls.items(), key=lambda item: -item[1]))


class LoadMonitor:
    """How busy the machine was with work other than this benchmark's own process tree:
    every 2 s, all CPU time (/proc/stat) minus the CPU time of this process and its
    descendants; cores on average, and the busiest 2 s."""

    def __init__(self, interval: float = 2.0) -> None:
        import psutil

        self.me = psutil.Process()
        self.interval, self.others, self.peak = interval, 0.0, 0.0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _busy() -> float:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")

    def _tree(self) -> dict[int, float]:
        import psutil

        cpu = {}
        for process in [self.me, *self.me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                cpu[process.pid] = times.user + times.system
        return cpu

    def _run(self) -> None:
        busy, tree = self._busy(), self._tree()
        while not self._stop.wait(self.interval):
            now_busy, now_tree = self._busy(), self._tree()
            mine = sum(t - tree.get(pid, 0.0) for pid, t in now_tree.items())
            others = max(0.0, now_busy - busy - mine)
            self.others += others
            self.peak = max(self.peak, others / self.interval)
            busy, tree = now_busy, now_tree

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(5)
        elapsed = time.monotonic() - self.started
        return {"other_cores_mean": round(self.others / elapsed, 2),
                "other_cores_peak_2s": round(self.peak, 2)}
