"""What a soak run proves, computed from what it recorded (bench/soak.py): pure functions over
the events, the receivers' records, the faults and the memory samples.

- **settled:** every event delivered (a 2xx at its receiver, or its done marker) or
  dead-lettered with a reason; none left waiting once the drain is over;
- **duplicates:** copies of an event a receiver accepted more than once, and whether every copy
  came under the event's own webhook-id with the event's own body;
- **recovery:** after each fault, seconds until the healthy endpoints' deliveries are back to
  90% of what they are offered, over a 5 s window;
- **slopes:** worker RSS and Redis memory after the warm-up, in % per hour of their mean.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

#: A fault is over once throughput is back to this share of the offered rate...
RECOVERED_SHARE = 0.9
#: ... over a window this long (seconds) ...
WINDOW = 5.0
#: ... within this long after the fault ended.
RECOVERY_TARGET = 30.0
#: Most memory growth after the warm-up, % of the mean per hour.
SLOPE_TARGET = 1.0


@dataclass
class Fault:
    kind: str
    at: float
    #: When the fault was over (a paused process resumed, a server back): recovery counts
    #: from here.
    until: float
    target: str = ""
    recovery: float | None = None
    #: The healthy endpoints' lowest 5 s delivery rate from the fault's start to its end (or
    #: the 5 s after an instant one), as a share of their offered rate.
    lowest: float | None = None


@dataclass
class Samples:
    """Memory over time: ``(unix seconds, bytes)`` per series (each worker by name, redis)."""

    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, name: str, at: float, value: float) -> None:
        self.series.setdefault(name, []).append((at, value))


def first_successes(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each webhook-id's first 2xx arrival time."""
    found: dict[str, float] = {}
    for line in records:
        if 200 <= int(line["status"]) < 300 and line["webhook_id"] not in found:
            found[line["webhook_id"]] = float(line["at"])
    return found


def duplicates(records: list[dict[str, Any]], events: set[str]) -> dict[str, Any]:
    """Copies accepted (2xx) more than once, and the copies whose webhook-id is no event of
    the run or whose body names another event (a duplicate under another id: a failure)."""
    accepted = Counter(line["webhook_id"] for line in records
                       if 200 <= int(line["status"]) < 300)
    foreign = [line for line in records
               if line["webhook_id"] not in events or line.get("body_id") != line["webhook_id"]]
    twice = {webhook_id: n for webhook_id, n in accepted.items() if n > 1}
    return {"events_accepted_twice": len(twice), "extra_copies": sum(n - 1 for n in twice.values()),
            "most_copies": max(accepted.values(), default=0),
            "under_another_id": len(foreign), "under_another_id_sample": foreign[:5]}


def recovery(fault_end: float, arrivals: list[float], offered_rate: float,
             horizon: float) -> float | None:
    """Seconds from ``fault_end`` to the end of the first ``WINDOW`` in which the sorted
    ``arrivals`` reach ``RECOVERED_SHARE`` of ``offered_rate``; None when none does before
    ``horizon`` (the end of the run)."""
    need = RECOVERED_SHARE * offered_rate * WINDOW
    start = fault_end
    while start + WINDOW <= horizon:
        count = _count_between(arrivals, start, start + WINDOW)
        if count >= need:
            return round(start + WINDOW - fault_end, 1)
        start += 1.0
    return None


def lowest_share(start: float, end: float, arrivals: list[float],
                 offered_rate: float) -> float:
    """The lowest ``WINDOW`` delivery rate of the sorted ``arrivals`` from ``start`` to
    ``end`` (at least one window), as a share of ``offered_rate``."""
    shares = []
    at = start
    while True:
        shares.append(_count_between(arrivals, at, at + WINDOW) / (offered_rate * WINDOW))
        at += 1.0
        if at + WINDOW > max(end, start + WINDOW):
            return round(min(shares), 2)


def _count_between(sorted_times: list[float], low: float, high: float) -> int:
    return bisect.bisect_left(sorted_times, high) - bisect.bisect_left(sorted_times, low)


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``points`` as % of their mean per hour; None with too few."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0 or mean_v == 0:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / spread
    return round(slope * 3600 / mean_v * 100, 3)


def slopes(samples: Samples, warmup: float, *, least_span: float) -> dict[str, Any]:
    """Each series' slope after its own warm-up (``warmup`` seconds from its first sample: a
    worker started mid-run to replace a killed one warms up then, and its warm-up is no
    leak), for the series that span at least ``least_span`` seconds there (a worker killed
    early says nothing of a leak)."""
    found: dict[str, Any] = {}
    for name, points in samples.series.items():
        kept = [(t, v) for t, v in points if points and t >= points[0][0] + warmup]
        span = kept[-1][0] - kept[0][0] if kept else 0.0
        if span >= least_span:
            found[name] = {"percent_per_hour": slope_per_hour(kept), "span_s": round(span),
                           "first_mb": round(kept[0][1] / 2**20, 1),
                           "last_mb": round(kept[-1][1] / 2**20, 1)}
    return found


def heap_slopes(heaps: dict[str, list[dict[str, Any]]], warmup: float, *,
                least_span: float) -> dict[str, Any]:
    """Per watched worker (bench.heapwatch), after its own warm-up (as :func:`slopes`): the
    slope of each of its heap's measures (% of the mean per hour), and the types whose count
    grew most."""
    found: dict[str, Any] = {}
    for name, rows in heaps.items():
        kept = [row for row in rows if row["t"] >= rows[0]["t"] + warmup]
        if not kept or kept[-1]["t"] - kept[0]["t"] < least_span:
            continue
        measures = [m for m in ("rss", "blocks", "malloc", "malloc_free", "objects", "traced")
                    if m in kept[0]]
        first, last = kept[0]["types"], kept[-1]["types"]
        grown = sorted(((last.get(t, 0) - first.get(t, 0), t) for t in set(first) | set(last)),
                       reverse=True)[:5]
        found[name] = {**{m: {"percent_per_hour": slope_per_hour([(r["t"], r[m]) for r in kept]),
                              "first": kept[0][m], "last": kept[-1][m]} for m in measures},
                       "types_grown": {t: n for n, t in grown if n > 0},
                       "traced_growth": next((r["traced_growth"] for r in reversed(kept)
                                              if "traced_growth" in r), None),
                       "span_s": round(kept[-1]["t"] - kept[0]["t"])}
    return found


def verdict(summary: dict[str, Any], *, gate_slopes: bool) -> dict[str, bool]:
    """Which of the soak's promises held."""
    checks = {
        "every event settled": summary["unsettled"] == 0,
        "dead letters have a reason": summary["dead_lettered_without_reason"] == 0,
        "duplicates only under their own webhook-id":
            summary["duplicates"]["under_another_id"] == 0,
        "throughput back within 30 s of each fault": all(
            f["recovery"] is not None and f["recovery"] <= RECOVERY_TARGET
            for f in summary["faults"]),
    }
    if gate_slopes:
        rates = [s["percent_per_hour"] for s in summary["memory"].values()
                 if s["percent_per_hour"] is not None]
        checks["memory slopes at most 1%/h after the warm-up"] = bool(rates) and all(
            r <= SLOPE_TARGET for r in rates)
    return checks


def table(summary: dict[str, Any]) -> str:
    lines = [f"soak {summary['minutes']:.0f} min at {summary['rate']:.0f} events/s over "
             f"{summary['endpoints']} endpoints ({summary['date']})",
             f"  events {summary['events']}: delivered {summary['delivered']} (accepted by the "
             f"receiver without a done marker: {summary.get('delivered_without_done_marker', 0)}"
             f"), dead-lettered "
             f"{summary['dead_lettered']} {summary['dead_letter_reasons']}, unsettled "
             f"{summary['unsettled']}",
             f"  duplicates: {summary['duplicates']['extra_copies']} extra copies of "
             f"{summary['duplicates']['events_accepted_twice']} events, "
             f"{summary['duplicates']['under_another_id']} under another id"]
    for fault in summary["faults"]:
        lines.append(f"  fault {fault['kind']:<15} at +{fault['at_s']:>6.0f}s lasting "
                     f"{fault['lasted_s']:>5.1f}s: lowest {fault['lowest']:.0%} of the "
                     f"offered rate, back in "
                     f"{fault['recovery'] if fault['recovery'] is not None else 'never'} s")
    for name, found in summary["memory"].items():
        lines.append(f"  memory {name:<10} {found['first_mb']} -> {found['last_mb']} MB over "
                     f"{found['span_s']} s: {found['percent_per_hour']} %/h")
    for name, heap in summary.get("heap", {}).items():
        lines.append(f"  heap {name:<12} " + ", ".join(
            f"{m} {heap[m]['percent_per_hour']} %/h" for m in
            ("rss", "blocks", "malloc", "malloc_free", "objects") if m in heap)
            + f"; grew most: {heap['types_grown']}")
    for event_id, keys in list(summary.get("unsettled_where", {}).items())[:5]:
        lines.append(f"  unsettled {event_id} held in: {', '.join(keys) or 'no key'}")
    for check, held in summary["checks"].items():
        lines.append(f"  [{'ok' if held else 'FAILED'}] {check}")
    return "\n".join(lines)


def fault_rows(faults: list[Fault], started: float) -> list[dict[str, Any]]:
    return [{**asdict(f), "at_s": round(f.at - started, 1),
             "lasted_s": round(f.until - f.at, 1)} for f in faults]
