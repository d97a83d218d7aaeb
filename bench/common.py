"""What the benchmarks start and stop: private Redis servers, a worker process, a fast
receiver; and a description of the machine they ran on.

Nothing here imports ``app``: the caller sets the environment (REDIS_URL...) first, because
``hookline.core.config.settings()`` is read once per process.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis
import redis.cluster

from tests.support.servers import (
    AMQP_HOST,
    AMQP_PORT,
    LocalCluster,
    free_port,
    rabbitmq_unavailable,
    rabbitmqctl,
    stop_process,
)

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["AMQP_HOST", "AMQP_PORT", "ROOT", "FastReceiver", "LocalCluster", "RedisServer",
           "Worker", "bench_environment", "code_version", "control_redis", "free_port",
           "machine", "private_redis", "rabbitmq_unavailable", "rabbitmqctl", "run_bench",
           "stop_process"]


def machine(control: redis.Redis) -> dict[str, Any]:
    """Where and with what a benchmark ran."""
    import celery
    import kombu

    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("model name")), "")
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpus": len(os.sched_getaffinity(0)), "cpu_model": model,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "celery": celery.__version__,
            "kombu": kombu.__version__, "redis_server": control.info("server")["redis_version"],
            "redis_py": redis.__version__, **code_version()}


def code_version() -> dict[str, Any]:
    """The commit measured, and the files of the code under test that differ from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = git("status", "--porcelain", "--", "hookline", "app", "tasks", "celeryconfig.py")
    return {"commit": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted": [line[3:] for line in changed.splitlines()]}


def private_redis(stack: ExitStack, name: str, workdir: Path) -> tuple[RedisServer, redis.Redis]:
    """A :class:`RedisServer` answering, stopped by ``stack``, and a client on it (str
    replies) that ``stack`` closes."""
    server = RedisServer(name, workdir)
    stack.callback(server.stop)
    server.wait_ready()
    client = redis.Redis(port=server.port, decode_responses=True)
    stack.callback(client.close)
    return server, client


def bench_environment(workdir: Path, **env: str) -> None:
    """The benchmark's environment, which its workers inherit: the calling shell's
    HOOKLINE_*, CELERY_*, BENCH_* and REDIS_URL dropped, then a spool in ``workdir``, the
    loopback allowlist, no metrics port and ``env`` set. Call it before anything imports
    ``app``."""
    for name in list(os.environ):
        if name.startswith(("HOOKLINE_", "CELERY_", "BENCH_")) or name == "REDIS_URL":
            del os.environ[name]
    os.environ.update(HOOKLINE_DLQ_SPOOL=str(workdir / "spool"),
                      HOOKLINE_ALLOWED_NETWORKS="127.0.0.0/8", HOOKLINE_METRICS_PORT="0", **env)


def control_redis(stack: ExitStack, workdir: Path,
                  **env: str) -> tuple[RedisServer, redis.Redis]:
    """The benchmark process's own Redis (its ``app`` builds broker messages and registers
    endpoints there) and environment (:func:`bench_environment`, REDIS_URL naming that Redis).
    Call it before anything imports ``app``."""
    control, client = private_redis(stack, "control", workdir)
    bench_environment(workdir, REDIS_URL=control.url, **env)
    return control, client


class RedisServer:
    """``redis-server`` on a free loopback port: no persistence, no eviction, its own session
    (a Ctrl-C in the terminal reaches only the benchmark, which stops it in order)."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = workdir / f"redis-{name}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--daemonize", "no",
                 "--maxmemory-policy", "noeviction", "--dir", str(workdir)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def wait_ready(self, timeout: float = 10.0) -> RedisServer:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis {self.name} exited:\n{self.log_path.read_text()}")
            try:
                client.ping()
                client.close()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis {self.name} not answering on {self.port}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        stop_process(self.process, timeout=10.0)


class Worker:
    """``celery -A app worker`` (or another ``app`` module) in a subprocess, configured only
    through its environment."""

    def __init__(self, env: dict[str, str], log_path: Path, *, concurrency: int,
                 include: str = "", app: str = "app") -> None:
        command = [sys.executable, "-m", "celery", "-A", app, "worker", "-P", "threads",
                   "-c", str(concurrency), "-l", "warning", "-n", f"bench-{os.getpid()}@%h",
                   "--without-gossip", "--without-mingle", "--without-heartbeat"]
        if include:
            command += ["--include", include]
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the worker exited ({self.process.returncode}):\n{tail}")

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it hangs."""
        stop_process(self.process)


class FastReceiver:
    """A loopback HTTP/1.1 server answering every POST with 204 and counting requests: only
    what the benchmark needs (hits, distinct webhook-ids, signed or not), nothing stored."""

    def __init__(self) -> None:
        self.hits = 0
        self.unsigned = 0
        self._ids: set[str] = set()
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver._record(self.headers.get("webhook-id", ""),
                                 bool(self.headers.get("webhook-signature")))
                self.send_response_only(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.request_queue_size = 128
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _record(self, webhook_id: str, signed: bool) -> None:
        with self._changed:
            self.hits += 1
            self.unsigned += not signed
            self._ids.add(webhook_id)
            self._changed.notify_all()

    def reset(self) -> None:
        with self._changed:
            self.hits = self.unsigned = 0
            self._ids.clear()

    @property
    def distinct(self) -> int:
        with self._changed:
            return len(self._ids)

    def wait_for(self, count: int, timeout: float, worker: Worker) -> None:
        """Block until ``count`` requests arrived; raise if the worker dies or time runs out."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.hits < count:
                worker.check_alive()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"receiver saw {self.hits} of {count} requests "
                                       f"in {timeout:.0f}s")
                self._changed.wait(min(left, 0.2))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def run_bench(run: Callable[[Any], dict[str, Any]], options: Any,
              report: Callable[[dict[str, Any]], str],
              finish: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Run a benchmark, write its result to ``options.output`` and print its report;
    ``finish`` completes the result (verdicts, plots) once its duration is in.

    SIGTERM ends it like Ctrl-C: ``run`` stops everything it started on the way out."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    started = time.monotonic()
    try:
        result = run(options)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130
    result["duration_seconds"] = round(time.monotonic() - started, 1)
    if finish is not None:
        finish(result)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    print(f"\n{result['duration_seconds']}s; written to {options.output}")
    return 0


# -- RabbitMQ and Redis Cluster on loopback (bench.scale's; the tests have their own) -------
