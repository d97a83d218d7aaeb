"""What the durable retry schedule costs and how well it keeps time, beside Celery's countdown.

    python -m bench.schedule [--retries N] [--events E]        (or: make bench-schedule)

One run, each part on its own private Redis server, one part after the other:

1. **Memory of N waiting retries.** (a) Hookline: an endpoint whose URL refuses connections
   (http://127.0.0.1:9/) with a retry policy of one hour; ``celery -A app worker -P threads
   -c 32`` (breaker threshold 10**9, so every failure is a retry, not a deferral) gets N first
   deliveries, pushed onto its queue in pipelines, and parks N retries. (b) Celery's countdown:
   ``bench.naive_countdown``'s worker, same pool and broker settings, gets N tasks that each
   ``retry(countdown=1800)`` once, and ends up holding N ETA messages (``unacked`` = N). Each:
   the worker's RSS (children included) idle and once all N wait, and Redis ``used_memory``
   before publishing and after, per retry.
2. **Release speed.** 10,000 retries (one real ~1 KB broker message each) parked due now in a
   Redis with no worker, released by ``RetrySchedule.release_due(batch=500)`` until none is left.
3. **Retry timing under load.** A worker with default settings (breaker threshold 10**9: a
   receiver failing every first attempt would open the breaker), E events to a receiver that
   fails each event's first attempt with 503, retry policy 2 s flat, no jitter; lateness of each
   2nd request against the 1st request's arrival + 2 s.

N defaults to 20,000 (the issue's reference: 349 MB in one worker); ``--retries 100000`` takes
about 15 minutes on 2 CPUs (both sides hold ~200-300 retries a second; the countdown of 1,800 s
leaves room for that).

Prints markdown tables and writes ``bench/results/schedule.json``. HOOKLINE_* and CELERY_*
variables of the calling shell are ignored. Everything it starts is stopped on the way out,
Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import Worker, control_redis, machine, private_redis, run_bench
from bench.schedule_report import METHOD, findings, percentile, report
from bench.schedule_tools import (
    ENDPOINT,
    REFUSED_URL,
    LagSampler,
    hold_signals,
    kill_worker,
    marginal_kb,
    memory,
    publish,
    wait_consuming,
    wait_count,
    worker_env,
)
from hookline.store import delivery
from hookline.transport.records import held_count

RESULTS = Path(__file__).resolve().parent / "results" / "schedule.json"
RELEASE_COUNT = 10_000
RETRY_DELAY = 2.0


def hold_retries(kind: str, count: int, workdir: Path) -> dict[str, Any]:
    """Part 1: N waiting retries, Hookline's schedule (``hookline``) or a countdown (``naive``)."""
    from hookline.store.schedule import SCHEDULE_KEYS, RetrySchedule

    with ExitStack() as stack:
        server, client = private_redis(stack, kind, workdir)
        extra: dict[str, Any] = {}
        if kind == "hookline":
            from hookline.store.endpoints import EndpointRegistry
            from hookline.worker.celery import worker_app as celery_app

            EndpointRegistry(client).add(ENDPOINT, REFUSED_URL, retry_policy={
                "initial_backoff": 3600, "max_backoff": 3600})
            cap = str(max(count, 1_000_000))
            env = {**worker_env(server.url, workdir), "HOOKLINE_SCHEDULE_MAX": cap,
                   "HOOKLINE_SCHEDULE_MAX_PER_ENDPOINT": cap}
            task, queue, module = "hookline.deliver", "hookline", "app"
            schedule = RetrySchedule(client)

            def waiting() -> int:
                if client.zcard("hookline:dlq:by_time"):
                    raise RuntimeError("part 1a: retries dead-lettered instead of parked")
                return schedule.stats().total
        else:
            os.environ["BENCH_NAIVE_BROKER_URL"] = server.url
            from bench import naive_countdown

            celery_app = naive_countdown.app
            env = {"BENCH_NAIVE_BROKER_URL": server.url}
            task, queue = "bench.naive_retry", naive_countdown.QUEUE
            module = "bench.naive_countdown"

            def waiting() -> int:  # held = unacknowledged, and nothing left in the queue
                held, queued = held_count(client), client.llen(queue)
                if time.perf_counter() - started > naive_countdown.COUNTDOWN - 5:
                    raise RuntimeError(
                        f"the countdown side held {held} of {count} retries when the first "
                        f"came due ({naive_countdown.COUNTDOWN} s): lower --retries")
                return held if queued == 0 else min(held, count - 1)
        worker = Worker(env, workdir / f"worker-{kind}.log", concurrency=32, app=module)
        stack.callback(kill_worker, worker)
        stack.push(hold_signals)
        wait_consuming(client, worker)
        time.sleep(1.0)
        idle = memory(worker.process.pid)
        before = int(client.info("memory")["used_memory"])
        started = time.perf_counter()
        publish_seconds = publish(client, celery_app, task, queue, count, kind)
        progress = wait_count(waiting, count, worker, 300 + count / 10,
                              f"1{kind[0]} {kind} waiting")
        seconds = time.perf_counter() - started
        time.sleep(2.0)  # the last acknowledgements; then a steady state
        held = memory(worker.process.pid)
        after = int(client.info("memory")["used_memory"])
        if kind == "hookline":
            extra = {"schedule_bytes_per_retry": round(sum(
                client.memory_usage(key, samples=0) or 0 for key in SCHEDULE_KEYS) / count, 1),
                "dead_letters": client.zcard("hookline:dlq:by_time")}
        extra.update(unacked=held_count(client), queued=client.llen(queue),
                     keys=client.dbsize())
        return {"kind": kind, "retries": count, "idle": idle, "held": held,
                "worker_kb_per_retry": round((held["rss_mb"] - idle["rss_mb"]) * 1024 / count, 2),
                "worker_kb_per_retry_marginal": marginal_kb(progress, count, held["rss_mb"]),
                "redis_used_before": before, "redis_used_after": after,
                "redis_bytes_per_retry": round((after - before) / count, 1),
                "publish_seconds": round(publish_seconds, 1), "seconds": round(seconds, 1),
                **extra, "progress": progress}


def release_speed(workdir: Path, count: int = RELEASE_COUNT) -> dict[str, Any]:
    """Part 2: park ``count`` retries due now, then time release_due(batch=500) to empty."""
    from hookline.store.schedule import RetrySchedule
    from hookline.transport.envelope import build_message
    from hookline.worker.celery import worker_app as celery_app

    with ExitStack() as stack:
        _, client = private_redis(stack, "release", workdir)
        message = build_message(celery_app, task_name="hookline.deliver", task_id="release",
                                args=[ENDPOINT, "bench.retry", {"n": 0}],
                                kwargs={"event_id": "release", "attempts": 1}, retries=1,
                                queue="hookline.retry")
        schedule = RetrySchedule(client, max_total=2 * count, max_per_endpoint=2 * count)
        started = time.perf_counter()
        for n in range(count):
            schedule.park(endpoint_id=ENDPOINT, event_id=f"r-{n:05d}", countdown=0,
                          message=message)
        park_seconds = time.perf_counter() - started
        client.config_resetstat()
        calls: list[float] = []
        released = 0
        started = time.perf_counter()
        while True:
            begun = time.perf_counter()
            done, next_due = schedule.release_due(batch=500, queue_limit=10**9)
            calls.append(time.perf_counter() - begun)
            released += done
            if next_due is None or done == 0:
                break
        seconds = time.perf_counter() - started
        server_usec = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))
        return {"retries": count, "message_bytes": len(message), "batch": 500,
                "park_seconds": round(park_seconds, 2), "seconds": round(seconds, 3),
                "per_second": round(released / seconds), "released": released,
                "queued": client.llen("hookline.retry"), "left": schedule.stats().total,
                "calls": len(calls), "call_ms_max": round(max(calls) * 1000, 1),
                "call_ms_median": round(percentile(calls, 50) * 1000, 1),
                "server_seconds": round(server_usec / 1e6, 3)}


def retry_timing(workdir: Path, events: int) -> dict[str, Any]:
    """Part 3: lateness of 2 s retries while ``events`` first deliveries and their retries run."""
    from examples.receiver import Receiver, Reply, fail_first
    from hookline.store.endpoints import EndpointRegistry
    from hookline.worker.celery import worker_app as celery_app

    with ExitStack() as stack:
        server, client = private_redis(stack, "timing", workdir)
        receiver = Receiver().start()
        stack.callback(receiver.stop)
        url = receiver.route("/flaky", fail_first(1, Reply(503)))
        EndpointRegistry(client).add(ENDPOINT, url, retry_policy={
            "initial_backoff": RETRY_DELAY, "max_backoff": RETRY_DELAY, "jitter": 0})
        worker = Worker(worker_env(server.url, workdir), workdir / "worker-timing.log",
                        concurrency=32)
        stack.callback(worker.stop)
        stack.push(hold_signals)
        wait_consuming(client, worker)
        sampler = LagSampler(server.port)
        stack.callback(sampler.stop)
        started = time.perf_counter()
        publish_seconds = publish(client, celery_app, "hookline.deliver", "hookline", events,
                                  "timing")
        wait_count(lambda: len(receiver.received), 2 * events, worker, 60 + events / 10,
                   "3 timing requests")
        seconds = time.perf_counter() - started
        queues = sampler.stop()
        first: dict[str, float] = {}
        second: dict[str, float] = {}
        for request in list(receiver.received):
            if request.attempt == 1:
                first[request.webhook_id] = request.at
            elif request.attempt == 2 and request.status == 204:
                second[request.webhook_id] = request.at
        late = sorted((second[i] - first[i] - RETRY_DELAY) * 1000 for i in second if i in first)
        time.sleep(1.0)  # the last settles
        delivered = sum(delivery.delivered(
            client, [(ENDPOINT, f"timing-{n:06d}") for n in range(events)]))
        return {"events": events, "delivered": delivered, "retried": len(late),
                "requests": len(receiver.received), "seconds": round(seconds, 1),
                "publish_seconds": round(publish_seconds, 2),
                "dead_letters": client.zcard("hookline:dlq:by_time"), **queues,
                "requests_per_second": round(len(receiver.received) / seconds, 1),
                **{f"late_ms_{name}": round(percentile(late, p), 1) if late else None
                   for name, p in (("min", 0), ("p50", 50), ("p99", 99), ("max", 100))}}


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-bench-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        # The bench process's own app (it builds broker messages) talks to this one only.
        _, client = control_redis(stack, workdir)
        from hookline.worker.celery import worker_app as celery_app

        stack.callback(celery_app.close)
        stack.callback(hold_signals)
        info = machine(client)
        memory_parts = {}
        for kind in ("hookline", "naive"):
            print(f"part 1{kind[0]}: {options.retries} waiting retries, {kind}", flush=True)
            memory_parts[kind] = hold_retries(kind, options.retries, workdir)
            print(f"  {kind}: worker RSS {memory_parts[kind]['held']['rss_mb']} MB", flush=True)
        print(f"part 2: release of {RELEASE_COUNT} due retries", flush=True)
        release = release_speed(workdir)
        print(f"part 3: retry timing, {options.events} events", flush=True)
        timing = retry_timing(workdir, options.events)
        result = {"machine": info, "memory": memory_parts, "release": release,
                  "timing": timing, "method": METHOD}
        result["anomalies"] = findings(result)
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retries", type=int, default=20_000,
                        help="waiting retries in part 1, both sides (default 20,000: see above)")
    parser.add_argument("--events", type=int, default=2000, help="events in part 3")
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    if options.retries < 1 or options.events < 1:
        parser.error("--retries and --events must be at least 1")
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
