"""The processes a chaos run starts, injures and stops: a private Redis with AOF, receivers in
processes of their own, and ``celery -A app worker`` subprocesses.

Every child gets its own session, so a Ctrl-C in the terminal reaches only the chaos driver,
which then stops them in order. Nothing here imports ``app``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.common import stop_process

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any Hookline, Celery or Redis setting (a test run
    or a shell may have set some), plus ``extra``."""
    kept = {key: value for key, value in os.environ.items()
            if not key.startswith(("HOOKLINE_", "CELERY_", "PROMETHEUS_"))
            and key not in ("REDIS_URL",)}
    return {**kept, **extra}


class AofRedis:
    """``redis-server`` on a free loopback port with AOF on (fsync every second), so that a
    shutdown and a start on the same port and directory keep the data."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 20.0) -> None:
        self.starts += 1
        log = open(self.workdir / f"redis-{self.starts}.log", "wb")  # noqa: SIM115
        with log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                 "--maxmemory-policy", "noeviction", "--dir", str(self.workdir)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        probe = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited ({self.process.returncode})")
            try:
                probe.ping()  # answers only once the AOF is loaded
                probe.close()
                return
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server not answering on {self.port}") from None
            time.sleep(0.05)

    def shutdown(self) -> None:
        """SHUTDOWN: the AOF is flushed and fsynced, then the server exits."""
        client = redis.Redis(port=self.port, retry=Retry(NoBackoff(), 0))
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown()
        assert self.process is not None
        self.process.wait(20)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=10)

    def quick_client(self) -> redis.Redis:
        """A client that gives up at once (a paused Redis must not stall a driver's clock)."""
        return redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=1,
                                    socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))

    def env(self) -> dict[str, str]:
        """The settings that point a worker here."""
        return {"REDIS_URL": self.url}

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, signal.SIGTERM, 10.0)


class ReceiverProcess:
    """A receiver module (``examples.receiver`` or ``bench.chaos_receiver``) in its own process,
    recording one JSON line per request to ``record``."""

    def __init__(self, module: str, record: Path, *args: str) -> None:
        self.port = free_port()
        self.record = record
        record.touch()
        # A worker killed mid-request makes the server print a traceback: keep it out of the
        # run's output, next to the record.
        with open(record.with_suffix(".stderr"), "wb") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, "--port", str(self.port), "--record",
                 str(record), *args],
                cwd=ROOT, env=clean_env({"PYTHONUNBUFFERED": "1"}), stdout=subprocess.PIPE,
                stderr=errors, start_new_session=True,
            )
        assert self.process.stdout is not None
        if not self.process.stdout.readline():  # it prints one line once listening
            raise RuntimeError(f"{module} did not start")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        stop_process(self.process, signal.SIGTERM, 10.0)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    #: running, sigkill, sigterm (warm shutdown under way or done) or stopped.
    state: str = "running"
    ended_at: float | None = None

    def ready(self) -> bool:
        return " ready." in self.log_path.read_text(errors="replace")


@dataclass
class WorkerFleet:
    """Worker subprocesses named chaos1, chaos2, ... in the order they were started."""

    env: dict[str, str]
    workdir: Path
    concurrency: int = 16
    workers: list[WorkerProcess] = field(default_factory=list)
    #: Watch each worker's heap (bench.heapwatch), into ``heap-<name>.jsonl`` in ``workdir``.
    watch_heap: bool = False
    #: Set in the even-numbered workers only (chaos2, chaos4, ...): an A/B in one run. A
    #: replacement keeps its victim's parity (chaos1 -> chaos3, chaos2 -> chaos4).
    even_env: dict[str, str] = field(default_factory=dict)
    #: Set in the odd-numbered workers only (chaos1, chaos3, ...).
    odd_env: dict[str, str] = field(default_factory=dict)

    def start(self) -> WorkerProcess:
        name = f"chaos{len(self.workers) + 1}"
        log_path = self.workdir / f"worker-{name}.log"
        runner, env = "celery", self.env
        even = len(self.workers) % 2 == 1  # this one is even-numbered
        env = {**env, **(self.even_env if even else self.odd_env)}
        if self.watch_heap:
            runner = "bench.heapwatch"
            env = {**env, "HEAPWATCH_FILE": str(self.workdir / f"heap-{name}.jsonl")}
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", runner, "-A", "app", "worker", "-P", "threads",
                 "-c", str(self.concurrency), "-l", "info", "-n", f"{name}@%h",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(name, process, log_path, time.time())
        self.workers.append(worker)
        return worker

    def wait_ready(self, worker: WorkerProcess, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not worker.ready():
            if worker.process.poll() is not None:
                tail = worker.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"worker {worker.name} exited:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {worker.name} not ready in {timeout:.0f}s")
            time.sleep(0.1)

    def running(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.state == "running" and w.process.poll() is None]

    def victim(self) -> WorkerProcess:
        """The running worker to injure: the oldest one that is ready (else the oldest)."""
        running = self.running()
        if not running:
            raise RuntimeError("no running worker to injure")
        return next((w for w in running if w.ready()), running[0])

    def signal(self, worker: WorkerProcess, sig: int) -> None:
        worker.process.send_signal(sig)
        worker.state = "sigkill" if sig == signal.SIGKILL else "sigterm"
        if sig == signal.SIGKILL:
            worker.process.wait(10)
            worker.ended_at = time.time()

    def reap(self) -> None:
        for worker in self.workers:
            if worker.ended_at is None and worker.process.poll() is not None:
                worker.ended_at = time.time()

    def unexpected_exits(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.state == "running" and w.process.poll() is not None]

    def stop_all(self, timeout: float = 30.0) -> None:
        """SIGTERM to all at once (warm shutdown), then SIGKILL whatever still runs."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            if worker.state == "running":
                worker.state = "stopped"
            worker.ended_at = worker.ended_at or time.time()
