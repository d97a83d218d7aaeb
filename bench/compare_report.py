"""Judging and printing what ``bench.compare`` measured: targets, anomalies, markdown tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
METHOD = (
    "Each contender has its own redis-server (no persistence, noeviction) and worker "
    "subprocess(es); all of them run on the same 2 cores as the receiver and this script. "
    "Events are ready-made broker messages LPUSHed in pipelines of 1,000 (what kombu's publish "
    "does), so publishing is not timed. Throughput = events / (push -> the receiver's arrival "
    "time of the last request); the no-op: until the queue and kombu's unacked hash are empty. "
    "Each contender first drains a warm-up of 200 events per worker process. Hookline's "
    "default deployment is `hookline worker --app app`: one Celery worker with "
    "Hookline's default pool (threads, 512 slots, 64 runnable) per usable core, with its "
    "supervisor. Receiver: bench/compare_receiver.py, "
    "one asyncio loop in its own process, HTTP/1.1 keep-alive, 204 (no nginx installed). "
    "Worker RSS = VmRSS of the worker and its children, max of samples every 0.2 s during the "
    "batch. Outage: the dead endpoint is a port that accepts and resets each connection (a "
    "closed port would refuse as fast, but count nothing); its attempts are its accepted "
    "connections, counted from the push over the window. Hookline runs with its defaults "
    "(breaker threshold 5, cool-down 30 s, -P threads -c 64, prefetch 1), "
    "HOOKLINE_ALLOWED_NETWORKS=127.0.0.0/8 and no metrics port. The naive task runs on "
    "Celery's defaults (early ack, prefetch 4, max_retries 3, no task events). Rate limit: "
    "windows [t, t + 1 s) starting at each arrival holding more than rate + burst = 55 "
    "requests; drain = push -> last arrival, ideal = events / 50. Retries: a Hookline worker of "
    "its own with HOOKLINE_INITIAL_BACKOFF=3600 and HOOKLINE_BREAKER_THRESHOLD=10^9 (no "
    "breaker: every event is attempted), first deliveries = push -> last arrival at a "
    "receiver answering 200, parks = push -> ZCARD of the schedule's due set (every 20 ms) "
    "up by N with the receiver answering 500, in turn."
)


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def stored_results() -> dict[str, Any]:
    """Parts 3 and 6 from the gates and schedule benchmarks' last results, if any."""
    out: dict[str, Any] = {"round_trips": None, "retry_backlog": None}
    if gates := _load("gates.json"):
        commands = gates["commands"]
        out["round_trips"] = {
            "date": gates["machine"]["date"], "per_delivery_gates": commands["round_trips_gates"],
            "per_delivery_all": commands["round_trips_all"],
            "inside_scripts": commands["inside_scripts"],
            "gated_vs_ungated": round(gates["throughput"]["ratio"], 3)}
    if schedule := _load("schedule.json"):
        memory = schedule["memory"]
        hookline, naive = memory["hookline"], memory["naive"]
        out["retry_backlog"] = {
            "date": schedule["machine"]["date"], "retries": hookline["retries"],
            "hookline_rss_mb": hookline["held"]["rss_mb"], "naive_rss_mb": naive["held"]["rss_mb"],
            "hookline_kb_per_retry": hookline["worker_kb_per_retry_marginal"],
            "naive_kb_per_retry": naive["worker_kb_per_retry_marginal"],
            "hookline_redis_bytes_per_retry": hookline["redis_bytes_per_retry"],
            "naive_redis_bytes_per_retry": naive["redis_bytes_per_retry"],
            "release_per_second": schedule["release"]["per_second"]}
    return out


def _target(name: str, value: float, goal: str, met: bool) -> dict[str, Any]:
    return {"name": name, "value": value, "target": goal, "met": met}


def findings(result: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    fast, slow, outage, rate = (result["fast"], result["slow"], result["outage"],
                                result["rate_limit"])
    hook_naive = fast["hookline"]["per_second"] / fast["naive"]["per_second"]
    hook_naive_slow = slow["hookline"]["per_second"] / slow["naive"]["per_second"]
    hook_slow = slow["hookline"]["per_second"] / fast["hookline"]["per_second"]
    targets = [
        _target("1. Hookline / naive, same pool (threads 64), 0 ms", round(hook_naive, 2),
                ">= 1.3", hook_naive >= 1.3),
        _target("2. Hookline / naive, same pool (threads 64), 100 ms",
                round(hook_naive_slow, 2), ">= 1.3", hook_naive_slow >= 1.3),
        _target("2. Hookline at 100 ms / at 0 ms", round(hook_slow, 2), ">= 0.8",
                hook_slow >= 0.8),
        *(_target(f"4. {name}: healthy endpoint's events/s beside a dead one / {label}",
                  outage[name][key], ">= 0.9", outage[name][key] >= 0.9)
          for name in ("hookline", "naive")
          for key, label in (("ratio", "alone"),
                             ("shared_ratio", "beside a healthy one (half of row 1)"))),
        _target("5. 1-s windows over budget (50/s + burst 5), at the receiver",
                rate["windows_over_budget"], "0", rate["windows_over_budget"] == 0),
        _target("5. 1-s windows over budget, at the senders (attempt history)",
                rate["sent_windows_over_budget"], "0", rate["sent_windows_over_budget"] == 0),
        _target("5. drain time / ideal", rate["drain_ratio"], "<= 1.1 (aim)",
                rate["drain_ratio"] <= 1.1),
    ]
    if "hookline_default" in fast:
        default_fast = fast["hookline_default"]["per_second"] / fast["naive_default"]["per_second"]
        default_slow = slow["hookline_default"]["per_second"] / slow["naive_default"]["per_second"]
        targets += [
            _target("1. Hookline's default deployment / naive on Celery's defaults, 0 ms",
                    round(default_fast, 2), ">= 1.3", default_fast >= 1.3),
            _target("2. Hookline's default deployment / naive on Celery's defaults, 100 ms",
                    round(default_slow, 1), ">= 10", default_slow >= 10),
        ]
    worker_ms = fast["hookline"]["cpu_ms"]["worker"]
    targets.append(_target(
        f"Hookline worker CPU ms per delivery, 0 ms, threads 64 (naive: "
        f"{fast['naive']['cpu_ms']['worker']:.2f})", worker_ms, "<= 1.6", worker_ms <= 1.6))
    if enqueue := result.get("enqueue"):
        for key, label in (("send_webhook_us", "send_webhook"), ("delay_us", "deliver.delay()")):
            ratio = round(enqueue[key] / enqueue["naive_delay_us"], 2)
            targets.append(_target(f"7. {label} / a plain .delay() (the naive task's), µs per "
                                   "call", ratio, "<= 1.2", ratio <= 1.2))
    anomalies = []
    if retry := result.get("retries"):
        targets.append(_target("8. retries parked/s / first deliveries/s, one worker",
                               retry["ratio"], f">= {retry['target']}", retry["met"]))
        parked = retry["parked"]
        if not parked["attempted_once"]:
            anomalies.append(f"retries: {parked['attempts']:,} attempts for "
                             f"{parked['events']:,} failing events (one each expected)")
        if parked["dead_lettered"]:
            anomalies.append(f"retries: {parked['dead_lettered']:,} failing events "
                             "dead-lettered instead of parked")
        if retry["billiard_einfo_in"]:
            anomalies.append("retries: billiard's einfo named in "
                             + ", ".join(retry["billiard_einfo_in"]))
    for label, part in [*(("0 ms " + n, b) for n, b in fast.items()),
                        *(("100 ms " + n, b) for n, b in slow.items()),
                        ("rate limit", rate),
                        *(("outage solo " + n, o["solo"]) for n, o in outage.items())]:
        if part.get("duplicates"):
            anomalies.append(f"{label}: {part['duplicates']} requests sent twice")
    for store, name in ((result["round_trips"], "gates.json"),
                        (result["retry_backlog"], "schedule.json")):
        if store is None:
            anomalies.append(f"no bench/results/{name}: run make bench (parts 3 and 6)")
    return anomalies, targets


def _n(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.0f}{unit}"


def report(result: dict[str, Any]) -> str:
    info, options = result["machine"], result["options"]
    fast, slow, outage, rate = (result["fast"], result["slow"], result["outage"],
                                result["rate_limit"])
    names = [n for n in ("noop", "naive", "naive_default", "hookline", "hookline_default")
             if n in fast]
    heads = {"noop": "no-op (threads 64)", "naive": "naive (threads 64)",
             "naive_default": f"naive, Celery's defaults (prefork {info['cpus']})",
             "hookline": "Hookline (threads 64)",
             "hookline_default": "Hookline's default (`hookline worker`: "
                                 f"{fast.get('hookline_default', {}).get('processes', 'N')} x "
                                 "threads 512, 64 runnable)"}
    heads = [heads[n] for n in names]
    slow_default = slow["naive_default"]["events"]
    lines = [
        f"Hookline vs Celery, {info['date']}: {info['cpus']} CPUs ({info['cpu_model']}), load "
        f"{info['load_average']} at the start, {info['load_average_end']} at the end (other "
        f"processes than this benchmark's: {info['other_cores_mean']} cores on average, "
        f"{info['other_cores_peak_2s']} at most over 2 s), Python "
        f"{info['python']}, Celery {info['celery']}, kombu {info['kombu']}, Redis "
        f"{info['redis_server']} (redis-py {info['redis_py']}); {options['events']:,} events per "
        f"batch, each contender on its own Redis. Code: {info['commit']}"
        + (f" plus uncommitted {', '.join(info['uncommitted'])}." if info["uncommitted"] else "."),
        "",
        "| measure | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(names),
        "| 1. events/s, receiver answers at once | "
        + " | ".join(_n(fast[n]["per_second"], "/s") for n in names) + " |",
        "| 2. events/s, receiver answers after 100 ms | n/a | "
        + " | ".join(_n(slow[n]["per_second"], "/s") + (f" ({slow_default:,} events)"
                     if n == "naive_default" else "") for n in names[1:]) + " |",
        "| worker RSS max, 0 ms / 100 ms | " + " | ".join(
            f"{fast[n]['rss_max_mb']:.0f} MB" + (f" / {slow[n]['rss_max_mb']:.0f} MB"
                                                  if n in slow else "") for n in names) + " |",
        "| CPU ms per event at 0 ms: worker + its Redis + receiver | " + " | ".join(
            "{worker:.2f} + {redis:.2f} + {receiver:.2f}".format(**fast[n]["cpu_ms"])
            for n in names) + " |",
        "",
        "| measure | value | target | met |",
        "|---|---|---|---|",
    ]
    lines += [f"| {t['name']} | {t['value']} | {t['target']} | {'yes' if t['met'] else 'NO'} |"
              for t in result["targets"] if not t["name"].startswith("8.")]
    if retry := result.get("retries"):
        lines.append(retries_row(retry))
    lines.append(f"| 1. Hookline / no-op | "
                 f"{fast['hookline']['per_second'] / fast['noop']['per_second']:.2f} | "
                 "reported | |")
    for name in ("hookline", "naive"):
        o = outage[name]
        lines.append(
            f"| 4. {name}: healthy events/s alone -> beside the dead endpoint; connection "
            f"attempts the dead one got while the healthy events drained / in the "
            f"{o['window_seconds']:g} s observed; worker RSS max | "
            f"{o['solo']['per_second']:.0f}/s -> {o['healthy_per_second']:.0f}/s; "
            f"{o['failing_attempts_healthy_phase']:,} / {o['failing_attempts_window']:,} "
            f"attempts for {o['failing_events']:,} events; {o['rss_max_mb']:.0f} MB "
            f"| reported | |")
    lines.append(f"| 5. rate limit: busiest 1 s at the receiver / at the senders, busiest "
                 f"100 ms at the receiver; drain | {rate['busiest_second']} / "
                 f"{rate['sent_busiest_second']} / {rate['busiest_100ms']} requests; "
                 f"{rate['drain_seconds']:.1f} s for "
                 f"{rate['events']:,} events (ideal {rate['ideal_seconds']:g} s) | reported | |")
    if trips := result["round_trips"]:
        lines.append(f"| 3. Redis round trips per delivery (gates.json, {trips['date'][:10]}) | "
                     f"{trips['per_delivery_gates']:.2f} (every command: "
                     f"{trips['per_delivery_all']:.2f}; {trips['inside_scripts']:.1f} more "
                     "inside the scripts) | 2 | |")
    if backlog := result["retry_backlog"]:
        lines.append(
            f"| 6. {backlog['retries']:,} waiting retries, worker RSS Hookline / Celery "
            f"countdown (schedule.json, {backlog['date'][:10]}) | {backlog['hookline_rss_mb']:.0f}"
            f" MB / {backlog['naive_rss_mb']:.0f} MB ({backlog['hookline_kb_per_retry']} / "
            f"{backlog['naive_kb_per_retry']} KB per retry; Redis "
            f"{backlog['hookline_redis_bytes_per_retry']:,.0f} B per parked retry) | reported | |")
    enqueue = result["enqueue"]
    lines.append(f"| 7. enqueue, µs per call: send_webhook / deliver.delay() (naive task's "
                 f".delay()) | {enqueue['send_webhook_us']:,.0f} / {enqueue['delay_us']:,.0f} "
                 f"({enqueue['naive_delay_us']:,.0f}); {enqueue['ratio']}x, "
                 f"{enqueue['calls']:,} calls each | reported | |")
    lines += ["", f"Plots: {', '.join(result.get('plots', [])) or 'none'} (bench/results/).",
              "", f"Method: {result['method']}"]
    lines += [f"ANOMALY: {text}" for text in result["anomalies"]]
    return "\n".join(lines)


def retries_row(result: dict[str, Any]) -> str:
    """The report table's row for part 8 (measured by bench/compare_retries.py): here, with the
    other rows, so that the measuring module imports the report and never the reverse."""
    first, parked = result["first"], result["parked"]
    checks = []
    if not parked["attempted_once"]:
        checks.append(f"{parked['attempts']:,} attempts for {parked['events']:,} events")
    if parked["dead_lettered"]:
        checks.append(f"{parked['dead_lettered']:,} dead-lettered")
    if result["billiard_einfo_in"]:
        checks.append(f"billiard einfo named in {', '.join(result['billiard_einfo_in'])}")
    return (f"| 8. retries, one worker: parked/s (every attempt answered 500, next due in ~1 h) "
            f"/ first deliveries/s (200) | {parked['per_second']:.0f}/s / "
            f"{first['per_second']:.0f}/s = {result['ratio']:.2f} (middle 10-90%: "
            f"{parked['per_second_10_90'] or 0:.0f}/s); worker CPU ms per event "
            f"{parked['cpu_ms']['worker']:.2f} vs {first['cpu_ms']['worker']:.2f}; Redis "
            f"commands {parked['redis_commands']:.1f} vs {first['redis_commands']:.1f}"
            + (f"; {'; '.join(checks)}" if checks else "")
            + f" | >= {result['target']} | {'PASS' if result['met'] else 'FAIL'} |")
