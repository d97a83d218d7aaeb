"""Hookline side by side with a Celery no-op task and the naive webhook task, in one run.

    python -m bench.compare [--events N] [--quick]          (or: make bench-compare)

Contenders, each on its own private Redis server (broker, and Hookline's state), with the
same pool and concurrency, Hookline's (``-P threads -c 64``): (a) ``naive.noop``,
a task that does nothing; (b) ``naive.webhook`` (bench/naive.py), ``requests.post(url,
json=payload, timeout=10)`` + ``raise_for_status()`` with ``autoretry_for=(RequestException,)``
and ``retry_backoff=True``, on Celery's defaults otherwise; (c) Hookline's
``hookline.deliver`` on ``celery -A app worker`` with every gate and signing. Also the naive
task on Celery's default pool, prefork with one process per core (``naive_default``), beside
Hookline's default deployment, ``hookline worker`` (one threads-64 worker process per core,
``hookline_default``). The
receiver is bench/compare_receiver.py (asyncio, keep-alive, 204; no nginx here) in its own
process. Events are pushed onto the queue at once as ready-made broker messages (built
before the clock starts, so the publisher never bounds a contender).

1. Throughput: N events to a receiver answering at once; events/s from the push to the last
   arrival (the no-op: until its queue is drained).
2. Slow receiver: the same to a receiver answering after 100 ms (``naive_default``: fewer
   events, it manages ~18/s); worker RSS, the maximum sampled every 0.2 s.
3. Redis round trips per delivery and 6. retry backlog memory: from bench/results/gates.json
   and schedule.json (``make bench`` runs them first).
4. Outage isolation (naive and Hookline): N/2 events to a healthy endpoint alone, then N/2
   healthy interleaved with N/2 to an endpoint whose port accepts and resets every connection;
   the healthy endpoint's events/s vs alone, and the attempts the dead one gets.
5. Rate limit: 3 Hookline workers, an endpoint limited to 50/s (burst 5), 2,000 events at
   once: 1-s windows over 55 requests, and drain time over the ideal 40 s.
7. Enqueue cost: ``hookline.send_webhook`` vs ``deliver.delay()``, 2,000 calls each, no worker.
8. Retries (bench/compare_retries.py): one Hookline worker, first deliveries/s to a receiver
   answering 200 at once beside retries parked/s with every attempt answered 500 (next attempt
   due in about an hour, so each event is attempted once and parked; parks counted in the
   schedule's due set); the ratio, target >= 0.6.

Prints a markdown table, writes ``bench/results/compare.json`` and two PNG plots there.
HOOKLINE_* and CELERY_* variables of the calling shell are ignored. Everything it starts is
stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import control_redis, machine, run_bench
from bench.compare_meters import LoadMonitor
from bench.compare_parts import (
    CONTENDERS,
    batch,
    enqueue_cost,
    outage,
    rate_limit,
    start,
    throughput,
)
from bench.compare_plots import RESULTS, plot_rate, plot_storm
from bench.compare_plots import check as check_plots
from bench.compare_procs import ReceiverProcess
from bench.compare_report import METHOD, findings, report, stored_results
from bench.compare_retries import retries
from bench.schedule_tools import hold_signals

OUTPUT = RESULTS / "compare.json"


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-compare-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        # Part 7 enqueues through the benchmark's own app (and the naive task's) into this one.
        control, client = control_redis(stack, workdir)
        os.environ["BENCH_NAIVE_BROKER_URL"] = control.url
        from hookline.worker.celery import worker_app as celery_app

        stack.callback(celery_app.close)
        info = machine(client)
        monitor = LoadMonitor()
        stack.callback(monitor.stop)
        receiver = ReceiverProcess(["naive", "hookline"], workdir / "receiver.log")
        stack.callback(receiver.stop)
        contenders = {}
        for name in CONTENDERS:
            contenders[name] = start(name, workdir)
            stack.callback(contenders[name].stop)
        stack.callback(hold_signals)
        for contender in contenders.values():
            contender.wait_consuming()
            # 200 events per worker process, so that each has opened its connections.
            processes = sum(worker.processes for worker in contender.workers)
            batch(contender, receiver, f"{contender.name}-warm",
                  min(200 * processes, options.events))
        print(f"parts 1-2: throughput, {options.events:,} events, {options.rounds} round(s) "
              "at 0 ms", flush=True)
        speed = throughput(contenders, receiver, options.events, options.slow_default_events,
                           options.rounds)
        for name in ("noop", "naive_default", "hookline_default"):
            contenders.pop(name).stop()
        outages = {}
        for name, contender in contenders.items():
            print(f"part 4: outage, {name}", flush=True)
            outages[name] = outage(contender, receiver, options.events, options.window)
            # Beside a healthy neighbour instead, each endpoint would get half of part 1's rate.
            outages[name]["shared_ratio"] = round(
                outages[name]["healthy_per_second"] / (speed["fast"][name]["per_second"] / 2), 3)
            print(f"  healthy {outages[name]['ratio']:.2f} of solo; the dead endpoint got "
                  f"{outages[name]['failing_attempts_window']} attempts", flush=True)
        for contender in contenders.values():
            contender.stop()
        contenders.clear()
        print(f"part 5: rate limit, {options.rate_events:,} events, 3 workers", flush=True)
        rate = rate_limit(workdir, receiver, options.rate_events)
        print(f"part 8: retries, {options.retry_events:,} events, {options.rounds} round(s), "
              "one worker", flush=True)
        retry = retries(workdir, receiver, options.retry_events, options.rounds)
        print(f"part 7: enqueue cost, {options.enqueue_calls:,} calls each", flush=True)
        enqueue = enqueue_cost(options.enqueue_calls)
        info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        info.update(monitor.stop())
        return {"machine": info, "options": vars(options) | {"output": str(options.output)},
                "contenders": {n: {"app": a, "task": t, "pool": p, "concurrency": c}
                               for n, (a, t, _, p, c) in CONTENDERS.items()},
                **speed, "outage": outages, "rate_limit": rate, "enqueue": enqueue,
                "retries": retry,
                **stored_results(), "method": METHOD}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, help="events per throughput batch (5000)")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 events, 500 rate-limited, a 20 s outage window, "
                        "1,000 retries, one round")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--no-plots", action="store_true")
    options = parser.parse_args(argv)
    quick = options.quick
    options.events = options.events or (1000 if quick else 5000)
    options.rate_events = 500 if quick else 2000
    options.retry_events = 1000 if quick else 3000
    options.window = 20.0 if quick else 40.0
    options.slow_default_events = 100 if quick else 300
    options.enqueue_calls = 2000
    options.rounds = 1 if quick else 2
    if options.events < 10:
        parser.error("--events must be at least 10")
    if not options.no_plots and (problem := check_plots()):
        parser.error(problem)
    return run_bench(run, options, report, finish=lambda result: finish(result, options))


def finish(result: dict[str, Any], options: argparse.Namespace) -> None:
    """The verdicts on the targets, and the plots."""
    result["anomalies"], result["targets"] = findings(result)
    title = (f"{result['machine']['date'][:10]}, {result['machine']['cpus']} CPUs, "
             f"load {result['machine']['load_average'][0]}")
    if not options.no_plots:
        result["plots"] = [plot_rate(result["rate_limit"], title).name,
                           plot_storm(result["outage"], title).name]

if __name__ == "__main__":
    sys.exit(main())
