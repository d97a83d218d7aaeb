"""What a chaos run proves, read afterwards from Redis, the receivers' records and the worker
logs: every event final (delivered or dead-lettered with a reason), duplicates explained by a
kill or the Redis restart, and the rate-limited endpoint's budget kept in every 1 s window.

Imported only once the environment names the run's private Redis (``app`` reads it once).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from bench.chaos_rate import check_rate
from hookline.store import delivery
from hookline.store.dead_letter_queue import DLQ_KEY, DeadLetterQueue
from hookline.store.schedule import META_KEY
from hookline.transport.records import UNACKED_RECORDS_KEY, held_messages

#: A duplicate is explained by a fault when its first accepted request arrived at most this
#: long before it (an attempt lasts at most connect + 2 x read timeout = 3 s, then settles).
FAULT_WINDOW = 5.0
#: Slack after a fault (the receiver and the driver timestamp on the same clock).
AFTER_FAULT = 0.5
LOG_LINE = re.compile(r"\] ((?:delivery|breaker|schedule)\.\w+) (?:.*?)endpoint_id=(\S+)"
                      r"(?: event_id=(\S+))?(.*)$")


@dataclass
class Fault:
    kind: str  # sigkill, sigterm, scale, redis_restart, worker_exit
    at: float  # Unix seconds
    target: str = ""
    #: For a Redis restart: when it answered again.
    until: float | None = None


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_states(client: redis.Redis, events: dict[str, str]) -> tuple[set[str], set[str]]:
    """(events with a done marker, events with a dead letter): one pipelined round trip."""
    ids = list(events)
    marked = delivery.delivered(client, [(events[event_id], event_id) for event_id in ids])
    pipe = client.pipeline(transaction=False)
    for event_id, endpoint_id in events.items():
        pipe.hexists(DLQ_KEY, f"{endpoint_id}/{event_id}")
    replies = pipe.execute()
    done = {ids[n] for n in range(len(ids)) if marked[n]}
    dead = {ids[n] for n in range(len(ids)) if replies[n]}
    return done, dead


def spooled_ids(path: Path) -> set[str]:
    """Events dead-lettered to the local spool file while Redis was down (not in Redis yet)."""
    if not path.exists():
        return set()
    ids = set()
    for line in path.read_text().splitlines():
        try:
            ids.add(json.loads(line)["event_id"])
        except (ValueError, KeyError):
            continue  # a line being written
    return ids


def index_logs(logs: dict[str, Path]) -> dict[str, list[str]]:
    """event id -> ``<worker>: <log event> <rest>`` for every delivery line naming it."""
    index: dict[str, list[str]] = defaultdict(list)
    for worker, path in logs.items():
        for line in path.read_text(errors="replace").splitlines():
            match = LOG_LINE.search(line)
            if match and match.group(3):
                index[match.group(3)].append(
                    f"{worker}: {match.group(1)}{match.group(4)[:90]}")
    return index


def explain(first: float, faults: list[Fault]) -> str:
    """The fault a duplicate's first accepted request fell just before, or ''."""
    for fault in faults:
        if fault.kind == "sigkill" and fault.at - FAULT_WINDOW <= first <= fault.at + AFTER_FAULT:
            return f"sigkill {fault.target} at +{fault.at:.1f}"
        if fault.kind == "redis_restart" and fault.until is not None and \
                fault.at - FAULT_WINDOW <= first <= fault.until + AFTER_FAULT:
            return f"redis restart at +{fault.at:.1f}"
        if fault.kind == "worker_exit" and fault.at - FAULT_WINDOW <= first <= fault.at + 1:
            return f"{fault.target} crashed at +{fault.at:.1f}"
    return ""


def queued_ids(client: redis.Redis) -> str:
    """Every message text on Hookline's queues and among the unacknowledged records, joined."""
    texts = client.lrange("hookline", 0, -1) + client.lrange("hookline.retry", 0, -1)
    texts += held_messages(client)
    return "\n".join(str(text) for text in texts)


def untraceable(client: redis.Redis, events: dict[str, str], event_ids: set[str]) -> set[str]:
    """Of ``event_ids`` (not final), those Hookline holds nowhere: not in the retry schedule,
    not on a queue, not unacknowledged (a worker's messages stay in the unacked records until
    acknowledged, hookline/transport/unacked.py)."""
    queued = queued_ids(client)
    ordered = sorted(event_ids)
    pipe = client.pipeline(transaction=False)
    for event_id in ordered:
        pipe.hexists(META_KEY, f"{events[event_id]}/{event_id}")
    scheduled = pipe.execute()
    return {e for e, held in zip(ordered, scheduled, strict=True) if not held and e not in queued}


def redelivery_sample(client: redis.Redis) -> tuple[float, str]:
    """(age in seconds of the oldest unacknowledged broker message, the token of kombu's
    ``unacked_mutex`` or ''): how a killed worker's messages are doing on their way back."""
    pipe = client.pipeline(transaction=False)
    pipe.zrange(UNACKED_RECORDS_KEY, 0, 0, withscores=True)
    pipe.zrange("unacked_index", 0, 0, withscores=True)  # kombu's layout, if any
    pipe.get("unacked_mutex")
    pipe.time()
    oldest, oldest_kombu, token, (seconds, micros) = pipe.execute()
    taken = [entries[0][1] for entries in (oldest, oldest_kombu) if entries]
    age = seconds + micros / 1e6 - min(taken) if taken else 0.0
    return max(0.0, age), token or ""


def analyse(client: redis.Redis, events: dict[str, str], records: dict[str, list[dict[str, Any]]],
            faults: list[Fault], logs: dict[str, Path], *, rate_endpoint: str, rate: str,
            burst: int, started: float) -> dict[str, Any]:
    """The run's summary (JSON-ready); ``summary["ok"]`` is the verdict."""
    done, dead = final_states(client, events)
    queue = DeadLetterQueue(client)
    reasons: Counter[str] = Counter()
    for event_id in sorted(dead - done):
        entry = queue.get(f"{events[event_id]}/{event_id}")
        reasons[entry.reason if entry else "?"] += 1
    not_final = set(events) - done - dead
    lost = sorted(untraceable(client, events, not_final)) if not_final else []
    unfinished = sorted(not_final - set(lost))

    accepted: dict[str, list[float]] = defaultdict(list)  # in-time 2xx answers per event
    statuses: dict[str, Counter[str]] = {}
    late = 0
    for endpoint_id, lines in records.items():
        statuses[endpoint_id] = Counter(
            "late" if line.get("late") else str(line["status"]) for line in lines)
        for line in lines:
            late += bool(line.get("late"))
            if 200 <= int(line["status"]) < 300 and not line.get("late"):
                accepted[line["webhook_id"]].append(float(line["at"]))
    never_received = sorted(e for e in done if e not in accepted)
    received_but_dead = sorted(e for e in dead - done if e in accepted)

    log_index = index_logs(logs)
    relative = [Fault(f.kind, f.at - started, f.target,
                      None if f.until is None else f.until - started) for f in faults]
    duplicates: list[dict[str, Any]] = []
    for event_id, times in sorted(accepted.items()):
        if len(times) < 2:
            continue
        times.sort()
        why = explain(times[0] - started, relative)
        duplicates.append({"event_id": event_id, "endpoint": events.get(event_id, "?"),
                           "received": len(times),
                           "at": [round(t - started, 2) for t in times],
                           "explained_by": why or None,
                           "log": [] if why else log_index.get(event_id, [])[-8:]})
    unexplained = [d for d in duplicates if not d["explained_by"]]

    rate_check = check_rate(client, rate_endpoint, records[rate_endpoint],
                            int(rate.split("/")[0]), burst, started)

    missing: list[dict[str, Any]] = []
    if not_final or never_received:
        queued = queued_ids(client)
        for event_id in (lost + never_received + unfinished)[:25]:
            endpoint_id = events[event_id]
            seen = [(round(float(r["at"]) - started, 2), r["status"])
                    for r in records[endpoint_id] if r["webhook_id"] == event_id]
            missing.append({
                "event_id": event_id, "endpoint": endpoint_id,
                "done_marker": event_id in done, "requests": seen,
                "scheduled": bool(client.hexists(META_KEY, f"{endpoint_id}/{event_id}")),
                "on_a_queue_or_unacked": event_id in queued,
                "log": log_index.get(event_id, [])[-8:]})

    ok = (not lost and not never_received and not unfinished and not unexplained
          and rate_check["windows_over_unexplained"] == 0)
    return {
        "ok": ok,
        "events": len(events),
        "events_by_endpoint": dict(Counter(events.values())),
        "delivered": len(done),
        "dead_lettered": dict(sorted(reasons.items())),
        "lost": len(lost) + len(never_received),
        "lost_ids": lost,
        "unfinished": len(unfinished),
        "unfinished_ids": unfinished,
        "marked_done_never_received": never_received,
        "received_2xx_but_dead_lettered": received_but_dead,
        "delivered_but_also_dead_lettered": sorted(done & dead),
        "requests": {ep: dict(sorted(c.items())) for ep, c in statuses.items()},
        "late_answers": late,
        "duplicates": {"total": len(duplicates), "explained": len(duplicates) - len(unexplained),
                       "unexplained": len(unexplained),
                       "most_copies": max((int(d["received"]) for d in duplicates), default=0),
                       "details": duplicates},
        "rate": rate_check,
        "faults": [asdict(f) | {"at": round(f.at, 2)} for f in relative],
        "missing": missing,
    }


def table(summary: dict[str, Any]) -> str:
    """The summary as a two-column markdown table, then the failure details if any."""
    duplicates, rate = summary["duplicates"], summary["rate"]
    redelivery = summary.get("redelivery", {})
    dead = ", ".join(f"{reason} {n}" for reason, n in summary["dead_lettered"].items()) or "none"
    faults = "; ".join(
        f"{f['kind']}{' ' + f['target'] if f['target'] else ''} +{f['at']:.1f}s"
        + (f" (back +{f['until']:.1f}s)" if f.get("until") is not None else "")
        for f in summary["faults"])
    causes = ", ".join(f"{cause} {n}" for cause, n in Counter(
        " ".join(d["explained_by"].split()[:2 if d["explained_by"].startswith("redis") else 1])
        for d in duplicates["details"] if d["explained_by"]).items())
    split = ", ".join(f"{k} {v}" for k, v in summary["events_by_endpoint"].items())
    rows = [
        ("events", f"{summary['events']} ({split})"),
        ("delivered", summary["delivered"]),
        ("dead-lettered", f"{sum(summary['dead_lettered'].values())} ({dead})"),
        ("lost (held nowhere: not queued, unacknowledged, scheduled, done or dead)",
         summary["lost"]),
        ("not final at the timeout (still held somewhere)", summary["unfinished"]),
        ("duplicates (2xx received twice)",
         f"{duplicates['total']}: {duplicates['explained']} explained ({causes or 'none'}), "
         f"{duplicates['unexplained']} unexplained; most copies of one event "
         f"{duplicates['most_copies']}"),
        ("requests by answer", "; ".join(f"{ep}: " + ", ".join(f"{k} {v}" for k, v in c.items())
                                         for ep, c in summary["requests"].items())),
        (f"busiest 1 s window ({rate['endpoint']})",
         f"{rate['busiest_1s_window']} requests at the receiver (+{rate['busiest_at']}s), "
         f"{rate['busiest_1s_window_sent']} as sent by the workers; budget {rate['limit']} + "
         f"burst {rate['burst']} = {rate['budget_per_1s']}"),
        ("1 s windows over budget at the receiver",
         f"{rate['windows_over_budget']}, of which {rate['windows_over_unexplained']} were "
         "also sent within 1 s (the others were compressed in transit)"),
        ("faults injected", faults),
        ("killed workers' messages back after (visibility timeout 20 s)",
         f"oldest unacknowledged message seen: {redelivery.get('oldest_unacked_seconds', 0)} s; "
         f"kombu's unacked_mutex held by one owner up to "
         f"{redelivery.get('restore_mutex_held_seconds', 0)} s"),
        ("workers", f"{len(summary.get('workers', []))} started; exited by themselves: "
                    + (", ".join(w["name"] for w in summary.get("workers", [])
                                 if w["state"].startswith("exited")) or "none")),
        ("duration", f"{summary.get('duration', 0):.0f} s"),
        ("verdict", "PASS" if summary["ok"] else "FAIL"),
    ]
    lines = ["| measure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines.append("")
    if summary["received_2xx_but_dead_lettered"]:
        lines.append(f"Note: {len(summary['received_2xx_but_dead_lettered'])} events answered "
                     f"2xx but dead-lettered: {summary['received_2xx_but_dead_lettered'][:20]}")
    if summary["delivered_but_also_dead_lettered"]:
        lines.append(f"Note: {len(summary['delivered_but_also_dead_lettered'])} delivered events "
                     "also have a dead letter (a replay would find them done): "
                     f"{summary['delivered_but_also_dead_lettered'][:20]}")
    if summary["lost"]:
        lines.append(f"\nMISSING event ids ({summary['lost']}): "
                     + " ".join(summary["lost_ids"] + summary["marked_done_never_received"]))
    if summary["unfinished"]:
        lines.append(f"\nNOT FINAL event ids ({summary['unfinished']}): "
                     + " ".join(summary["unfinished_ids"]))
    if summary["missing"]:
        lines += [f"  {json.dumps(m)}" for m in summary["missing"]]
    for dup in duplicates["details"]:
        if not dup["explained_by"]:
            lines.append(f"UNEXPLAINED duplicate {dup['event_id']} ({dup['endpoint']}) received "
                         f"at {dup['at']}; log: {dup['log']}")
    return "\n".join(lines)
