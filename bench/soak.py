"""Soak: an hour of steady load with a fault every five minutes, and nothing stuck at the end.

    python -m bench.soak [--minutes 60] [--rate 100] [--quick]      (or: make soak)

One run starts a private ``redis-server`` (AOF on, fsync every second), two receivers in
processes of their own (``bench.soak_receiver``; the second one is the one taken down), and
two ``celery -A app worker -P threads -c 32`` subprocesses. It offers ``--rate`` events a
second (100) spread evenly over 50 endpoints: fast, slow (1-2 s), flaky (503 to a fifth of
the first attempts), failing for good (500, and 400), ordered (ten ordering keys each), capped
(``max_in_flight`` 2), and fast ones behind the receiver that goes down. Every
``--fault-every`` seconds (300) one fault, in rotation: a Redis restart from its AOF, Redis
paused (SIGSTOP) for 20 s, ``kill -9`` of a worker (a replacement starts, as a container's
restart policy would), a worker paused for 30 s past its liveness window, the second receiver
down for 60 s. With ``--sentinel`` (what CI's quick run uses) its Redis is a master and two
replicas, each with an AOF, behind three Sentinels (``bench/soak_servers.py``): the Redis faults
hit the master of the moment, and a ``SENTINEL FAILOVER`` joins the rotation.

While it runs it checks each event once it is four minutes old (every retry of the soak's
policy is over by then): delivered (accepted by its receiver, or marked done) or dead-lettered
with a reason. After the load it drains for up to ``--drain`` seconds (120), then reports
(bench/soak_report.py): events not settled, duplicates and whether each came under its own
webhook-id, how soon after each fault the healthy endpoints' deliveries were back to 90% of
their offered rate, and the slopes of worker RSS and Redis memory after the warm-up, with
what each worker's RSS is made of (``bench.heapwatch``: Python's blocks, malloc's bytes in use,
the objects by type), so a growth reads as a leak or as a high-water mark. Writes
``bench/results/soak.json``; exit status 0 only if all hold. ``--even-env NAME=VALUE`` sets a
variable in the even-numbered workers only (chaos2, chaos4, ...; a replacement keeps its
victim's parity), to compare two settings in one run, e.g. ``MALLOC_ARENA_MAX=2``.
``--quick`` (CI): three minutes, each fault once and shorter. Everything it starts is stopped on
the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import redis

from bench import heapwatch
from bench import soak_report as report
from bench.chaos_procs import AofRedis, WorkerFleet, clean_env
from bench.common import run_bench
from bench.soak_parts import (
    FAULT_KINDS,
    Fleet,
    Plan,
    Receivers,
    SoakRedis,
    endpoint_plan,
    where_held,
)
from bench.soak_servers import SentinelRedis
from hookline.cli.worker import worker_environment
from hookline.core.config import configure

#: How the workers are set for the soak: short timeouts and retries, so that every event is
#: final within minutes; records and dead letters kept long enough to be checked, short
#: enough that memory reaches a steady state within the warm-up.
WORKER_SETTINGS = {
    "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
    "CELERY_VISIBILITY_TIMEOUT": "60",
    "HOOKLINE_READ_TIMEOUT": "3",
    "HOOKLINE_CONNECT_TIMEOUT": "1",
    "HOOKLINE_INITIAL_BACKOFF": "1",
    "HOOKLINE_MAX_BACKOFF": "10",
    "HOOKLINE_MAX_ATTEMPTS": "12",
    "HOOKLINE_MAX_AGE": "180",
    "HOOKLINE_BREAKER_COOLDOWN": "2",
    "HOOKLINE_BREAKER_MAX_COOLDOWN": "5",
    "HOOKLINE_REPLAY_HORIZON": "600",
    "HOOKLINE_DLQ_RETENTION": "900",
    "HOOKLINE_EVENT_LOG_RETENTION": "900",
    "HOOKLINE_METRICS_PORT": "0",
}
#: An event is checked once it is this old (its retries are over: max age 180 s) ...
CHECK_AGE = 240.0
#: ... and counted stuck if it is still not final at this age (its records live 780 s).
STUCK_AGE = 600.0
#: Seconds between two memory samples.
SAMPLE_EVERY = 10.0


@dataclass(frozen=True)
class Options:
    minutes: float
    rate: float
    fault_every: float
    first_fault: float
    drain: float
    warmup: float
    quick: bool
    workdir: Path
    #: Where the result goes (``bench.common.run_bench`` writes it).
    output: Path
    #: Environment of the even-numbered workers only (``--even-env``).
    even_env: dict[str, str]
    #: Environment of the odd-numbered workers only (``--odd-env``).
    odd_env: dict[str, str]
    #: Redis behind Sentinel, and a failover in the rotation (``--sentinel``).
    sentinel: bool = False
    #: Only these kinds of fault, in the rotation's order (``--faults``; all when empty).
    faults: tuple[str, ...] = ()


def parse_options(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=100.0, help="events per second (100)")
    parser.add_argument("--fault-every", type=float, default=300.0, help="seconds (300)")
    parser.add_argument("--drain", type=float, default=120.0, help="seconds (120)")
    parser.add_argument("--quick", action="store_true",
                        help="CI: 3 minutes, each fault once, shorter faults")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--even-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the even-numbered workers only, to compare in one run "
                             "(e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--odd-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the odd-numbered workers only (e.g. HEAPWATCH_TRACEMALLOC=8 "
                             "to find what a worker's heap grows by)")
    parser.add_argument("--sentinel", action="store_true",
                        help="Redis behind Sentinel (a master, two replicas, three Sentinels), "
                             "and a Sentinel failover in the rotation")
    parser.add_argument("--faults", default="", metavar="KIND,...",
                        help="only these faults, e.g. redis_restart,redis_pause (of "
                             f"{', '.join(FAULT_KINDS)})")
    args = parser.parse_args(argv)
    faults = tuple(kind for kind in args.faults.split(",") if kind)
    if set(faults) - set(FAULT_KINDS):
        parser.error(f"--faults: unknown {', '.join(sorted(set(faults) - set(FAULT_KINDS)))}")
    quick = args.quick
    minutes = 3.0 if quick else args.minutes
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hookline-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    name = "soak-quick.json" if quick else "soak.json"
    return Options(minutes=minutes, rate=args.rate,
                   fault_every=25.0 if quick else args.fault_every,
                   first_fault=20.0 if quick else args.fault_every, drain=args.drain,
                   warmup=60.0 if quick else min(900.0, minutes * 60 / 3), quick=quick,
                   workdir=workdir,
                   output=args.results or Path(__file__).parent / "results" / name,
                   even_env=dict(item.split("=", 1) for item in args.even_env),
                   odd_env=dict(item.split("=", 1) for item in args.odd_env),
                   sentinel=args.sentinel, faults=faults)


class Soak:
    """One run: the processes, the load, the faults, the checks and the report."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.redis: SoakRedis = (SentinelRedis(options.workdir) if options.sentinel
                                 else AofRedis(options.workdir))
        self.receivers: Receivers | None = None
        self.fleet: Fleet | None = None
        self.samples = report.Samples()
        self.events: dict[str, str] = {}
        self.enqueued_at: dict[str, float] = {}
        self.unchecked: list[str] = []
        self.settled: dict[str, str] = {}
        self.stuck: list[str] = []

    def run(self) -> dict[str, Any]:
        options = self.options
        self.redis.start()
        spool = options.workdir / "dlq-spool.jsonl"
        env = clean_env({**WORKER_SETTINGS, **self.redis.env(),
                         "PYTHONUNBUFFERED": "1", "HOOKLINE_DLQ_SPOOL": str(spool),
                         "HEAPWATCH_EVERY": "10" if options.quick else "30"})
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        os.environ.update(env)  # ``app`` reads its settings once per process
        # and this process's settings were read at import, without the Sentinel URL: its own
        # publishing (the driver's enqueue) then waited for no replica, and a failover lost
        # what it pushed to the demoted master (384-1,309 events in the runs of 2026-12-04)
        configure()
        self.receivers = Receivers(options.workdir)
        client = self.redis.client()
        plan = endpoint_plan(client, self.receivers)
        # The workers get what ``hookline worker`` gives its own (glibc's malloc settings,
        # where the environment does not set them), then their half's --even/--odd-env.
        self.fleet = Fleet(WorkerFleet(worker_environment(env), options.workdir,
                                       concurrency=32, watch_heap=True,
                                       even_env=options.even_env, odd_env=options.odd_env))
        self.fleet.start(2)
        started = time.time()
        print(f"soak: {options.minutes:.0f} min at {options.rate:.0f}/s, workdir "
              f"{options.workdir}", flush=True)
        faults = self.load(plan, started)
        print(f"soak: load over at +{time.time() - started:.0f}s; draining (up to "
              f"{options.drain:.0f}s)", flush=True)
        self.drain(started)
        ended = time.time()
        self.fleet.stop_all()
        return self.summary(plan, faults, started, ended)

    # -- the load and the faults ------------------------------------------------------------

    def load(self, plan: Plan, started: float) -> list[report.Fault]:
        options = self.options
        assert self.fleet is not None and self.receivers is not None
        client = self.redis.quick_client()
        schedule = self.fleet.schedule(self.redis, self.receivers, started, options)
        end = started + options.minutes * 60
        next_sample = check_at = started
        backlog: list[str] = []
        offered = 0
        while time.time() < end or schedule.pending():
            now = time.time()
            schedule.run_due(now)
            target = int((min(now, end) - started) * options.rate)
            while offered < target:
                event_id = f"soak-{offered:07d}"
                self.events[event_id] = plan.endpoint_for(offered)
                backlog.append(event_id)
                offered += 1
            backlog = self.push(client, plan, backlog)
            if now >= next_sample:
                next_sample = now + SAMPLE_EVERY
                self.sample(client, now)
            if now >= check_at:
                check_at = now + 10.0
                self.check(client, now, final=False)
            self.fleet.replace_exited()
            time.sleep(0.05)
        while backlog:
            backlog = self.push(client, plan, backlog)
            time.sleep(0.2)
        return schedule.faults

    def push(self, client: redis.Redis, plan: Plan, backlog: list[str]) -> list[str]:
        """Enqueue ``backlog`` (Redis away: keep it for the next try, as an outbox would)."""
        if not backlog:
            return backlog
        try:
            plan.enqueue(client, [(e, self.events[e]) for e in backlog[:500]])
        except redis.RedisError:
            return backlog
        now = time.time()
        for event_id in backlog[:500]:
            self.enqueued_at[event_id] = now
            self.unchecked.append(event_id)
        return backlog[500:]

    def sample(self, client: redis.Redis, now: float) -> None:
        assert self.fleet is not None
        for name, pid in self.fleet.running_pids().items():
            with contextlib.suppress(psutil.Error):
                self.samples.add(name, now, psutil.Process(pid).memory_info().rss)
        with contextlib.suppress(redis.RedisError):
            self.samples.add("redis", now, float(client.info("memory")["used_memory"]))

    # -- settling -----------------------------------------------------------------------------

    def check(self, client: redis.Redis, now: float, *, final: bool) -> None:
        """Look at the events old enough (all of them when ``final``): settled ones are noted,
        the others looked at again later; past ``STUCK_AGE`` they are stuck."""
        assert self.receivers is not None
        ready = [e for e in self.unchecked
                 if final or now - self.enqueued_at[e] >= CHECK_AGE]
        if not ready:
            return
        try:
            outcomes = self.receivers.outcomes(client, [(e, self.events[e]) for e in ready])
        except redis.RedisError:
            return
        waiting = set(ready) - set(outcomes)
        self.settled.update(outcomes)
        late = [e for e in waiting if now - self.enqueued_at[e] >= STUCK_AGE]
        self.stuck.extend(late)
        done = set(outcomes) | set(late)
        self.unchecked = [e for e in self.unchecked if e not in done]

    def drain(self, started: float) -> None:
        client = self.redis.quick_client()
        from hookline.store.dead_letter_queue import DeadLetterQueue, restore_spool

        spool = self.options.workdir / "dlq-spool.jsonl"
        if spool.exists():  # dead letters spooled while Redis was away, as an operator would
            restore_spool(DeadLetterQueue(client), str(spool))
        deadline = time.time() + self.options.drain
        while True:
            self.check(client, time.time(), final=True)
            if not self.unchecked or time.time() >= deadline:
                return
            print(f"soak: +{time.time() - started:.0f}s {len(self.unchecked)} not final yet",
                  flush=True)
            time.sleep(5.0)

    # -- the report -----------------------------------------------------------------------------

    def summary(self, plan: Plan, faults: list[report.Fault], started: float,
                ended: float) -> dict[str, Any]:
        assert self.receivers is not None
        options = self.options
        records = self.receivers.records()
        arrivals = report.first_successes(records["main"])
        healthy = sorted(at for e, at in arrivals.items() if self.events.get(e) in plan.healthy)
        offered = options.rate * plan.healthy_share
        for fault in faults:
            fault.recovery = report.recovery(fault.until, healthy, offered, ended)
            fault.lowest = report.lowest_share(fault.at, fault.until, healthy, offered)
        reasons = [r for r in self.settled.values() if r != "delivered"]
        # Delivered means accepted by its receiver or marked done (module docstring): an event
        # a receiver accepted whose done marker was lost (written to a master demoted in a
        # failover, its redelivery then judged a duplicate there) is delivered, and shown apart.
        accepted = report.first_successes(records["main"] + records["down"])
        unmarked = sorted(e for e in self.unchecked + self.stuck if e in accepted)
        left = sorted(e for e in self.unchecked + self.stuck if e not in accepted)
        summary: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "minutes": options.minutes, "rate": options.rate, "endpoints": plan.count,
            "events": len(self.events),
            "delivered": sum(1 for r in self.settled.values() if r == "delivered") + len(unmarked),
            "delivered_without_done_marker": len(unmarked),
            "delivered_without_done_marker_sample": unmarked[:20],
            "dead_lettered": len(reasons),
            "dead_letter_reasons": dict(sorted(Counter(reasons).items())),
            "dead_lettered_without_reason": sum(1 for r in reasons if r == "dead:"),
            "unsettled": len(left),
            "unsettled_sample": left[:20],
            "unsettled_where": self.where((left + unmarked)[:20]),
            "not_enqueued": len(self.events) - len(self.enqueued_at),
            "duplicates": report.duplicates(records["main"] + records["down"],
                                            set(self.events)),
            "faults": report.fault_rows(faults, started),
            "memory": report.slopes(self.samples, options.warmup,
                                    least_span=(options.minutes * 60 - options.warmup) / 2),
            "heap": report.heap_slopes(
                {p.stem.removeprefix("heap-"): heapwatch.read(str(p))
                 for p in sorted(options.workdir.glob("heap-*.jsonl"))},
                options.warmup,
                least_span=(options.minutes * 60 - options.warmup) / 2),
            "workdir": str(options.workdir),
            "even_env": options.even_env,
            "odd_env": options.odd_env,
        }
        summary["checks"] = report.verdict(summary, gate_slopes=not options.quick)
        summary["ok"] = all(summary["checks"].values())
        return summary

    def where(self, sample: list[str]) -> dict[str, list[str]]:
        """Where the unsettled sample is held in Redis (``where_held``), read at the end."""
        if not sample:
            return {}
        try:
            return where_held(self.redis.quick_client(), sample)
        except redis.RedisError as exc:
            return {"error": [repr(exc)]}

    def stop(self) -> None:
        if self.fleet is not None:
            self.fleet.stop_all()
        if self.receivers is not None:
            self.receivers.stop()
        self.redis.stop()


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    summary: dict[str, Any] = {}

    def run(options: Options) -> dict[str, Any]:
        soak = Soak(options)
        try:
            summary.update(soak.run())
        finally:
            soak.stop()
        return summary

    status = run_bench(run, options, report.table)
    return status or (0 if summary["ok"] else 1)


if __name__ == "__main__":
    sys.exit(main())
