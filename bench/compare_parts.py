"""The measures of ``bench.compare``, one function per part; each returns a JSON-ready dict."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench.common import RedisServer
from bench.compare_meters import CpuMeter, RssSampler
from bench.compare_procs import (
    EVENT_TYPE,
    HOOKLINE_WORKER,
    Contender,
    PoolWorker,
    ReceiverProcess,
)
from bench.compare_procs import payload as make_payload
from hookline.store.history import AttemptHistory

LOOPBACK = "127.0.0.0/8"
#: The contenders of parts 1, 2 and 4: name -> (Celery app, task, queue, pool, concurrency;
#: None: the app's own default).
CONTENDERS: dict[str, tuple[str, str, str, str, int | None]] = {
    "noop": ("bench.naive", "naive.noop", "celery", "threads", 64),
    "naive": ("bench.naive", "naive.webhook", "celery", "threads", 64),
    "naive_default": ("bench.naive", "naive.webhook", "celery", "prefork", 2),
    "hookline": ("app", "hookline.deliver", "hookline", "threads", 64),
    # Hookline's default deployment: `hookline worker`, one worker per core with the
    # default pool (threads, 512 slots, 64 runnable: hookline/celeryconfig.py).
    "hookline_default": ("app", "hookline.deliver", "hookline", HOOKLINE_WORKER, None),
}
SLOW_MS = 100
RATE, RATE_PER_SECOND = "50/s", 50


def worker_env(kind: str, url: str, workdir: Path) -> dict[str, str]:
    if kind == "bench.naive":
        return {"BENCH_NAIVE_BROKER_URL": url}
    return {"REDIS_URL": url, "HOOKLINE_BROKER_URL": url, "HOOKLINE_ALLOWED_NETWORKS": LOOPBACK,
            "HOOKLINE_METRICS_PORT": "0", "HOOKLINE_LOG_FORMAT": "text",
            "HOOKLINE_DLQ_SPOOL": str(workdir / f"spool-{url.rsplit(':', 1)[1][:5]}.jsonl")}


def start(kind: str, workdir: Path, *, workers: int = 1, name: str = "",
          env: dict[str, str] | None = None) -> Contender:
    """A private Redis and ``workers`` worker processes of contender ``kind`` (not waited on),
    their environment with ``env`` on top."""
    app, task, queue, pool, concurrency = CONTENDERS[kind]
    name = name or kind
    server = RedisServer(name, workdir)
    server.wait_ready()
    client = redis.Redis(port=server.port, decode_responses=True)
    contender = Contender(name, server, client, task, queue)
    environment = worker_env(app, server.url, workdir) | (env or {})
    for n in range(workers):
        contender.workers.append(PoolWorker(
            environment, workdir / f"worker-{name}-{n}.log",
            app=app, pool=pool, concurrency=concurrency, name=f"{name}{n}"))
    return contender


def target(contender: Contender, receiver: ReceiverProcess, name: str, *, delay_ms: int = 0,
           refused: bool = False, rate: str | None = None, status: int | None = None) -> str:
    """Where a batch goes: a URL (naive, no-op), or an endpoint registered for it (Hookline).
    ``status``: a receiver answering that status at once (no delay)."""
    if refused:
        url = receiver.refuse_url(contender.name)
    elif status is not None:
        url = receiver.status_url(name, status)
    else:
        url = receiver.url(name, delay_ms)
    if not contender.hookline:
        return url
    from hookline.store.endpoints import EndpointRegistry

    EndpointRegistry(contender.client).add(name, url, rate=rate)
    return name


def batch(contender: Contender, receiver: ReceiverProcess, name: str, count: int, *,
          delay_ms: int = 0, registered: bool = False,
          messages: list[str] | None = None) -> dict[str, Any]:
    """``count`` events to receiver counter ``name``, pushed at once; timed from the push to
    the last arrival (a no-op: until the queue is drained). Worker RSS is the maximum seen.
    ``registered``: Hookline's endpoint ``name`` is registered already (by the caller);
    ``messages``: the broker messages of its ``count`` events, built by the caller."""
    where = name if registered else target(contender, receiver, name, delay_ms=delay_ms)
    messages = messages or contender.messages(where, name, count)
    sampler = RssSampler(contender.workers)
    meter = CpuMeter(contender.workers, contender.client, receiver.process.pid)
    timeout = 60 + count / 10
    try:
        started = contender.push(messages)
        duplicates: int | None = 0
        if contender.name == "noop":
            ended = contender.wait_drained(timeout)
        else:
            stats = receiver.wait(name, count, timeout, contender.workers)
            ended = stats["last"]
            duplicates = stats["hits"] - stats["distinct"] if contender.hookline else None
    finally:
        rss = sampler.stop()
    seconds = ended - started
    cpu, calls = meter.per_event(count)
    return {"events": count, "seconds": round(seconds, 3), "per_second": round(count / seconds, 1),
            "rss_max_mb": rss, "duplicates": duplicates, "cpu_ms": cpu,
            "processes": sum(worker.processes for worker in contender.workers),
            "redis_commands": round(sum(calls.values()), 2), "redis_commands_by_name": calls}


def throughput(contenders: dict[str, Contender], receiver: ReceiverProcess, events: int,
               slow_default_events: int, rounds: int = 1) -> dict[str, Any]:
    """Parts 1 and 2: every contender at 0 ms (``rounds`` times, in turn), then every one but
    the no-op at 100 ms (``rounds`` times too, but Celery's default pool once)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for number in range(rounds):
        for name, contender in contenders.items():
            runs[name].append(batch(contender, receiver, f"{name}-fast{number}", events))
            print(f"  {name} 0 ms: {runs[name][-1]['per_second']:.0f}/s", flush=True)
    fast = {name: combine(batches) for name, batches in runs.items()}
    slow_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders
                                                  if name != "noop"}
    for number in range(rounds):
        for name in slow_runs:
            if name == "naive_default" and number > 0:
                continue  # ~19/s: one round of a few hundred events says enough
            count = slow_default_events if name == "naive_default" else events
            slow_runs[name].append(batch(contenders[name], receiver, f"{name}-slow{number}",
                                         count, delay_ms=SLOW_MS))
            print(f"  {name} {SLOW_MS} ms: {slow_runs[name][-1]['per_second']:.0f}/s",
                  flush=True)
    slow = {name: combine(batches) for name, batches in slow_runs.items()}
    return {"fast": fast, "slow": slow}


def combine(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one contender as one: events/s over all of them, the largest RSS, mean CPU."""
    events = sum(b["events"] for b in batches)
    seconds = sum(b["seconds"] for b in batches)
    cpu = {key: round(sum(b["cpu_ms"][key] for b in batches) / len(batches), 3)
           for key in batches[0]["cpu_ms"]}
    return {**batches[-1], "events": events, "seconds": round(seconds, 3),
            "per_second": round(events / seconds, 1), "cpu_ms": cpu,
            "rss_max_mb": max(b["rss_max_mb"] for b in batches),
            "rounds": [b["per_second"] for b in batches]}


def outage(contender: Contender, receiver: ReceiverProcess, events: int,
           window: float, rounds: int = 2) -> dict[str, Any]:
    """Part 4: events/2 to a healthy endpoint alone, then events/2 healthy interleaved with
    events/2 to an endpoint that resets every connection; the attempts the dead one got until
    ``window`` s or the healthy events' end, whichever is later (first round). ``rounds`` times
    in turn, each with endpoints of its own (a fresh breaker); the ratio is over all rounds,
    as one round's throughput on this shared machine varies by up to a third."""
    half = events // 2
    solos: list[dict[str, Any]] = []
    mixed_seconds: list[float] = []
    first: dict[str, Any] = {}
    rss = 0.0
    for number in range(rounds):
        tag = f"{contender.name}-{number}"
        solos.append(batch(contender, receiver, f"{tag}-solo", half))
        healthy = target(contender, receiver, f"{tag}-healthy")
        failing = target(contender, receiver, f"{tag}-failing", refused=True)
        good = contender.messages(healthy, f"healthy{number}", half)
        bad = contender.messages(failing, f"failing{number}", half)
        messages = [m for pair in zip(good, bad, strict=True) for m in pair]
        sampler = RssSampler(contender.workers)
        try:
            started = contender.push(messages)
            stats = receiver.wait(f"{tag}-healthy", half, 60 + events / 10, contender.workers)
            if number == 0:
                time.sleep(max(0.0, started + window - time.time()))
        finally:
            rss = max(rss, sampler.stop())
        mixed_seconds.append(stats["last"] - started)
        if number == 0:
            seen = max(window, mixed_seconds[0])
            first = {"started": started, "window": seen, "attempts": [
                t - started for t in receiver.times(contender.name) if t - started <= seen]}
    solo = combine(solos)
    healthy_seconds = sum(mixed_seconds)
    attempts = first["attempts"]
    return {"solo": solo, "healthy_events": half, "failing_events": half, "rounds": rounds,
            "healthy_seconds": round(healthy_seconds, 3),
            "healthy_per_second": round(half * rounds / healthy_seconds, 1),
            "ratio": round(half * rounds / healthy_seconds / solo["per_second"], 3),
            "ratio_by_round": [round(s["seconds"] / m, 3) for s, m in
                               zip(solos, mixed_seconds, strict=True)],
            "window_seconds": round(first["window"], 1), "rss_max_mb": rss,
            "failing_attempts_window": len(attempts),
            "failing_attempts_healthy_phase": sum(1 for t in attempts if t <= mixed_seconds[0]),
            "attempt_times": [round(t, 4) for t in attempts]}


def busiest_windows(times: list[float], width: float, limit: int) -> tuple[int, int]:
    """The most requests in any window [t, t + width) starting at a request, and how many such
    windows hold more than ``limit`` (tests/test_shared_gates.py's busiest_window, counting)."""
    times = sorted(times)
    most = start = 0
    for end, at in enumerate(times):
        while at - times[start] >= width:
            start += 1
        most = max(most, end - start + 1)
    over = sum(1 for first, at in enumerate(times)  # windows starting at each request
               if first + limit < len(times) and times[first + limit] - at < width)
    return most, over


def send_times(client: redis.Redis, endpoint_id: str, events: int) -> list[float]:
    """When each attempt left a worker, from Hookline's attempt history (end - latency):
    the limiter's view, before the variable delay to the receiver's arrival time."""

    found = AttemptHistory(client).attempts_of(
        endpoint_id, [f"{endpoint_id}-{n:06d}" for n in range(events)])
    return sorted(a.at - a.latency for attempts in found.values() for a in attempts)


def rate_limit(workdir: Path, receiver: ReceiverProcess, events: int,
               workers: int = 3) -> dict[str, Any]:
    """Part 5: ``workers`` Hookline workers drain ``events`` to an endpoint limited to 50/s."""
    contender = start("hookline", workdir, workers=workers, name="rate")
    try:
        contender.wait_consuming()
        endpoint = target(contender, receiver, "rate", rate=RATE)
        from hookline.store.endpoints import EndpointRegistry

        burst = EndpointRegistry(contender.client).require(endpoint).effective_burst()
        messages = contender.messages(endpoint, "rate", events)
        sampler = RssSampler(contender.workers)
        try:
            started = contender.push(messages)
            stats = receiver.wait("rate", events, 60 + 3 * events / RATE_PER_SECOND,
                                  contender.workers)
        finally:
            rss = sampler.stop()
        times = [t - started for t in receiver.times("rate")]
        sends = [t - started for t in send_times(contender.client, "rate", events)]
    finally:
        contender.stop()
    ideal = events / RATE_PER_SECOND
    budget = RATE_PER_SECOND + burst
    most, over = busiest_windows(times, 1.0, budget)
    most_100ms, _ = busiest_windows(times, 0.1, budget)
    sent_most, sent_over = busiest_windows(sends, 1.0, budget)
    drain = stats["last"] - started
    return {"workers": workers, "events": events, "rate": RATE, "burst": burst,
            "budget_per_second": budget, "windows_over_budget": over,
            "busiest_second": most, "busiest_100ms": most_100ms,
            "sent_windows_over_budget": sent_over, "sent_busiest_second": sent_most,
            "sent_requests": len(sends),
            "drain_seconds": round(drain, 2), "ideal_seconds": ideal,
            "drain_ratio": round(drain / ideal, 3), "rss_max_mb": rss,
            "duplicates": stats["hits"] - stats["distinct"],
            "request_times": [round(t, 4) for t in times]}


@contextmanager
def _timer(out: dict[str, float], key: str, calls: int) -> Iterator[None]:
    started = time.perf_counter()
    yield
    out[key] = out.get(key, 0.0) + (time.perf_counter() - started) * 1e6 / calls


def enqueue_cost(calls: int, blocks: int = 4) -> dict[str, Any]:
    """Part 7: ``app.send_webhook`` vs ``deliver.delay()`` (and the naive task's ``.delay()``,
    for reference) on the benchmark's own Redis, no worker; alternating blocks, after a
    warm-up of 100 calls each. BENCH_NAIVE_BROKER_URL must name that Redis too."""
    from bench.naive import webhook
    from hookline import deliver, send_webhook
    from hookline.store.endpoints import EndpointRegistry

    EndpointRegistry().add("enqueue", "http://127.0.0.1:9/hook")
    url = "http://127.0.0.1:9/hook"
    calls_of = {
        "send_webhook_us": lambda n: send_webhook("enqueue", EVENT_TYPE, make_payload(n)),
        "delay_us": lambda n: deliver.delay("enqueue", EVENT_TYPE, make_payload(n)),
        "naive_delay_us": lambda n: webhook.delay(url, {"type": EVENT_TYPE,
                                                        "data": make_payload(n)}),
    }
    per_call: dict[str, float] = {}
    size = max(1, calls // blocks)
    try:
        for call in calls_of.values():
            for n in range(100):
                call(n)
        for _ in range(blocks):
            for key, call in calls_of.items():
                with _timer(per_call, key, size * blocks):
                    for n in range(size):
                        call(n)
    finally:
        webhook.app.close()
    result: dict[str, Any] = {k: round(v, 1) for k, v in per_call.items()}
    result.update(calls=size * blocks, ratio=round(per_call["send_webhook_us"]
                                                  / per_call["delay_us"], 2))
    return result
