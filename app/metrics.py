"""Prometheus metrics: counters and histograms the delivery engine moves, and gauges read from
Redis when scraped.

The engine's metrics move only once the outcome they count is recorded in Redis (after settle,
the dead-letter write, the parked retry). The gauges (queue depths, scheduled retries, dead
letters, breakers) describe state every worker shares, so :class:`RedisStateCollector` reads
them at scrape time instead of each worker keeping its own copy.

Every worker serves both on ``HOOKLINE_METRICS_PORT`` (:func:`start_server`, from
``app/celery.py``); ``hookline metrics`` serves the gauges alone. With the prefork pool the
deliveries happen in child processes: set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory
of the worker's own and the server adds up every child's values (prometheus-client's
multiprocess mode). With the default threads pool it is not needed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from app import store
from app.config import settings
from app.deadletter import DLQ_INDEX_KEY
from app.schedule import COUNTS_KEY, DUE_KEY

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


class RedisStateCollector(Collector):
    """Gauges read from Redis at each scrape: one pipeline to Hookline's Redis, one to the
    broker's. When Redis does not answer, only ``hookline_redis_up 0`` is given."""

    def __init__(self, redis_client: Any = None, broker_client: Any = None) -> None:
        self._redis = redis_client
        self._broker = broker_client
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        return []  # read at scrape time: nothing to check for clashes up front

    def _clients(self) -> tuple[Any, Any]:
        with self._lock:
            if self._redis is None:
                self._redis = store.client()
            if self._broker is None:
                config = settings()
                self._broker = (self._redis if config.broker_url == config.redis_url else
                                redis.Redis.from_url(config.broker_url, socket_timeout=5,
                                                     socket_connect_timeout=5))
            return self._redis, self._broker

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("hookline_redis_up",
                               "1 if the last scrape could read Redis (state and broker).")
        try:
            gauges = list(self._read())
        except redis.RedisError as exc:
            log.warning("metrics.redis_unavailable error=%s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from gauges

    def _read(self) -> Iterator[Metric]:
        client, broker = self._clients()
        endpoint_ids = sorted(client.smembers(store.ENDPOINT_INDEX))
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.zcard(DUE_KEY)
        pipe.zrange(DUE_KEY, 0, 0, withscores=True)
        pipe.hgetall(COUNTS_KEY)
        pipe.zcard(DLQ_INDEX_KEY)
        for endpoint_id in endpoint_ids:
            pipe.hmget(store.breaker_key(endpoint_id), "state", "blocked_until")
        (seconds, micros), total, head, counts, dead_letters, *breakers = pipe.execute()
        depths = broker.pipeline(transaction=False)
        for queue in QUEUES:
            depths.llen(queue)
        lengths = depths.execute()
        now_ms = seconds * 1000 + micros / 1000

        yield _gauge("hookline_queue_depth", "Messages waiting in a Celery queue: hookline "
                     "(first deliveries) or hookline.retry (released retries).", "queue",
                     zip(QUEUES, lengths, strict=True))
        yield _gauge("hookline_scheduled_retries",
                     "Retries waiting in the durable retry schedule.", None, [("", total)])
        yield _gauge("hookline_scheduled_retries_by_endpoint",
                     "Retries waiting in the durable retry schedule, by endpoint.", "endpoint",
                     sorted((ep, int(n)) for ep, n in counts.items() if int(n) > 0))
        oldest_due = head[0][1] if head else None
        yield _gauge("hookline_scheduled_retry_lag_seconds",
                     "How long the earliest-due scheduled retry is past its due time (0 when "
                     "none is due): how far behind releasing retries is.", None,
                     [("", max(0.0, (now_ms - oldest_due) / 1000) if oldest_due else 0.0)])
        due_family = GaugeMetricFamily(
            "hookline_oldest_scheduled_retry_due_timestamp_seconds",
            "Unix time (Redis clock) the earliest-due scheduled retry is due; absent when "
            "none is scheduled.")
        if oldest_due is not None:
            due_family.add_metric([], oldest_due / 1000)
        yield due_family
        yield _gauge("hookline_dead_letters", "Events in the dead-letter queue.", None,
                     [("", dead_letters)])
        yield _gauge("hookline_breaker_state",
                     "Circuit breaker of each endpoint: 0 closed, 1 half-open, 2 open.",
                     "endpoint", ((endpoint_id, BREAKER_STATES.get(state or "closed", 0))
                                  for endpoint_id, (state, _) in zip(endpoint_ids, breakers,
                                                                     strict=True)))
        yield _gauge("hookline_endpoint_blocked_seconds",
                     "Seconds left of the Retry-After block of each endpoint (0: none).",
                     "endpoint", ((endpoint_id, max(0.0, (float(until or 0) - now_ms) / 1000))
                                  for endpoint_id, (_, until) in zip(endpoint_ids, breakers,
                                                                     strict=True)))


def _gauge(name: str, documentation: str, label: str | None,
           samples: Any) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label] if label else [])
    for value, sample in samples:
        family.add_metric([value] if label else [], float(sample))
    return family


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when set: metrics are then shared through files there."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def clear_multiprocess_dir() -> None:
    """Remove the files an earlier run of this worker left in ``PROMETHEUS_MULTIPROC_DIR``
    (prometheus-client's advice: wipe it before start-up). One directory per worker."""
    directory = multiprocess_dir()
    if directory is None:
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink(missing_ok=True)


def registry(*, engine: bool = True) -> CollectorRegistry:
    """What a metrics server serves: the Redis gauges, and with ``engine`` this process's
    counters and histograms (or every pool process's, in multiprocess mode)."""
    served = CollectorRegistry()
    served.register(RedisStateCollector())
    if engine and multiprocess_dir():
        MultiProcessCollector(served)
        ProcessCollector(registry=served)
    elif engine:
        served.register(REGISTRY)
    return served


def start_server(port: int, *, engine: bool = True, addr: str = "0.0.0.0") -> Any:
    """Serve ``/metrics`` on ``port`` from a daemon thread; returns the server (call its
    ``shutdown()`` to stop). Raises OSError when the port is taken."""
    server, _thread = start_http_server(port, addr=addr, registry=registry(engine=engine))
    return server
