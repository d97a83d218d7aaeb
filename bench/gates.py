"""What Hookline's gates cost: Redis commands per delivery and throughput with and without them.

    python -m bench.gates [--events N] [--rounds R] [--concurrency C]      (or: make bench)

One run starts two private Redis servers (Hookline's state and the Celery broker, apart, so
the state Redis counts only Hookline's own commands), a loopback receiver answering 204, and one
``celery -A app worker -P threads`` with ``--include bench.ungated``; then

1. **Commands per delivery.** N first-attempt deliveries of ``hookline.deliver`` after a
   warm-up, with the state Redis's ``INFO commandstats`` reset before. Redis counts commands
   run inside Lua scripts there too, so a MONITOR reader splits them (bench/monitor.py): lines
   from a client are round trips (EVALSHA named by its script), ``[0 lua]`` lines ran inside
   a script. Their sum is checked against commandstats.
2. **Throughput, gated vs ungated**, R rounds alternating: N events of ``hookline.deliver``
   (admit, send, settle) and N of ``bench.ungated`` (the same signed request through
   ``hookline.delivery.sender.send``, no gates), timed from the first publish until the
   receiver has seen all N requests. MONITOR is off here.

Prints a markdown table and writes ``bench/results/gates.json``. Everything it starts is
stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis._parsers.helpers import parse_info

from bench.common import ROOT, FastReceiver, RedisServer, Worker, machine, run_bench
from bench.monitor import CommandMonitor, script_names, transaction
from bench.report import METHOD, findings, report

ENDPOINT = "bench"
RESULTS = Path(__file__).resolve().parent / "results" / "gates.json"
TASKS = {"gated": "hookline.deliver", "ungated": "bench.ungated"}
#: EVALSHA is labelled with the script it runs (hookline/store/lua/<name>.lua), from its SHA1.
GATE_COMMANDS = ("evalsha admit", "evalsha settle")
#: What redis-py sends when it opens a pooled connection (and PING after 30 s idle): a cost per
#: connection, not per delivery. CLIENT SETINFO and MAINT_NOTIFICATIONS are rejected by Redis
#: before 7.2, so they show only in errorstats.
SETUP_COMMANDS = ("hello", "ping", "client|setinfo", "client|maint_notifications",
                  "client|setname", "select", "auth")
#: What the benchmark's own control connection sends while commandstats counts.
OWN_COMMANDS = ("config|resetstat", "echo", "info", "multi", "exec")


@dataclass
class Bench:
    celery: Any
    receiver: FastReceiver
    worker: Worker
    control: redis.Redis


def run_batch(bench: Bench, mode: str, prefix: str, count: int,
              timeout: float | None = None) -> dict[str, Any]:
    """Publish ``count`` events of ``mode`` and wait until the receiver has seen them all."""
    bench.receiver.reset()
    started = time.perf_counter()
    with bench.celery.producer_or_acquire() as producer:
        for n in range(count):
            bench.celery.send_task(TASKS[mode], args=[ENDPOINT, "bench.event", {"n": n}],
                                   kwargs={"event_id": f"{prefix}-{n}"}, queue="hookline",
                                   producer=producer)
    published = time.perf_counter() - started
    bench.receiver.wait_for(count, timeout or 60 + count / 20, bench.worker)
    seconds = time.perf_counter() - started
    return {"mode": mode, "events": count, "seconds": round(seconds, 3),
            "publish_seconds": round(published, 3), "per_second": round(count / seconds, 1),
            "duplicates": bench.receiver.hits - bench.receiver.distinct,
            "unsigned": bench.receiver.unsigned}


def measure_commands(bench: Bench, state_url: str, events: int) -> dict[str, Any]:
    """Part 1: Redis commands on the state Redis per first-attempt delivery."""
    scripts = script_names(ROOT / "hookline" / "store" / "lua")
    monitor = CommandMonitor(state_url, bench.control, scripts)
    try:
        monitor.wait_quiet(GATE_COMMANDS)  # the warm-up's last settles
        begin, end = monitor.token(), monitor.token()
        transaction(bench.control, ("CONFIG", "RESETSTAT"), ("ECHO", begin))
        started = time.perf_counter()
        batch = run_batch(bench, "gated", "rt", events)
        monitor.wait_quiet(GATE_COMMANDS)  # settles run after the receiver has answered
        seconds = time.perf_counter() - started
        _, stats, errors = transaction(bench.control, ("ECHO", end), ("INFO", "commandstats"),
                                       ("INFO", "errorstats"))
        counts = monitor.counts_at(end) - monitor.counts_at(begin)
        first_args = dict(monitor.first_args)
    finally:
        monitor.stop()
    top, lua = counts.top, counts.lua
    calls = {name.removeprefix("cmdstat_"): int(value["calls"])
             for name, value in parse_info(stats).items()}
    error_stats = parse_info(errors)
    own = {name: calls.pop(name) for name in OWN_COMMANDS if name in calls}
    rejected = sum(int(value["count"]) for value in error_stats.values())
    done = sum(1 for _ in bench.control.scan_iter(f"hookline:{{{ENDPOINT}}}:done:rt-*",
                                                  count=1000))
    names = sorted(set(top) | set(lua), key=lambda n: (-(top[n] + lua[n]), n))
    setup = sum(top[n] for n in SETUP_COMMANDS)
    return {
        "events": events, "batch": batch, "done_markers": done, "seconds": round(seconds, 2),
        "round_trips_gates": sum(top[n] for n in GATE_COMMANDS) / events,
        "round_trips_all": (top.total() + rejected) / events,
        "round_trips_setup": setup, "rejected": rejected,
        "rejected_by_error": {n.removeprefix("errorstat_"): int(v["count"])
                              for n, v in error_stats.items()},
        "round_trips_other": {n: {"calls": top[n], "first_argument": first_args.get(n, "")}
                              for n in top if n not in GATE_COMMANDS + SETUP_COMMANDS},
        "inside_scripts": lua.total() / events,
        "commandstats_total": sum(calls.values()) / events,
        "commands": {n: {"round_trips": top[n], "inside_scripts": lua[n]} for n in names},
        "commandstats": calls,
        "worker_connections": len(counts.sources),
        "excluded_own_commands": own,
    }


def _hold_signals() -> None:
    """While stopping what it started, the benchmark ignores a second Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-bench-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        state = RedisServer("state", workdir)
        stack.callback(state.stop)
        broker = RedisServer("broker", workdir)
        stack.callback(broker.stop)
        state.wait_ready()
        broker.wait_ready()
        env = {"REDIS_URL": state.url, "HOOKLINE_BROKER_URL": broker.url,
               "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8", "HOOKLINE_LOG_FORMAT": "text",
               "HOOKLINE_DLQ_SPOOL": str(workdir / "dlq-spool.jsonl"),
               "CELERY_WORKER_PREFETCH_MULTIPLIER": "1"}
        os.environ.update(env)  # before app is imported: its settings are read once
        from hookline.store.endpoints import EndpointRegistry
        from hookline.worker.celery import worker_app as celery_app

        stack.callback(celery_app.close)
        control = redis.Redis.from_url(state.url, decode_responses=True,
                                       single_connection_client=True)
        stack.callback(control.close)
        info = machine(control)
        receiver = FastReceiver()
        stack.callback(receiver.stop)
        EndpointRegistry(control).add(ENDPOINT, receiver.url)
        worker = Worker(env, workdir / "worker.log", concurrency=options.concurrency,
                        include="bench.ungated")
        stack.callback(worker.stop)
        stack.callback(_hold_signals)
        bench = Bench(celery_app, receiver, worker, control)

        warm = min(200, options.events)
        for mode in TASKS:  # also waits for the worker to start
            run_batch(bench, mode, f"warm-{mode}", warm, timeout=120)
        commands = measure_commands(bench, state.url, options.events)
        rounds = []
        for number in range(options.rounds):
            for mode in TASKS:
                time.sleep(0.5)
                rounds.append(run_batch(bench, mode, f"t{number}-{mode}", options.events))
                print(f"round {number + 1} {mode}: {rounds[-1]['per_second']:.0f}/s",
                      flush=True)
        speed: dict[str, float] = {}
        for mode in TASKS:
            mine = [r for r in rounds if r["mode"] == mode]
            speed[mode] = sum(r["events"] for r in mine) / sum(r["seconds"] for r in mine)
            speed[f"{mode}_best"] = max(r["per_second"] for r in mine)
        speed["ratio"] = speed["gated"] / speed["ungated"]
        speed["ratio_best"] = speed["gated_best"] / speed["ungated_best"]
        return {"machine": info, "concurrency": options.concurrency,
                "commands": commands, "rounds": rounds, "throughput": speed,
                **findings(commands, rounds), "method": METHOD}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="events per measure")
    parser.add_argument("--rounds", type=int, default=2, help="gated/ungated rounds")
    parser.add_argument("--concurrency", type=int, default=16, help="worker threads")
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    if options.events < 1 or options.rounds < 1 or options.concurrency < 1:
        parser.error("--events, --rounds and --concurrency must be at least 1")
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
