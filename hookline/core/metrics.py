"""Prometheus metric definitions: the counters and histograms the delivery engine moves.

They move only once the outcome they count is recorded in Redis (after settle, the dead-letter
write, the parked retry). The gauges read from Redis at scrape time, and the servers, are in
``hookline/transport/gauges.py``. With the prefork pool the deliveries happen in child processes:
set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory of the worker's own and the server adds up
every child's values (prometheus-client's multiprocess mode); the default threads pool needs
none of that.

**A bounded ``endpoint`` label.** Task messages name their endpoint, and anyone who can publish
one can make up an id: an id is never a label value until the engine has seen the endpoint
registered. :class:`EndpointLabels` gives the label value: the endpoint's id for a registered
endpoint, ``_unknown`` for one that is not (made-up, removed, malformed), and ``_other`` past
``HOOKLINE_METRICS_MAX_ENDPOINTS`` endpoints. The worker's server drops the series of
endpoints removed since (``EndpointLabels.retain``). Histograms carry no endpoint label at all:
per endpoint there are counters only (docs/operations/metrics.md, "Series budget, per
worker").
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Histogram

from hookline.core.config import settings

log = logging.getLogger("hookline.metrics")

#: Attempts run from a few milliseconds to the connect timeout plus twice the read timeout.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)
#: Delivery lag runs from one attempt to the whole retry window (a day or more).
LAG_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0,
               21600.0, 43200.0, 86400.0, 172800.0)
#: The breaker states as ``hookline_breaker_state`` gives them.
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
QUEUES = ("hookline", "hookline.retry")
#: The label value of endpoints that are not registered (made-up ids, removed endpoints).
UNKNOWN = "_unknown"
#: The label value of registered endpoints past ``HOOKLINE_METRICS_MAX_ENDPOINTS``.
OTHER = "_other"
#: Final outcomes ``hookline_deliveries_total`` counts.
FINAL_OUTCOMES = ("delivered", "dead_lettered")

DELIVERIES = Counter(
    "hookline_deliveries",
    "Events finished, by endpoint and final outcome: delivered, or dead_lettered (reason: the "
    "dead-letter reason). Each event is counted once when it ends (a replayed dead letter "
    "again when the replay ends); retries, deferrals and duplicates have counters of their own.",
    ["endpoint", "outcome", "reason"],
)
RETRIES = Counter(
    "hookline_retries_scheduled",
    "Failed attempts whose next attempt was parked in the retry schedule, by endpoint.",
    ["endpoint"],
)
DUPLICATES = Counter(
    "hookline_duplicates",
    "Deliveries of an event already delivered: nothing was sent, by endpoint.",
    ["endpoint"],
)
ATTEMPT_DURATION = Histogram(
    "hookline_attempt_duration_seconds",
    "Duration of HTTP attempts (all endpoints), from sending the request to the end of the "
    "(capped) body.",
    buckets=LATENCY_BUCKETS,
)
ATTEMPT_SECONDS = Counter(
    "hookline_endpoint_attempt_seconds",
    "Seconds spent in HTTP attempts, by endpoint (divided by hookline_responses_total: the "
    "endpoint's mean attempt duration).",
    ["endpoint"],
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
    "reason: breaker_open, breaker_probe, blocked (Retry-After), rate_limited, in_flight, "
    "secrets_unreadable.",
    ["endpoint", "reason"],
)
DELIVERY_LAG = Histogram(
    "hookline_delivery_lag_seconds",
    "Seconds from an event's publish (enqueue, or its replay) to the end of its successful "
    "attempt (all endpoints): the wait in the queue, deferrals and retries included. An event "
    "published without Hookline's publisher (no enqueued_at) counts from its first attempt.",
    buckets=LAG_BUCKETS,
)
#: The metrics with an ``endpoint`` label (and their label names, in order), whose series
#: :meth:`EndpointLabels.retain` drops.
BY_ENDPOINT: tuple[tuple[Any, tuple[str, ...]], ...] = (
    (DELIVERIES, ("endpoint", "outcome", "reason")), (RETRIES, ("endpoint",)),
    (DUPLICATES, ("endpoint",)), (ATTEMPT_SECONDS, ("endpoint",)),
    (RESPONSES, ("endpoint", "status_class")), (DEFERRALS, ("endpoint", "reason")),
)


class EndpointLabels:
    """The ``endpoint`` label value of each endpoint id: at most ``limit`` ids, each one seen
    registered; ``_unknown`` and ``_other`` for the rest. Thread-safe; pure (the caller says
    whether an endpoint is registered, and passes the registered set to :meth:`retain`)."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._labelled: set[str] = set()
        #: Registered endpoints as of the last :meth:`retain` (None: not known yet).
        self._registered: frozenset[str] | None = None
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return settings().metrics_max_endpoints if self._limit is None else self._limit

    def label(self, endpoint_id: str, registered: bool | None = None) -> str:
        """The label value of ``endpoint_id``. ``registered``: True when the caller knows the
        endpoint exists (the gate admitted or held it), False when it knows it does not,
        None when it cannot tell (the id then needs to be labelled already, or registered as
        of the last :meth:`retain`)."""
        with self._lock:
            if registered is False:
                if endpoint_id in self._labelled:
                    self._forget(endpoint_id)
                return UNKNOWN
            if endpoint_id in self._labelled:
                return endpoint_id
            if registered is None and (self._registered is None
                                       or endpoint_id not in self._registered):
                return UNKNOWN
            if len(self._labelled) >= self.limit:
                return OTHER
            self._labelled.add(endpoint_id)
            return endpoint_id

    def labelled(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._labelled)

    def retain(self, registered: Iterable[str]) -> list[str]:
        """Forget (and drop the series of) every labelled endpoint not in ``registered``;
        returns the ids forgotten."""
        keep = frozenset(registered)
        with self._lock:
            self._registered = keep
            gone = sorted(self._labelled - keep)
            for endpoint_id in gone:
                self._forget(endpoint_id)
            return gone

    def _forget(self, endpoint_id: str) -> None:
        self._labelled.discard(endpoint_id)
        remove_series(endpoint_id)


def remove_series(endpoint_id: str) -> None:
    """Drop every series of ``endpoint_id`` from this process's metrics. (prometheus-client
    cannot remove a series in multiprocess mode: there the server leaves out the series of
    endpoints no longer registered, see ``hookline.transport.gauges``.)"""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    for metric, names in BY_ENDPOINT:
        position = names.index("endpoint")
        values = {tuple(sample.labels[name] for name in names)
                  for family in metric.collect() for sample in family.samples
                  if sample.labels.get("endpoint") == endpoint_id}
        for labelvalues in values:
            if labelvalues[position] == endpoint_id:
                metric.remove(*labelvalues)


#: This process's endpoint labels.
endpoint_labels = EndpointLabels()


def status_class(status: int | None) -> str:
    """``2xx`` ... ``5xx``, or ``none`` when no response arrived."""
    if status is None or not 100 <= status <= 599:
        return "none"
    return f"{status // 100}xx"


def count_outcome(endpoint_id: str, outcome: str, reason: str = "", *,
                  registered: bool | None = None) -> None:
    """One event finished: ``delivered`` or ``dead_lettered`` (with its reason)."""
    if outcome not in FINAL_OUTCOMES:
        raise ValueError(f"not a final outcome: {outcome!r}")
    DELIVERIES.labels(endpoint_labels.label(endpoint_id, registered), outcome, reason).inc()


def count_retry(endpoint_id: str) -> None:
    """A failed attempt's next attempt was parked (the attempt reached the endpoint)."""
    RETRIES.labels(endpoint_labels.label(endpoint_id, True)).inc()


def count_duplicate(endpoint_id: str) -> None:
    """An event already delivered came back: nothing was sent."""
    DUPLICATES.labels(endpoint_labels.label(endpoint_id)).inc()


def observe_attempt(endpoint_id: str, status: int | None, latency: float) -> None:
    """One settled HTTP attempt (the endpoint is registered: the gate admitted it)."""
    label = endpoint_labels.label(endpoint_id, True)
    ATTEMPT_DURATION.observe(latency)
    ATTEMPT_SECONDS.labels(label).inc(max(0.0, latency))
    RESPONSES.labels(label, status_class(status)).inc()


def count_deferral(endpoint_id: str, reason: str) -> None:
    """An event held back by the gate or the consumer (the endpoint is registered: only a
    registered endpoint has a breaker, a block or a rate limit)."""
    DEFERRALS.labels(endpoint_labels.label(endpoint_id, True), reason).inc()


def observe_lag(seconds: float) -> None:
    DELIVERY_LAG.observe(max(0.0, seconds))
