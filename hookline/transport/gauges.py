"""Prometheus ``/metrics``: the gauges read from Redis when scraped (queue depths, scheduled
retries, dead letters, breakers, ordered endpoints' lines), and the engine's counters
(``hookline.core.metrics``).

Two servers, each serving what it alone knows:

* every worker serves its own counters and histograms on ``HOOKLINE_METRICS_PORT``
  (:func:`start_server` with ``engine=True``), through :class:`EngineCollector`, which leaves
  out the series of endpoints removed since and the ``*_created`` samples;
* one exporter, ``hookline metrics``, serves the gauges (:class:`RedisStateCollector`): they
  describe state every worker shares, so one process reads them instead of every worker
  repeating the same values.

Both listen on ``HOOKLINE_METRICS_ADDRESS`` (default 127.0.0.1). With the prefork pool the
deliveries happen in child processes: set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory
of the worker's own and the server adds up every child's values.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from hookline.core import metrics
from hookline.core.config import Settings, settings
from hookline.core.metrics import BREAKER_STATES, QUEUES
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import ordered_ids, registered_ids
from hookline.store.ordering import OrderLines
from hookline.store.schedule import RetrySchedule
from hookline.transport.rabbitmq import BrokerUnavailable, RabbitBroker

log = logging.getLogger("hookline.metrics")


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
                self._broker = broker_client_for(config, self._redis)
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
        endpoint_ids = registered_ids(client)
        # The schedule and the dead-letter queue read shard by shard (a Redis Cluster's
        # slots); TIME on its own: a cluster pipeline cannot route a keyless command.
        scheduled = RetrySchedule(client).stats()
        dead_letters = DeadLetterQueue(client).count()
        pipe = client.pipeline(transaction=False)
        for endpoint_id in endpoint_ids:
            pipe.hmget(keys.breaker_key(endpoint_id), "state", "blocked_until", "paused_at",
                       "inflight")
        breakers = pipe.execute() if endpoint_ids else []
        now_ms = store.redis_time(client) * 1000
        lengths = queue_lengths(broker)
        ordered = OrderLines(client).census(ordered_ids(client))

        yield _gauge("hookline_queue_depth", "Messages waiting in a Celery queue: hookline "
                     "(first deliveries) or hookline.retry (released retries).", "queue",
                     zip(QUEUES, lengths or (), strict=bool(lengths)))
        yield _gauge("hookline_scheduled_retries",
                     "Retries waiting in the durable retry schedule.", None,
                     [("", scheduled.total)])
        yield _gauge("hookline_scheduled_retries_by_endpoint",
                     "Retries waiting in the durable retry schedule, by endpoint.", "endpoint",
                     sorted(scheduled.by_endpoint.items()))
        yield _gauge("hookline_scheduled_retry_lag_seconds",
                     "How long the earliest-due scheduled retry is past its due time (0 when "
                     "none is due): how far behind releasing retries is.", None,
                     [("", scheduled.lag)])
        due_family = GaugeMetricFamily(
            "hookline_oldest_scheduled_retry_due_timestamp_seconds",
            "Unix time (Redis clock) the earliest-due scheduled retry is due; absent when "
            "none is scheduled.")
        if scheduled.oldest_due is not None:
            due_family.add_metric([], scheduled.oldest_due)
        yield due_family
        yield _gauge("hookline_dead_letters", "Events in the dead-letter queue.", None,
                     [("", dead_letters)])
        yield _gauge("hookline_breaker_state",
                     "Circuit breaker of each endpoint: 0 closed, 1 half-open, 2 open.",
                     "endpoint", ((endpoint_id, BREAKER_STATES.get(state or "closed", 0))
                                  for endpoint_id, (state, _, _, _) in zip(endpoint_ids, breakers,
                                                                        strict=True)))
        yield _gauge("hookline_endpoint_paused",
                     "1 while an endpoint is paused ('hookline endpoint pause'), else 0.",
                     "endpoint", ((endpoint_id, 1 if paused else 0)
                                  for endpoint_id, (_, _, paused, _) in zip(endpoint_ids, breakers,
                                                                         strict=True)))
        yield _gauge("hookline_endpoint_blocked_seconds",
                     "Seconds left of the Retry-After block of each endpoint (0: none).",
                     "endpoint", ((endpoint_id, max(0.0, (float(until or 0) - now_ms) / 1000))
                                  for endpoint_id, (_, until, _, _) in zip(endpoint_ids, breakers,
                                                                        strict=True)))
        yield _gauge("hookline_endpoint_in_flight",
                     "Attempts in flight to each endpoint across all workers (its fair share "
                     "and its --max-in-flight cap are counted in these).", "endpoint",
                     ((endpoint_id, int(inflight or 0))
                      for endpoint_id, (_, _, _, inflight) in zip(endpoint_ids, breakers,
                                                                  strict=True)))
        yield _gauge("hookline_ordered_keys",
                     "Ordering keys of each ordered endpoint with a delivery out (its head on "
                     "a queue, in flight, in the retry schedule, or dead-lettered and blocking "
                     "its key).", "endpoint",
                     ((counts.endpoint_id, counts.keys_out) for counts in ordered))
        yield _gauge("hookline_ordered_waiting",
                     "Deliveries of each ordered endpoint waiting in its keys' lines behind "
                     "their heads (they hold no worker slot).", "endpoint",
                     ((counts.endpoint_id, counts.waiting) for counts in ordered))
        if not isinstance(broker, RabbitBroker):
            yield from _liveness_gauges(broker)


def _liveness_gauges(broker: Any) -> Iterator[Metric]:
    """The worker registry on a Redis broker (hookline/transport/liveness.py)."""
    pipe = broker.pipeline(transaction=False)
    pipe.zcard(keys.WORKERS_LIVE_KEY).hmget(keys.WORKERS_CLOCK_KEY, "declared", "restored")
    live, (declared, restored) = pipe.execute()
    yield _gauge("hookline_worker_processes", "Worker processes proving they are alive "
                 "(a heartbeat within HOOKLINE_LIVENESS_WINDOW).", None, [("", int(live))])
    declared_family = CounterMetricFamily(
        "hookline_worker_processes_declared_dead", "Worker processes declared dead (their "
        "heartbeats stopped) since the registry began.")
    declared_family.add_metric([], float(declared or 0))
    yield declared_family
    restored_family = CounterMetricFamily(
        "hookline_messages_restored", "Messages of dead worker processes put back on their "
        "queues for live ones, since the registry began.")
    restored_family.add_metric([], float(restored or 0))
    yield restored_family


def broker_client_for(config: Settings, state: Any) -> Any:
    """What the queue depths are read from: Hookline's Redis client ``state`` when the broker
    is that Redis, a client for a Redis broker elsewhere, or a :class:`RabbitBroker`."""
    if config.broker_amqp:
        return RabbitBroker()
    if config.broker_is_state:
        return state
    return store.redis_for(config.broker_url, decode_responses=False,
                           **store.bounded_options())


def queue_lengths(broker: Any) -> list[int] | None:
    """Messages waiting in each of ``QUEUES``: LLEN on a Redis broker, a passive declare on
    RabbitMQ. None when RabbitMQ does not answer: the depths are left out of the scrape
    (logged), the gauges read from Redis are still given."""
    if isinstance(broker, RabbitBroker):
        try:
            found = broker.depths(QUEUES)
        except BrokerUnavailable as exc:
            log.warning("metrics.broker_unavailable error=%s", exc)
            return None
        return [found[queue] for queue in QUEUES]
    depths = broker.pipeline(transaction=False)
    for queue in QUEUES:
        depths.llen(queue)
    return [int(length) for length in depths.execute()]


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


class EngineCollector(Collector):
    """This worker's counters and histograms (``source``: the process's registry, or the
    prefork children's files), as served: the ``*_created`` samples left out, and the
    series of endpoints no longer registered dropped (one SMEMBERS per scrape; when Redis
    does not answer, every series is served as it is)."""

    def __init__(self, source: Any, redis_client: Any = None) -> None:
        self._source = source
        self._redis = redis_client

    def describe(self) -> list[Metric]:
        return []

    def _registered(self) -> frozenset[str] | None:
        try:
            client = self._redis if self._redis is not None else store.client()
            return frozenset(registered_ids(client))
        except redis.RedisError:
            return None

    def collect(self) -> Iterator[Metric]:
        registered = self._registered()
        if registered is not None:
            metrics.endpoint_labels.retain(registered)
        for family in self._source.collect():
            created = f"{family.name}_created"
            kept = [sample for sample in family.samples
                    if sample.name != created and _served(sample, registered)]
            served = Metric(family.name, family.documentation, family.type, family.unit)
            served.samples = kept
            yield served


def _served(sample: Sample, registered: frozenset[str] | None) -> bool:
    endpoint_id = sample.labels.get("endpoint")
    return (endpoint_id is None or registered is None
            or endpoint_id in (metrics.UNKNOWN, metrics.OTHER) or endpoint_id in registered)


def registry(*, engine: bool = True, gauges: bool = False,
             collectors: Sequence[Collector] = ()) -> CollectorRegistry:
    """What a metrics server serves: with ``engine`` this process's counters and histograms
    (or every pool process's, in multiprocess mode), with ``gauges`` the Redis gauges, and
    ``collectors`` (the outbox's gauges, from a layer above)."""
    served = CollectorRegistry()
    if gauges:
        served.register(RedisStateCollector())
    for collector in collectors:
        served.register(collector)
    if engine and multiprocess_dir():
        served.register(EngineCollector(MultiProcessCollector(None)))
        ProcessCollector(registry=served)
    elif engine:
        served.register(EngineCollector(REGISTRY))
    return served


def start_server(port: int, *, engine: bool = True, gauges: bool = False,
                 addr: str | None = None, collectors: Sequence[Collector] = ()) -> Any:
    """Serve ``/metrics`` on ``addr`` (default ``HOOKLINE_METRICS_ADDRESS``) and ``port``
    from a daemon thread; returns the server (call its ``shutdown()`` to stop). Raises
    OSError when the port is taken or the address is not this host's."""
    address = settings().metrics_address if addr is None else addr
    server, _thread = start_http_server(port, addr=address,
                                        registry=registry(engine=engine, gauges=gauges,
                                                          collectors=collectors))
    return server
