"""The rate budget, checked where the receiver sees it and explained where Hookline sent it.

The limiter (GCRA in Redis) bounds *admissions*: at most rate x 1 s + burst in any second.
The receiver timestamps *arrivals*, which come a variable moment later (worker threads and the
receiver process share two busy cores), so a burst admitted over 1.1 s can arrive within 1 s.
Each 1 s window at the receiver over rate + burst is therefore looked up in Hookline's own
attempt history (``hookline:{ep}:history:<event>``: when each attempt ended and its latency,
hence when it was sent): if the same requests left the workers over a second or more, the
window was compressed after Hookline let them go (explained); if they left within one second,
the limiter let too many through (unexplained: a failure).
"""

from __future__ import annotations

import bisect
from typing import Any

import redis

from hookline.store.history import AttemptHistory

#: Seconds a send time may lie after the arrival it is matched to (same host, same clock).
CLOCK_SLACK = 0.01


def busiest_window(times: list[float], width: float = 1.0) -> tuple[int, float]:
    """(most requests in any window [t, t + width) starting at a request, that window's t)."""
    times = sorted(times)
    most, start, most_at = 0, 0, 0.0
    for end, at in enumerate(times):
        while at - times[start] >= width:
            start += 1
        if end - start + 1 > most:
            most, most_at = end - start + 1, times[start]
    return most, most_at


def send_times(client: redis.Redis, endpoint_id: str, event_ids: list[str]
               ) -> dict[str, list[float]]:
    """event id -> sorted send times of its attempts (attempt end minus its latency)."""
    found = AttemptHistory(client).attempts_of(endpoint_id, event_ids)
    return {event_id: sorted(a.at - a.latency for a in attempts)
            for event_id, attempts in found.items()}


def sent_at(sends: list[float], arrival: float) -> float | None:
    """The latest send of the event not after ``arrival``: the request that arrived then."""
    index = bisect.bisect_right(sends, arrival + CLOCK_SLACK)
    return sends[index - 1] if index else None


def check_rate(client: redis.Redis, endpoint_id: str, records: list[dict[str, Any]],
               limit: int, burst: int, started: float) -> dict[str, Any]:
    """The steady endpoint's busiest windows at the receiver and at the senders, and every
    receiver window over budget with whether the senders spread it over >= 1 s."""
    budget = limit + burst
    arrivals = sorted((float(r["at"]), r["webhook_id"]) for r in records)
    sends = send_times(client, endpoint_id, sorted({w for _, w in arrivals}))
    matched = [sent_at(sends.get(w, []), at) for at, w in arrivals]
    all_sends = [s for times in sends.values() for s in times]
    over, unexplained = 0, 0
    examples: list[dict[str, Any]] = []
    end = 0
    for start, (at, _) in enumerate(arrivals):
        while end < len(arrivals) and arrivals[end][0] - at < 1.0:
            end += 1
        if end - start <= budget:
            continue
        over += 1
        window = [s if s is not None else arrivals[n][0]
                  for n, s in enumerate(matched[start:end], start)]
        spread = max(window) - min(window)
        unexplained += spread < 1.0
        if len(examples) < 10:
            examples.append({"at": round(at - started, 3), "requests": end - start,
                             "sent_over_seconds": round(spread, 3),
                             "explained": spread >= 1.0})
    busiest, busiest_at = busiest_window([at for at, _ in arrivals])
    sent_busiest, sent_busiest_at = busiest_window(all_sends)
    return {
        "endpoint": endpoint_id, "limit": f"{limit}/s", "burst": burst, "budget_per_1s": budget,
        "busiest_1s_window": busiest, "busiest_at": round(busiest_at - started, 2),
        "busiest_1s_window_sent": sent_busiest,
        "busiest_sent_at": round(sent_busiest_at - started, 2),
        "windows_over_budget": over, "windows_over_unexplained": unexplained,
        "over_budget_examples": examples,
        "requests_without_history": sum(s is None for s in matched),
    }
