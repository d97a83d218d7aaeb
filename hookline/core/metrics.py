"""Prometheus metric definitions: the counters and histograms the delivery engine moves.

They move only once the outcome they count is recorded in Redis (after settle, the dead-letter
write, the parked retry). The gauges read from Redis at scrape time, and the server, are in
``hookline/gauges.py``. With the prefork pool the deliveries happen in child processes: set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory of the worker's own and the server adds up
every child's values (prometheus-client's multiprocess mode); the default threads pool needs
none of that.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram

log = logging.getLogger("hookline.metrics")

#: Attempts run from a few milliseconds to the connect timeout plus twice the read timeout.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)
#: Delivery lag runs from one attempt to the whole retry window (a day or more).
LAG_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0,
               21600.0, 43200.0, 86400.0, 172800.0)
#: The breaker states as ``hookline_breaker_state`` gives them.
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
QUEUES = ("hookline", "hookline.retry")

DELIVERIES = Counter(
    "hookline_deliveries",
    "Events finished or sent back to wait, by endpoint and outcome: delivered, retry_scheduled, "
    "dead_lettered (reason: the dead-letter reason) or duplicate (already delivered).",
    ["endpoint", "outcome", "reason"],
)
ATTEMPT_DURATION = Histogram(
    "hookline_attempt_duration_seconds",
    "Duration of HTTP attempts, from sending the request to the end of the (capped) body.",
    ["endpoint"], buckets=LATENCY_BUCKETS,
)
RESPONSES = Counter(
    "hookline_responses",
    "Attempts by endpoint and response status class: 2xx, 3xx, 4xx, 5xx, or none (no "
    "response: connect error, timeout, refused URL).",
    ["endpoint", "status_class"],
)
DEFERRALS = Counter(
    "hookline_deferrals",
    "Events held back before an attempt (not attempts: no retry is used), by endpoint and "
    "reason: breaker_open, breaker_probe, blocked (Retry-After), rate_limited, in_flight.",
    ["endpoint", "reason"],
)
DELIVERY_LAG = Histogram(
    "hookline_delivery_lag_seconds",
    "Time from an event's first attempt to its successful attempt, retries included; the "
    "wait in the hookline queue before the first attempt is not included.",
    ["endpoint"], buckets=LAG_BUCKETS,
)


def status_class(status: int | None) -> str:
    """``2xx`` ... ``5xx``, or ``none`` when no response arrived."""
    if status is None or not 100 <= status <= 599:
        return "none"
    return f"{status // 100}xx"


def count_outcome(endpoint_id: str, outcome: str, reason: str = "") -> None:
    """One event finished (delivered, dead_lettered, duplicate) or was parked to retry."""
    DELIVERIES.labels(endpoint_id, outcome, reason).inc()


def observe_attempt(endpoint_id: str, status: int | None, latency: float) -> None:
    """One settled HTTP attempt."""
    ATTEMPT_DURATION.labels(endpoint_id).observe(latency)
    RESPONSES.labels(endpoint_id, status_class(status)).inc()


def count_deferral(endpoint_id: str, reason: str) -> None:
    DEFERRALS.labels(endpoint_id, reason).inc()


def observe_lag(endpoint_id: str, seconds: float) -> None:
    DELIVERY_LAG.labels(endpoint_id).observe(max(0.0, seconds))
