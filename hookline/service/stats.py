"""What an operator asks first (the ``hookline stats`` screen's data) and deliveries and
outcomes over time, per minute.

Public API::

    stats_snapshot(actor) -> StatsSnapshot      # endpoints, queues, schedule, dead letters,
                                                # breakers, throttled, in flight, workers,
                                                # ordered endpoints' lines (counted)
    overview(actor) -> Overview                 # the console's: bounded figures and a page
                                                # of breakers needing attention (a sample)
    series(actor, *, minutes=60, now=None) -> list[MinuteOutcomes]   # oldest minute first
    queue_depths() -> dict[str, int]            # BrokerUnreachable when the broker fails
    class BrokerUnreachable(HooklineError)      # .variable, .url, .cause (a face words it)

The per-minute counts are the workers' (``hookline.worker.tallies``: each process adds its
outcome counts to ``hookline:stats:<minute>`` every ~10 s, one batched write, kept 48 h); the
current minute fills as they flush. A scoped actor (a tenant) gets its own endpoints' part of
the snapshot only: no queue depths, workers or dead-letter totals (other applications' load),
and no series (the counts are the whole deployment's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis

from hookline.core.config import settings
from hookline.core.errors import HooklineError
from hookline.core.messages import DELIVERY_QUEUE, RETRY_QUEUE
from hookline.outbox.status import OutboxDepth, outbox_depth
from hookline.service.actor import Actor
from hookline.service.endpoints import EndpointSummary, all_endpoints
from hookline.service.ordering import OrderedCounts, ordered_counts
from hookline.service.schedule import schedule_stats
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.connection import bounded_options, redis_for
from hookline.store.dead_letter_queue import DeadLetterQueue, DeadLetterStats
from hookline.store.gates import BreakerStatus, Gate
from hookline.store.schedule import ScheduleStats
from hookline.transport.liveness import registry
from hookline.transport.rabbitmq import BrokerUnavailable, RabbitBroker

#: The most minutes a series covers: the stats hashes live 48 hours.
MAX_MINUTES = 48 * 60
#: How many endpoints' breakers the overview reads: those with the most retries scheduled.
ATTENTION_SAMPLE = 200
#: The most breakers needing attention the overview lists.
ATTENTION_ROWS = 20


class BrokerUnreachable(HooklineError):
    """The broker (or its Redis) failed while its queues were counted. ``cause`` is what
    failed: the client's ``redis.RedisError``, RabbitMQ's ``BrokerUnavailable`` or the
    ``ValueError`` of a bad URL; ``variable`` the setting that names ``url``."""

    def __init__(self, message: str, *, variable: str, url: str, cause: Exception) -> None:
        super().__init__(message)
        self.variable = variable
        self.url = url
        self.cause = cause


@dataclass(frozen=True)
class StatsSnapshot:
    """One look at the deployment. ``queues``, ``dead_letters`` and ``workers`` are None
    for a scoped actor (``workers`` also on RabbitMQ, which tracks its consumers itself)."""

    at: float
    endpoints: list[EndpointSummary]
    queues: dict[str, int] | None
    schedule: ScheduleStats
    dead_letters: DeadLetterStats | None
    #: Breakers not closed or held back by a Retry-After.
    troubled: list[BreakerStatus]
    #: Rate-limited endpoints with events waiting for a rate slot.
    throttled: list[dict[str, Any]]
    #: Endpoints with attempts in flight or deliveries waiting for a slot, busiest first.
    in_flight: list[dict[str, Any]]
    workers: dict[str, Any] | None = None
    #: Redis time (Unix seconds) when the snapshot was taken: what "due in 12s" is against.
    redis_now: float = 0.0
    #: The ordered endpoints' lines, counted (``hookline.service.ordering.ordered_counts``).
    ordered: list[OrderedCounts] = field(default_factory=list)
    #: The transactional outbox's depth (None: off, or a scoped actor).
    outbox: OutboxDepth | None = None

    @property
    def paused(self) -> list[str]:
        return sorted(item.id for item in self.endpoints if item.paused)

    @property
    def enabled(self) -> int:
        return sum(1 for item in self.endpoints if item.enabled)


@dataclass(frozen=True)
class MinuteOutcomes:
    """One minute's outcome counts (``delivered``, ``dead_lettered``, ``retry_scheduled``,
    ``deferred``, ...) summed over every worker process; ``start`` in Unix seconds."""

    start: float
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Overview:
    """The console's overview: figures that cost the same at 10 or 10,000 endpoints, and a
    page of breakers needing attention among the ``sampled`` endpoints with the most retries
    scheduled. ``queues``, ``dead_letters`` and ``workers`` as in :class:`StatsSnapshot`."""

    at: float
    #: Endpoints registered (in scope): the index's size, no endpoint read.
    endpoints: int
    queues: dict[str, int] | None
    schedule: ScheduleStats
    dead_letters: DeadLetterStats | None
    workers: dict[str, Any] | None
    #: Breakers not closed or blocked among the sample, most retries first (at most a page).
    attention: list[BreakerStatus]
    #: How many endpoints' breakers were read for ``attention``.
    sampled: int
    redis_now: float = 0.0
    outbox: OutboxDepth | None = None


def needs_attention(status: BreakerStatus) -> bool:
    """Not closed, or held back by a Retry-After: what the stats screen lists."""
    return status.state != "closed" or status.blocked_until is not None


def queue_depths() -> dict[str, int]:
    """Messages waiting in each Celery queue, as the broker counts them: LLEN of a Redis
    broker's lists (which may be another Redis), a passive declare on RabbitMQ."""
    config = settings()
    if config.broker_amqp:
        try:
            return RabbitBroker().depths((DELIVERY_QUEUE, RETRY_QUEUE))
        except BrokerUnavailable as exc:
            raise BrokerUnreachable(str(exc), variable="HOOKLINE_BROKER_URL",
                                    url=config.broker_url, cause=exc) from None
    variable = "REDIS_URL" if config.broker_is_state else "HOOKLINE_BROKER_URL"
    try:
        broker = redis_for(config.broker_url, decode_responses=False, **bounded_options())
    except ValueError as exc:
        raise BrokerUnreachable(f"{variable}: {exc}", variable=variable,
                                url=config.broker_url, cause=exc) from None
    try:
        pipe = broker.pipeline(transaction=False)
        for queue in (DELIVERY_QUEUE, RETRY_QUEUE):
            pipe.llen(queue)
        depths = pipe.execute()
    except redis.RedisError as exc:
        raise BrokerUnreachable(str(exc), variable=variable, url=config.broker_url,
                                cause=exc) from None
    finally:
        broker.close()
    return dict(zip((DELIVERY_QUEUE, RETRY_QUEUE), map(int, depths), strict=True))


def throttled_endpoints(endpoints: list[EndpointSummary]) -> list[dict[str, Any]]:
    """Rate-limited endpoints with events waiting for a rate slot: ``booked_until`` is the
    latest slot booked (Unix seconds, Redis time)."""
    limited = [item for item in endpoints if item.rate]
    if not limited:
        return []
    pipe = store.client().pipeline(transaction=False)
    for item in limited:
        pipe.hget(keys.breaker_key(item.id), "book")  # the rate limiter shares the hash
    books = pipe.execute()
    now_ms = store.redis_time(store.client()) * 1000
    return [{"endpoint_id": item.id, "rate": item.rate, "booked_until": float(book) / 1000}
            for item, book in zip(limited, books, strict=True)
            if book and float(book) > now_ms]


def workers_report() -> dict[str, Any] | None:
    """The broker's registry of live worker processes (hookline/transport/liveness.py): None on
    RabbitMQ, which tracks its consumers itself."""
    config = settings()
    if config.broker_amqp:
        return None
    broker = redis_for(config.broker_url, decode_responses=False, **bounded_options())
    try:
        return registry(broker)
    except redis.RedisError as exc:
        raise BrokerUnreachable(str(exc), variable="HOOKLINE_BROKER_URL",
                                url=config.broker_url, cause=exc) from None
    finally:
        broker.close()


def in_flight(endpoints: list[EndpointSummary]) -> list[dict[str, Any]]:
    """Endpoints with attempts in flight or deliveries waiting for their share or cap, the
    busiest first."""
    if not endpoints:
        return []
    pipe = store.client().pipeline(transaction=False)
    waiting_here = settings().broker_is_state
    for item in endpoints:
        pipe.hget(keys.endpoint_key(item.id), "inflight")
        if waiting_here:
            pipe.llen(keys.fair_waiting_key(item.id))
    values = pipe.execute()
    step = 2 if waiting_here else 1
    rows = [{"endpoint_id": item.id, "in_flight": int(values[n * step] or 0),
             "waiting": int(values[n * step + 1]) if waiting_here else 0,
             "max_in_flight": item.max_in_flight}
            for n, item in enumerate(endpoints)]
    busy = [row for row in rows if row["in_flight"] or row["waiting"]]
    return sorted(busy, key=lambda row: (-row["in_flight"], -row["waiting"], row["endpoint_id"]))


def stats_snapshot(actor: Actor) -> StatsSnapshot:
    """What ``hookline stats`` shows (and the console's overview)."""
    endpoints = all_endpoints(actor)
    scoped = actor.app_scope is not None
    troubled = [status for status in Gate().breaker_statuses([item.id for item in endpoints])
                if needs_attention(status)]
    return StatsSnapshot(
        at=round(time.time(), 3),
        endpoints=endpoints,
        troubled=troubled,
        throttled=throttled_endpoints(endpoints),
        schedule=schedule_stats(actor),
        dead_letters=None if scoped else DeadLetterQueue().stats(),
        queues=None if scoped else queue_depths(),
        in_flight=in_flight(endpoints),
        workers=None if scoped else workers_report(),
        redis_now=store.redis_time(store.client()),
        ordered=ordered_counts(actor),
        outbox=None if scoped else outbox_depth(),
    )


def endpoint_count(actor: Actor) -> int:
    """Endpoints registered in scope, from the size of their index (SCARD, no endpoint read;
    an id indexed whose endpoint is being removed may count for a moment)."""
    client = store.client()
    if actor.app_scope is not None:
        return int(client.scard(keys.app_endpoints_key(actor.app_scope)))
    pipe = client.pipeline(transaction=False)
    for index in keys.endpoint_index_keys(settings().state_shards):
        pipe.scard(index)
    return sum(int(n) for n in pipe.execute())


def attention_sample(schedule: ScheduleStats, *, sample: int = ATTENTION_SAMPLE,
                     rows: int = ATTENTION_ROWS) -> tuple[list[BreakerStatus], int]:
    """Breakers needing attention among the ``sample`` endpoints with the most retries
    scheduled, and how many were read. An endpoint whose breaker is open or that a Retry-After
    holds back has its deliveries deferred into the schedule, so the endpoints in trouble
    *now* are the ones with retries waiting: their breakers are read in one round trip,
    whatever the number of endpoints. One in trouble with nothing to send is not in the
    sample; ``hookline stats`` and the endpoints list read every breaker."""
    ranked = sorted(schedule.by_endpoint.items(), key=lambda item: (-item[1], item[0]))
    ids = [endpoint_id for endpoint_id, _ in ranked[:sample]]
    troubled = [status for status in Gate().breaker_statuses(ids) if needs_attention(status)]
    return troubled[:rows], len(ids)


def overview(actor: Actor) -> Overview:
    """The console's overview: queues, schedule, dead letters, workers, the endpoint count
    and a page of breakers needing attention (:func:`attention_sample`); its cost does not
    grow with the number of endpoints (the schedule's per-endpoint counters aside, one hash)."""
    scoped = actor.app_scope is not None
    schedule = schedule_stats(actor)
    attention, sampled = attention_sample(schedule)
    return Overview(
        at=round(time.time(), 3),
        endpoints=endpoint_count(actor),
        queues=None if scoped else queue_depths(),
        schedule=schedule,
        dead_letters=None if scoped else DeadLetterQueue().stats(),
        workers=None if scoped else workers_report(),
        attention=attention,
        sampled=sampled,
        redis_now=store.redis_time(store.client()),
        outbox=None if scoped else outbox_depth(),
    )


def series(actor: Actor, *, minutes: int = 60, now: float | None = None
           ) -> list[MinuteOutcomes]:
    """The last ``minutes`` minutes' outcome counts (the current one included), oldest
    first; a minute no worker reported is empty. One pipelined read of ``minutes`` hashes."""
    if actor.app_scope is not None:
        return []
    minutes = max(1, min(int(minutes), MAX_MINUTES))
    current = int((time.time() if now is None else now) // 60)
    wanted = list(range(current - minutes + 1, current + 1))
    pipe = store.client().pipeline(transaction=False)
    for minute in wanted:
        pipe.hgetall(keys.stats_key(minute))
    return [MinuteOutcomes(start=minute * 60.0,
                           counts={str(name): int(count) for name, count in data.items()})
            for minute, data in zip(wanted, pipe.execute(), strict=True)]
