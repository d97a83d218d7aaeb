"""Judging and printing what ``bench.schedule`` measured: anomalies and markdown tables."""

from __future__ import annotations

import itertools
import math
from typing import Any

METHOD = (
    "Worker RSS = VmRSS of the worker process and its children, read from /proc once all N "
    "retries wait (idle = after it started consuming, before publishing); peak = VmHWM. Redis "
    "per retry = (INFO used_memory once all N wait - before publishing) / N, the schedule's "
    "keys alone by MEMORY USAGE. Hookline waits until RetrySchedule.stats().total = N; the "
    "countdown until the broker's 'unacked' hash holds N messages and the queue is empty. "
    "Release = one loop of release_due(batch=500, queue_limit=10**9) until the schedule is "
    "empty, no worker. Lateness = 2nd request's arrival - (1st request's arrival + 2 s): the "
    "real due time is Redis time when the retry was parked + 2 s, a little after the 1st "
    "request arrived (response, settle and park come in between), so these figures slightly "
    "overstate the lateness. Schedule lag = RetrySchedule.stats().lag (how overdue the "
    "earliest parked retry is), sampled every 0.1 s with the queues' depths. Hookline's "
    "workers run with HOOKLINE_BREAKER_THRESHOLD=10**9 (a receiver failing every first "
    "attempt would open the breaker and turn failures into deferrals), "
    "HOOKLINE_ALLOWED_NETWORKS=127.0.0.0/8 (loopback receivers) and no metrics port; "
    "defaults otherwise."
)
RSS_CEILING_MB = 150.0
RELEASE_TARGET_SECONDS = 2.0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (p = 0 is the minimum, 100 the maximum)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))]


def findings(result: dict[str, Any]) -> list[str]:
    anomalies = []
    hookline, release, timing = result["memory"]["hookline"], result["release"], result["timing"]
    if hookline["held"]["rss_mb"] >= RSS_CEILING_MB:
        anomalies.append(f"Hookline's worker RSS with {hookline['retries']} waiting retries is "
                         f"{hookline['held']['rss_mb']} MB, not below {RSS_CEILING_MB:.0f} MB")
    if hookline.get("dead_letters"):
        anomalies.append(f"{hookline['dead_letters']} dead letters in part 1a")
    for kind, part in result["memory"].items():
        if part["queued"] or (kind == "hookline" and part["unacked"]):
            anomalies.append(f"{kind}: {part['queued']} messages still queued and "
                             f"{part['unacked']} unacknowledged at the measure")
    if release["seconds"] > RELEASE_TARGET_SECONDS:
        anomalies.append(
            f"releasing {release['retries']} retries took {release['seconds']} s (target "
            f"< {RELEASE_TARGET_SECONDS:.0f} s): {release['server_seconds']} s inside Redis "
            f"(EVALSHA), the rest round trips and client decoding; slowest call "
            f"{release['call_ms_max']} ms")
    if release["released"] != release["retries"] or release["queued"] != release["retries"]:
        anomalies.append(f"released {release['released']}, queued {release['queued']} of "
                         f"{release['retries']}; {release['left']} left in the schedule")
    for kind, part in result["memory"].items():
        counts = [p["count"] for p in part["progress"]]
        if any(b < a for a, b in itertools.pairwise(counts)):
            anomalies.append(f"{kind}: the count of waiting retries went down while publishing "
                             f"({counts}): retries left the schedule or the worker early")
    if timing["delivered"] != timing["events"] or timing["retried"] != timing["events"]:
        anomalies.append(f"part 3: {timing['delivered']} of {timing['events']} events delivered, "
                         f"{timing['retried']} with a successful 2nd request")
    if timing["dead_letters"] or timing["requests"] != 2 * timing["events"]:
        anomalies.append(f"part 3: {timing['requests']} requests for {timing['events']} "
                         f"events (expected {2 * timing['events']}), "
                         f"{timing['dead_letters']} dead letters")
    return anomalies


def _kb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} KB"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def report(result: dict[str, Any]) -> str:
    info, memory = result["machine"], result["memory"]
    hookline, naive = memory["hookline"], memory["naive"]
    release, timing = result["release"], result["timing"]
    n = hookline["retries"]
    lines = [
        f"Hookline retry schedule benchmark, {info['date']}: {info['cpus']} CPUs "
        f"({info['cpu_model']}), load {info['load_average']}, Python {info['python']}, "
        f"Celery {info['celery']}, kombu {info['kombu']}, Redis {info['redis_server']} "
        f"(redis-py {info['redis_py']}); workers -P threads -c 32, prefetch 1, each part on "
        f"its own private Redis. Code: {info['commit']}"
        + (f" plus uncommitted {', '.join(info['uncommitted'])}." if info["uncommitted"] else "."),
        "",
        f"| {n:,} waiting retries | Hookline: durable schedule in Redis | "
        "Celery countdown (ETA held by the worker) |",
        "|---|---|---|",
        f"| worker RSS, all {n:,} waiting | {hookline['held']['rss_mb']:.0f} MB | "
        f"{naive['held']['rss_mb']:.0f} MB |",
        f"| worker RSS idle, before publishing | {hookline['idle']['rss_mb']:.0f} MB | "
        f"{naive['idle']['rss_mb']:.0f} MB |",
        f"| worker peak RSS (VmHWM) | {hookline['held']['peak_mb']:.0f} MB | "
        f"{naive['held']['peak_mb']:.0f} MB |",
        f"| worker memory per waiting retry, (all waiting - idle) / N | "
        f"{hookline['worker_kb_per_retry']:.2f} KB | {naive['worker_kb_per_retry']:.2f} KB |",
        f"| worker memory per waiting retry past warm-up (from 10% waiting on) | "
        f"{_kb(hookline['worker_kb_per_retry_marginal'])} | "
        f"{_kb(naive['worker_kb_per_retry_marginal'])} |",
        f"| Redis used_memory per waiting retry | {hookline['redis_bytes_per_retry']:.0f} B "
        f"(schedule keys {hookline['schedule_bytes_per_retry']:.0f} B) | "
        f"{naive['redis_bytes_per_retry']:.0f} B |",
        f"| Redis used_memory, all waiting | {hookline['redis_used_after'] / 2**20:.0f} MB | "
        f"{naive['redis_used_after'] / 2**20:.0f} MB |",
        f"| first publish -> all {n:,} waiting (publishing took) | {hookline['seconds']:.0f} s "
        f"({hookline['publish_seconds']:.0f} s) | {naive['seconds']:.0f} s "
        f"({naive['publish_seconds']:.0f} s) |",
        "",
        "| measure | value |",
        "|---|---|",
        f"| release {release['retries']:,} due retries, release_due(batch={release['batch']}) "
        f"until empty | {release['seconds']:.3f} s ({release['per_second']:,} retries/s; "
        f"{release['server_seconds']:.3f} s inside Redis) |",
        f"| retry lateness, 2 s retry, {timing['events']:,} events at once: p50 / p99 / max | "
        f"{_ms(timing['late_ms_p50'])} / {_ms(timing['late_ms_p99'])} / "
        f"{_ms(timing['late_ms_max'])} |",
        f"| of which: schedule lag, due but not yet released (max, sampled every 0.1 s) | "
        f"{timing['schedule_lag_ms_max']:.0f} ms |",
        f"| of which: waiting in hookline.retry for a busy worker (max queue depth) | "
        f"{timing['retry_queue_max']:,} messages (first-delivery queue max "
        f"{timing['first_queue_max']:,}; worker {timing['requests_per_second']:.0f} requests/s) |",
        f"| events delivered (2nd attempt) | {timing['delivered']:,} of {timing['events']:,} "
        f"({timing['requests']:,} requests, {timing['seconds']:.1f} s) |",
        "",
        f"Release: {release['calls']} calls, median {release['call_ms_median']} ms, slowest "
        f"{release['call_ms_max']} ms; {release['message_bytes']} B messages; parking them one "
        f"by one took {release['park_seconds']} s. Lateness min {_ms(timing['late_ms_min'])} "
        "(due approximated as the 1st request's arrival + 2 s).",
        "",
        f"Method: {result['method']}",
    ]
    lines += [f"ANOMALY: {text}" for text in result["anomalies"]]
    return "\n".join(lines)
