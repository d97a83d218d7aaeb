"""``hookline stats``: one screen (or JSON, or a watch) of what an operator asks first."""

from __future__ import annotations

import json
import time
from typing import Any

import click
import redis

from hookline.cli.breaker import breaker_json, describe, needs_attention, statuses
from hookline.cli.output import (
    echo_fields,
    echo_json,
    field_lines,
    format_time,
    redacted,
    redis_failure,
    watch_frames,
)
from hookline.cli.schedule import schedule_json, schedule_rows
from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.messages import DELIVERY_QUEUE, RETRY_QUEUE
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.connection import redis_for
from hookline.store.deadletter import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule
from hookline.transport.liveness import registry
from hookline.transport.rabbitmq import BrokerUnavailable, RabbitBroker


def queue_depths() -> dict[str, int]:
    """Messages waiting in each Celery queue, as the broker counts them: LLEN of a Redis
    broker's lists (which may be another Redis), a passive declare on RabbitMQ."""
    config = settings()
    if config.broker_amqp:
        try:
            return RabbitBroker().depths((DELIVERY_QUEUE, RETRY_QUEUE))
        except BrokerUnavailable as exc:
            raise click.ClickException(
                f"the broker at {redacted(config.broker_url)} (HOOKLINE_BROKER_URL): {exc}"
            ) from None
    variable = "REDIS_URL" if config.broker_is_state else "HOOKLINE_BROKER_URL"
    try:
        broker = redis_for(config.broker_url, decode_responses=False,
                           socket_connect_timeout=5, socket_timeout=10)
    except ValueError as exc:
        raise click.ClickException(f"{variable}: {exc}") from None
    try:
        pipe = broker.pipeline(transaction=False)
        for queue in (DELIVERY_QUEUE, RETRY_QUEUE):
            pipe.llen(queue)
        depths = pipe.execute()
    except redis.RedisError as exc:
        raise redis_failure(exc, config.broker_url, variable) from None
    finally:
        broker.close()
    return dict(zip((DELIVERY_QUEUE, RETRY_QUEUE), map(int, depths), strict=True))


#: Endpoints named under breakers and under throttling in ``hookline stats``: one screen.
STATS_LISTED = 10


def throttled_endpoints(endpoints: list[Endpoint]) -> list[dict[str, Any]]:
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
    broker = redis_for(config.broker_url, decode_responses=False, socket_connect_timeout=5,
                       socket_timeout=10)
    try:
        return registry(broker)
    except redis.RedisError as exc:
        raise redis_failure(exc, config.broker_url, "HOOKLINE_BROKER_URL") from None
    finally:
        broker.close()


def in_flight(endpoints: list[Endpoint]) -> list[dict[str, Any]]:
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


def _workers_rows(workers: dict[str, Any] | None) -> list[tuple[str, Any]]:
    if workers is None:
        return []
    live = workers["live"]
    slots = sum(process["slots"] for process in live)
    return [
        ("worker processes", f"{len(live)} live ({slots} slots), {workers['declared_dead']} "
                             f"declared dead so far, {workers['restored']} of their messages "
                             "restored" + (f", {workers['dead_restoring']} being restored"
                                           if workers["dead_restoring"] else "")),
        *_named([(f"  {process['host']}:{process['pid']}",
                  f"{process['slots']} slots, last heartbeat {process['beat_age']:g}s ago")
                 for process in live]),
    ]


def _named(rows: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    if len(rows) <= STATS_LISTED:
        return rows
    return [*rows[:STATS_LISTED], (f"  ({len(rows) - STATS_LISTED} more)", "")]


def stats_report() -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """What ``hookline stats --json`` prints, and the lines of the one-screen view."""
    endpoints = EndpointRegistry().list()
    enabled = sum(1 for item in endpoints if item.enabled)
    troubled = [status for status in statuses(item.id for item in endpoints)
                if needs_attention(status)]
    throttled = throttled_endpoints(endpoints)
    paused = sorted(item.id for item in endpoints if item.paused)
    retry_schedule = RetrySchedule()
    scheduled = retry_schedule.stats()
    dead_letters = DeadLetterQueue().stats()
    report: dict[str, Any] = {
        "at": round(time.time(), 3),
        "endpoints": {"total": len(endpoints), "enabled": enabled,
                      "disabled": len(endpoints) - enabled, "paused": len(paused)},
        "paused": paused,
        "queues": queue_depths(),
        "schedule": schedule_json(scheduled),
        "dead_letters": {"total": dead_letters.total, "by_reason": dead_letters.by_reason,
                         "oldest": dead_letters.oldest},
        "breakers": [breaker_json(status, cooldown=False) for status in troubled],
        "throttled": throttled,
        "in_flight": in_flight(endpoints),
        "workers": workers_report(),
    }
    oldest = format_time(dead_letters.oldest)
    rows: list[tuple[str, Any]] = [
        ("endpoints", f"{len(endpoints)} ({enabled} enabled, {len(endpoints) - enabled} "
                      f"disabled, {len(paused)} paused)"),
        *_named([(f"  {endpoint_id}", "paused") for endpoint_id in paused]),
        *((f"queue {name}", depth) for name, depth in report["queues"].items()),
        *schedule_rows(scheduled, retry_schedule),
        ("dead letters", f"{dead_letters.total}" + (f", oldest {oldest}" if oldest else "")),
        *((f"  {reason}", count) for reason, count in sorted(dead_letters.by_reason.items())),
        ("breakers", f"{len(troubled)} not closed or blocked" if troubled
                     else "all closed, none blocked"),
        *_named([(f"  {status.endpoint_id}", describe(status)) for status in troubled]),
        ("throttled", f"{len(throttled)} endpoint(s) waiting for rate slots" if throttled
                      else "none"),
        *_named([(f"  {item['endpoint_id']}", f"{item['rate']}, slots booked until "
                                              f"{format_time(item['booked_until'])}")
                 for item in throttled]),
        ("in flight", f"{sum(row['in_flight'] for row in report['in_flight'])} attempts, "
                      f"{sum(row['waiting'] for row in report['in_flight'])} waiting for a slot"),
        *_named([(f"  {row['endpoint_id']}", f"{row['in_flight']} in flight, {row['waiting']} "
                                             "waiting" + (f" (cap {row['max_in_flight']})"
                                                          if row["max_in_flight"] else ""))
                 for row in report["in_flight"]]),
        *_workers_rows(report["workers"]),
    ]
    return report, rows


def _stats_frame(as_json: bool, interval: float) -> str:
    """One refresh of ``stats --watch``; an unreachable Redis is shown, not fatal."""
    try:
        report, rows = stats_report()
    except (redis.RedisError, click.ClickException) as exc:
        problem = exc.format_message() if isinstance(exc, click.ClickException) else (
            redis_failure(exc, settings().redis_url, "REDIS_URL").format_message())
        if as_json:
            return json.dumps({"at": round(time.time(), 3), "error": problem}, sort_keys=True)
        return f"{time.strftime('%Y-%m-%d %H:%M:%S')}  Error: {problem} (retrying)"
    if as_json:
        return json.dumps(report, sort_keys=True, default=str)
    header = (f"hookline stats  {time.strftime('%Y-%m-%d %H:%M:%S')}  every {interval:g}s, "
              "Ctrl-C to stop")
    return "\n".join([header, "", *field_lines(rows)])


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (with --watch: one JSON object per line, per refresh).")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              metavar="SECONDS", help="Seconds between refreshes with --watch.")
@click.option("--iterations", type=click.IntRange(min=1), hidden=True,
              help="Stop --watch after N refreshes (for tests).")
def stats(as_json: bool, watch: bool, interval: float, iterations: int | None) -> None:
    """Queue depths, scheduled retries, dead letters by reason, attempts in flight, live
    worker processes, and endpoints with a breaker
    not closed, a Retry-After block or events waiting for rate slots: one screen."""
    if watch:
        watch_frames(lambda: _stats_frame(as_json, interval), interval=interval,
                     iterations=iterations, redraw=not as_json)
        return
    report, rows = stats_report()
    if as_json:
        echo_json(report)
        return
    echo_fields(rows)


