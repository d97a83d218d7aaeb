"""``hookline worker``: Celery workers on every core of the machine (or container), by default.

A Celery worker with the threads pool (Hookline's default: 512 slots, since a delivery mostly
waits on the network) runs its Python on one core at a time. This command starts one such
worker process per usable core (the CPU affinity, capped by a container's cgroup CPU quota),
each a Celery node of its own (``hookline<n>@<host>``, n from 1), and supervises them:

- SIGTERM, SIGINT and SIGQUIT are passed on to every worker (Celery's warm, warm and cold
  shutdown), and the command exits when they all have, with the worst exit code;
- a worker that exits on its own stops the others (SIGTERM) and the command exits with its
  code, so that the container or service manager restarts the whole set;
- the workers' counters and histograms are served once, on ``HOOKLINE_METRICS_PORT``, by this
  process: the workers write them to a shared ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary
  directory unless one is set) and serve none themselves;
- each worker has its own dead-letter spool file (``HOOKLINE_DLQ_SPOOL`` with ``-<n>`` before
  its suffix), used only while Redis is unreachable;
- each worker's glibc malloc is told :data:`MALLOC_DEFAULTS` where the environment does not
  set those variables itself (docs/operations/workers.md, Memory).

With one process (``--processes 1``, ``HOOKLINE_WORKER_PROCESSES=1``, or a single usable
core) the command becomes that one Celery worker (``exec``), exactly as
``celery -A hookline.worker worker`` would run: the way to scale by containers alone, one
process per container. Arguments after the options go to ``celery worker`` unchanged.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import click

from hookline.core.config import settings
from hookline.core.variables import celery_worker_settings

#: Set in each supervised worker's environment: the supervisor owns the metrics directory
#: (cleared once, before any worker starts) and the metrics port.
SUPERVISED_ENV = "HOOKLINE_WORKER_SUPERVISED"
PROCESSES_ENV = "HOOKLINE_WORKER_PROCESSES"
#: Signals passed on to the workers.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
#: glibc's malloc for a worker's threads, where the environment names neither variable: two
#: arenas, no per-thread caches and a fixed mmap threshold. The soak's workers kept their RSS
#: and malloc's bytes in use flat so, where the defaults grew by 5-12% an hour.
MALLOC_DEFAULTS = {
    "MALLOC_ARENA_MAX": "2",
    "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.mmap_threshold=65536",
}


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with :data:`MALLOC_DEFAULTS` under it: a variable ``env`` sets (even empty)
    wins, so an operator's own choice, or none (``GLIBC_TUNABLES=``), is kept."""
    return {**MALLOC_DEFAULTS, **env}


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in cores (``cpu.max``, cgroup v2, or
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, v1), None when there is none."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max" and float(period) > 0:
            return float(quota) / float(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = float((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = float((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cores(root: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may run on: its CPU affinity, capped by the cgroup quota (a
    container given 1.5 CPUs gets 2 workers), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def parse_processes(value: str) -> int | None:
    """``auto`` (None: one per usable core) or a whole number from 1 to 256."""
    text = value.strip().lower()
    if text in ("", "auto"):
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if not 1 <= number <= 256:
        raise click.BadParameter(f"{value!r}: give 'auto' or a whole number from 1 to 256",
                                 param_hint=f"--processes / {PROCESSES_ENV}")
    return number


def processes_to_run(option: str | None = None) -> int:
    """How many workers ``hookline worker`` starts: ``option``, else HOOKLINE_WORKER_PROCESSES,
    else one per usable core."""
    chosen = parse_processes(option if option is not None
                             else os.environ.get(PROCESSES_ENV, "auto"))
    return chosen if chosen is not None else usable_cores()


def celery_command(app: str, args: Sequence[str], number: int) -> list[str]:
    """The ``celery worker`` command line of worker ``number``: the node is
    ``hookline<number>@%h`` unless ``args`` name it."""
    command = [sys.executable, "-m", "celery", "-A", app, "worker", *args]
    if not _names_itself(args):
        command += ["-n", f"hookline{number}@%h"]
    return command


def spool_path(path: str, number: int) -> str:
    """Worker ``number``'s own dead-letter spool file (``dlq-spool.jsonl`` ->
    ``dlq-spool-2.jsonl``): workers must not share one; the same number gets the same file
    after a restart, and drains it."""
    spool = Path(path)
    return str(spool.with_name(f"{spool.stem}-{number}{spool.suffix}"))


def _names_itself(args: Sequence[str]) -> bool:
    return any(arg in ("-n", "--hostname") or arg.startswith("--hostname=")
               or (arg.startswith("-n") and len(arg) > 2) for arg in args)


@click.command("worker", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False})
@click.option("--processes", "processes_option", metavar="N|auto",
              help=f"Worker processes to run (default {PROCESSES_ENV}, else auto: one per "
                   "usable core).")
@click.option("--app", "-A", "app", default="hookline.worker", show_default=True,
              help="The Celery app module (``app`` in a checkout).")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker_command(processes_option: str | None, app: str, celery_args: tuple[str, ...]) -> None:
    """Run Celery workers, one per usable core by default; other arguments go to
    ``celery worker`` (e.g. ``-l info``, ``-Q hookline``)."""
    processes = processes_to_run(processes_option)
    # The settings each worker will read, checked here: one line from this command, not one
    # from each worker it would start (the errors are ConfigError: HooklineGroup's one line).
    settings()
    celery_worker_settings(os.environ)
    if processes == 1:
        command = celery_command(app, celery_args, 1)
        # that one worker, as if started directly
        os.execve(command[0], command, worker_environment(os.environ))
    if _names_itself(celery_args):
        raise click.UsageError("with more than one process each worker names itself "
                               "(hookline<n>@<host>): leave out -n/--hostname, or give "
                               "--processes 1")
    sys.exit(supervise(app, celery_args, processes))


def supervise(app: str, celery_args: Sequence[str], processes: int) -> int:
    """Start ``processes`` workers and wait for them (see the module's docstring)."""
    port = settings().metrics_port
    owned_dir: str | None = None
    env = {**worker_environment(os.environ), SUPERVISED_ENV: "1", "HOOKLINE_METRICS_PORT": "0"}
    if port:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            directory = owned_dir = tempfile.mkdtemp(prefix="hookline-metrics-")
        env["PROMETHEUS_MULTIPROC_DIR"] = directory
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory  # this process serves them
        from hookline.transport.gauges import clear_multiprocess_dir

        clear_multiprocess_dir()
    children: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    server = None
    try:
        spool = settings().dlq_spool_path
        for number in range(1, processes + 1):
            children.append(subprocess.Popen(
                celery_command(app, celery_args, number),
                env={**env, "HOOKLINE_DLQ_SPOOL": spool_path(spool, number)}))
        click.echo(f"hookline worker: {processes} Celery workers (pids "
                   f"{', '.join(str(c.pid) for c in children)})", err=True)
        if port:
            server = _serve_metrics(port)
        return _wait(children, stopping)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        if server is not None:
            server.shutdown()
            server.server_close()
        if owned_dir:
            shutil.rmtree(owned_dir, ignore_errors=True)


def _serve_metrics(port: int) -> Any:
    from hookline.transport.gauges import start_server

    address = settings().metrics_address
    try:
        return start_server(port, engine=True, gauges=False, addr=address)
    except OSError as exc:
        click.echo(f"hookline worker: cannot serve metrics on {address} port {port}: "
                   f"{exc.strerror or exc}", err=True)
        return None


def _wait(children: list[subprocess.Popen[bytes]], stopping: list[int]) -> int:
    """Until every worker has exited; the first to exit unasked stops the others."""
    worst = 0
    while True:
        running = [child for child in children if child.poll() is None]
        for child in children:
            code = child.returncode
            if code is None:
                continue
            worst = max(worst, abs(code))
            if not stopping and (code != 0 or running):
                click.echo(f"hookline worker: worker pid {child.pid} exited with {code}; "
                           "stopping the others", err=True)
                stopping.append(signal.SIGTERM)
                for other in running:
                    other.send_signal(signal.SIGTERM)
        if not running:
            return worst
        time.sleep(0.2)
