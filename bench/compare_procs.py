"""What ``bench.compare`` starts and talks to: the receiver process, workers of any pool, and
one contender (private Redis + worker) with its batches.

Like bench/common.py, nothing here imports ``app`` at module level: the caller sets the
environment first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import requests

from bench.common import ROOT, RedisServer, Worker, stop_process
from hookline.transport.records import UNACKED_RECORDS_KEY

EVENT_TYPE = "order.paid"


def payload(n: int) -> dict[str, Any]:
    """A small, realistic event body (~150 bytes of JSON)."""
    return {"id": f"evt_{n:07d}", "object": "order", "amount": 1999 + n % 100,
            "currency": "eur", "customer": "cus_4QFJOjw2pOmAGJ", "livemode": False}


class ReceiverProcess:
    """``python -m bench.compare_receiver`` (or ``module``, which answers the same control
    paths) in its own session, so its event loop does not share the benchmark's GIL; talked
    to over its control paths."""

    def __init__(self, refuse: list[str], log_path: Path, *,
                 module: str = "bench.compare_receiver") -> None:
        command = [sys.executable, "-m", module]
        for name in refuse:
            command += ["--refuse", name]
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                                        stderr=self._log, start_new_session=True)
        assert self.process.stdout is not None
        ready = json.loads(self.process.stdout.readline() or "{}")
        if "port" not in ready:
            raise RuntimeError(f"the receiver did not start: {log_path.read_text()}")
        self.port: int = ready["port"]
        self.refuse_ports: dict[str, int] = ready["refuse"]
        self.session = requests.Session()

    def url(self, name: str, delay_ms: int = 0) -> str:
        return f"http://127.0.0.1:{self.port}/d{delay_ms}/{name}"

    def status_url(self, name: str, status: int) -> str:
        """Answers ``status`` at once, empty; counted under ``name``."""
        return f"http://127.0.0.1:{self.port}/s{status}/{name}"

    def refuse_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.refuse_ports[name]}/hook"

    def _get(self, path: str, timeout: float = 10.0) -> Any:
        response = self.session.get(f"http://127.0.0.1:{self.port}{path}", timeout=timeout)
        response.raise_for_status()
        return response.json()

    def stats(self, name: str) -> dict[str, Any]:
        return dict(self._get(f"/_stats/{name}"))

    def times(self, name: str) -> list[float]:
        return list(self._get(f"/_times/{name}", timeout=30))

    def wait(self, name: str, count: int, timeout: float,
             workers: Sequence[Worker]) -> dict[str, Any]:
        """Until ``name`` saw ``count`` requests; raises if a worker dies or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            stats = dict(self._get(f"/_wait/{name}?count={count}&timeout=1", timeout=15))
            if stats["hits"] >= count:
                return stats
            for worker in workers:
                worker.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"receiver {name}: {stats['hits']} of {count} requests "
                                   f"in {timeout:.0f}s")

    def stop(self) -> None:
        self.session.close()
        stop_process(self.process, timeout=10.0)
        self._log.close()


#: The "pool" of a contender run as Hookline's default deployment: ``hookline worker``, one
#: Celery worker process (threads pool) per usable core.
HOOKLINE_WORKER = "hookline-worker"


class PoolWorker(Worker):
    """bench.common.Worker with a choice of pool (``threads`` or ``prefork``), or
    ``hookline worker`` (:data:`HOOKLINE_WORKER`: ``processes`` Celery workers)."""

    def __init__(self, env: dict[str, str], log_path: Path, *, app: str, pool: str,
                 concurrency: int | None, name: str) -> None:
        self.processes = 1
        if pool == HOOKLINE_WORKER:
            from hookline.cli.worker import usable_cores

            self.processes = usable_cores()
            # concurrency None: Hookline's own default (hookline/celeryconfig.py)
            slots = [] if concurrency is None else ["-c", str(concurrency)]
            command = [str(Path(sys.executable).with_name("hookline")), "worker", "--app", app,
                       *slots, "-l", "warning", "--without-gossip",
                       "--without-mingle", "--without-heartbeat"]
        else:
            command = [sys.executable, "-m", "celery", "-A", app, "worker", "-P", pool,
                       "-c", str(concurrency), "-l", "warning",
                       "-n", f"{name}-{os.getpid()}@%h",
                       "--without-gossip", "--without-mingle", "--without-heartbeat"]
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the process group: its Redis is thrown away, nothing to hand back."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class Contender:
    """One contender: its own Redis (broker, and Hookline's state), its worker(s)."""

    name: str
    server: RedisServer
    client: redis.Redis
    task: str
    queue: str
    workers: list[PoolWorker] = field(default_factory=list)

    @property
    def hookline(self) -> bool:
        return self.task == "hookline.deliver"

    def messages(self, target: str, prefix: str, count: int, start: int = 0) -> list[str]:
        """Broker messages ready to push: ``target`` is an endpoint id (Hookline) or a URL."""
        from hookline.transport.envelope import build_message
        from hookline.worker.celery import worker_app as celery_app

        built = []
        for n in range(start, start + count):
            event_id = f"{prefix}-{n:06d}"
            args: list[Any] = ([target, EVENT_TYPE, payload(n)] if self.hookline
                               else [target, {"type": EVENT_TYPE, "data": payload(n)}])
            kwargs = {"event_id": event_id} if self.hookline else {}
            built.append(build_message(celery_app, task_name=self.task, task_id=event_id,
                                       args=args, kwargs=kwargs, retries=0, queue=self.queue))
        return built

    def push(self, messages: list[str]) -> float:
        """LPUSH the messages in pipelines of 1,000 (kombu's publish); Unix time of the first."""
        from hookline.store.connection import ring

        started = time.time()
        for at in range(0, len(messages), 1000):
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(self.queue, *messages[at:at + 1000])
            if self.hookline:  # as Hookline's transport publishes: wake idle consumers
                ring(pipe, self.queue, len(messages[at:at + 1000]))
            pipe.execute()
        return started

    def wait_consuming(self, timeout: float = 90.0) -> None:
        """Until every worker's consumer blocks on BRPOP (Hookline's transport: BLMPOP on its
        doorbell, BLPOP before Redis 7; and each worker's releaser BLPOP on the schedule's
        wake list)."""
        deadline = time.monotonic() + timeout
        commands, per_worker = (("blmpop", "blpop"), 2) if self.hookline else (("brpop",), 1)
        while sum(c.get("cmd") in commands for c in self.client.client_list()) < \
                per_worker * sum(worker.processes for worker in self.workers):
            for worker in self.workers:
                worker.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: workers not consuming after {timeout:.0f}s")
            time.sleep(0.1)

    def wait_drained(self, timeout: float) -> float:
        """Until the queue and the unacknowledged set are empty twice in a row (a no-op has
        nothing else to show); Unix time of the first empty look."""
        deadline = time.monotonic() + timeout
        empty_since = None
        while True:
            pipe = self.client.pipeline(transaction=False)
            pipe.llen(self.queue)
            pipe.hlen("unacked")  # the naive task's (kombu's layout)
            pipe.zcard(UNACKED_RECORDS_KEY)  # Hookline's
            if sum(pipe.execute()) == 0:
                if empty_since is not None:
                    return empty_since
                empty_since = time.time()
            else:
                empty_since = None
            for worker in self.workers:
                worker.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: queue not drained after {timeout:.0f}s")
            time.sleep(0.01)

    def stop(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.client.close()
        self.server.stop()
