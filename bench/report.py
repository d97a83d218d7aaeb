"""Judging and printing what ``bench.gates`` measured: anomalies, notes, a markdown table."""

from __future__ import annotations

from typing import Any

METHOD = ("round trips = commands the worker's connections sent to the state Redis "
          "(MONITOR lines from a client) plus rejected ones (INFO errorstats); inside scripts "
          "= MONITOR '[0 lua]' lines; INFO commandstats (which counts both, after CONFIG "
          "RESETSTAT) must equal their sum. The broker is a separate Redis, not counted. "
          "Throughput = N / (first publish -> receiver saw N).")


def findings(commands: dict[str, Any], rounds: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Anomalies (something is off) and notes (costs that are not per delivery)."""
    anomalies, notes = [], []
    events = commands["events"]
    if commands["round_trips_gates"] > 2.0 or commands["round_trips_other"]:
        other = "; ".join(
            f"{n} {c['calls']} ({c['calls'] / commands['seconds']:.2f}/s, "
            f"{c['calls'] / events:.3f} per delivery, e.g. on {c['first_argument']!r})"
            for n, c in commands["round_trips_other"].items())
        anomalies.append(f"more than 2 round trips per delivery: gates (admit + settle) "
                         f"{commands['round_trips_gates']:.3f}; other commands from the worker "
                         f"over {commands['seconds']}s: {other or 'none'}")
    if commands["round_trips_setup"] or commands["rejected"]:
        notes.append(
            f"{commands['round_trips_setup']} handshake commands (HELLO, PING) and "
            f"{commands['rejected']} rejected ones ({commands['rejected_by_error']}: redis-py's "
            f"CLIENT SETINFO / MAINT_NOTIFICATIONS, unknown to Redis < 7.2) came from "
            f"connections hookline/store/connection.py's pool opened during the measure: "
            f"a cost per connection "
            f"({commands['worker_connections']} worker connections in all), not per delivery")
    counted = sum(c["round_trips"] + c["inside_scripts"] for c in commands["commands"].values())
    if counted != round(commands["commandstats_total"] * events):
        anomalies.append(f"MONITOR counted {counted / events:.3f} commands per delivery, "
                         f"commandstats {commands['commandstats_total']:.3f}")
    if commands["done_markers"] != events:
        anomalies.append(f"{commands['done_markers']} done markers for {events} events")
    for batch in [commands["batch"], *rounds]:
        if batch["duplicates"] or batch["unsigned"]:
            anomalies.append(f"{batch['mode']}: {batch['duplicates']} duplicate and "
                             f"{batch['unsigned']} unsigned requests")
        if batch["publish_seconds"] > 0.8 * batch["seconds"]:
            anomalies.append(f"{batch['mode']}: publishing took {batch['publish_seconds']}s of "
                             f"{batch['seconds']}s; the publisher may bound this round")
    return {"anomalies": anomalies, "notes": notes}


def report(result: dict[str, Any]) -> str:
    info, commands, speed = result["machine"], result["commands"], result["throughput"]
    events = commands["events"]
    lines = [
        f"Hookline gates benchmark, {info['date']}: {info['cpus']} CPUs ({info['cpu_model']}), "
        f"Python {info['python']}, Celery {info['celery']}, Redis {info['redis_server']} "
        f"(redis-py {info['redis_py']}); one worker -P threads -c {result['concurrency']}, "
        f"{events} events per measure, loopback receiver answering 204. Code: {info['commit']}"
        + (f" plus uncommitted {', '.join(info['uncommitted'])}." if info["uncommitted"] else "."),
        "",
        "| measure | value |",
        "|---|---|",
        "| Redis round trips per delivery (gates: EVALSHA admit + settle) | "
        f"{commands['round_trips_gates']:.2f} |",
        "| Redis round trips per delivery (every command the worker sent) | "
        f"{commands['round_trips_all']:.2f} |",
        "| Redis commands incl. inside scripts per delivery | "
        f"{commands['commandstats_total']:.2f} |",
        f"| throughput gated | {speed['gated']:.0f} /s |",
        f"| throughput ungated | {speed['ungated']:.0f} /s |",
        f"| gated / ungated | {speed['ratio']:.2f}x |",
        "",
        "| command (state Redis) | round trips | inside scripts | per delivery |",
        "|---|---|---|---|",
    ]
    for name, row in commands["commands"].items():
        total = row["round_trips"] + row["inside_scripts"]
        lines.append(f"| {name} | {row['round_trips']} | {row['inside_scripts']} | "
                     f"{total / events:.2f} |")
    if commands["rejected"]:
        lines.append(f"| (rejected: errorstats) | {commands['rejected']} | 0 | "
                     f"{commands['rejected'] / events:.2f} |")
    lines += ["", "Rounds, events/s (publishing took): " + ", ".join(
        f"{r['mode']} {r['per_second']:.0f} ({r['publish_seconds']:.1f} of {r['seconds']:.1f}s)"
        for r in result["rounds"]) + f"; best rounds' ratio {speed['ratio_best']:.2f}x",
        "", f"Method: {METHOD}"]
    lines += [f"NOTE: {text}" for text in result["notes"]]
    lines += [f"ANOMALY: {text}" for text in result["anomalies"]]
    return "\n".join(lines)
