"""``hookline stats``: one screen (or JSON, or a watch) of what an operator asks first."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

import click
import redis

from hookline.cli.breaker import breaker_json, describe
from hookline.cli.output import (
    echo_fields,
    echo_json,
    field_lines,
    format_age,
    format_time,
    redacted,
    redis_failure,
    watch_frames,
)
from hookline.cli.schedule import schedule_json, schedule_rows
from hookline.core.config import settings
from hookline.outbox.status import OutboxDepth
from hookline.service.actor import cli_actor
from hookline.service.ordering import OrderedCounts
from hookline.service.stats import BrokerUnreachable, StatsSnapshot, stats_snapshot
from hookline.transport.rabbitmq import BrokerUnavailable

#: Endpoints named under breakers and under throttling in ``hookline stats``: one screen.
STATS_LISTED = 10


def broker_failure(exc: BrokerUnreachable) -> click.ClickException:
    """The one line ``hookline stats`` ends with when the broker fails."""
    if isinstance(exc.cause, BrokerUnavailable):
        return click.ClickException(
            f"the broker at {redacted(exc.url)} (HOOKLINE_BROKER_URL): {exc.cause}")
    if isinstance(exc.cause, redis.RedisError):
        return redis_failure(exc.cause, exc.url, exc.variable)
    return click.ClickException(str(exc))


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
    try:
        snapshot = stats_snapshot(cli_actor())
    except BrokerUnreachable as exc:
        raise broker_failure(exc) from None
    return _report(snapshot), _rows(snapshot)


def _report(snapshot: StatsSnapshot) -> dict[str, Any]:
    endpoints, enabled, dead_letters = snapshot.endpoints, snapshot.enabled, snapshot.dead_letters
    assert dead_letters is not None  # the CLI's actor is not scoped
    return {
        "at": snapshot.at,
        "endpoints": {"total": len(endpoints), "enabled": enabled,
                      "disabled": len(endpoints) - enabled, "paused": len(snapshot.paused)},
        "paused": snapshot.paused,
        "queues": snapshot.queues,
        "schedule": schedule_json(snapshot.schedule),
        "dead_letters": {"total": dead_letters.total, "by_reason": dead_letters.by_reason,
                         "oldest": dead_letters.oldest},
        "breakers": [breaker_json(status, cooldown=False) for status in snapshot.troubled],
        "throttled": snapshot.throttled,
        "in_flight": snapshot.in_flight,
        "workers": snapshot.workers,
        "ordered": [counts.as_dict() for counts in snapshot.ordered],
        "outbox": None if snapshot.outbox is None else asdict(snapshot.outbox),
    }


def _blocked_text(counts: OrderedCounts) -> str:
    if counts.blocked_checked >= counts.keys_out:
        return f"{counts.blocked} blocked"
    return f"{counts.blocked} blocked among the first {counts.blocked_checked} keys"


def _ordered_rows(ordered: list[OrderedCounts]) -> list[tuple[str, Any]]:
    """The ordered endpoints' lines: the totals, then each endpoint, the most waiting first."""
    if not ordered:
        return [("ordered endpoints", "none")]
    busiest = sorted(ordered, key=lambda counts: (-counts.waiting, -counts.keys_out,
                                                  counts.endpoint_id))
    return [
        ("ordered endpoints", f"{len(ordered)}: {sum(c.keys_out for c in ordered)} keys with a "
                              f"delivery out, {sum(c.waiting for c in ordered)} waiting"),
        *_named([(f"  {counts.endpoint_id}", f"{counts.keys_out} keys out, {counts.waiting} "
                                             f"waiting, {_blocked_text(counts)} (policy "
                                             f"{counts.policy})")
                 for counts in busiest]),
    ]


def _rows(snapshot: StatsSnapshot) -> list[tuple[str, Any]]:
    endpoints, enabled, paused = snapshot.endpoints, snapshot.enabled, snapshot.paused
    dead_letters, troubled, throttled = snapshot.dead_letters, snapshot.troubled, snapshot.throttled
    assert dead_letters is not None and snapshot.queues is not None
    oldest = format_time(dead_letters.oldest)
    return [
        ("endpoints", f"{len(endpoints)} ({enabled} enabled, {len(endpoints) - enabled} "
                      f"disabled, {len(paused)} paused)"),
        *_named([(f"  {endpoint_id}", "paused") for endpoint_id in paused]),
        *((f"queue {name}", depth) for name, depth in snapshot.queues.items()),
        *schedule_rows(snapshot.schedule, snapshot.redis_now),
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
        ("in flight", f"{sum(row['in_flight'] for row in snapshot.in_flight)} attempts, "
                      f"{sum(row['waiting'] for row in snapshot.in_flight)} waiting for a slot"),
        *_named([(f"  {row['endpoint_id']}", f"{row['in_flight']} in flight, {row['waiting']} "
                                             "waiting" + (f" (cap {row['max_in_flight']})"
                                                          if row["max_in_flight"] else ""))
                 for row in snapshot.in_flight]),
        *_ordered_rows(snapshot.ordered),
        *_workers_rows(snapshot.workers),
        *_outbox_rows(snapshot.outbox),
    ]


def _outbox_rows(outbox: OutboxDepth | None) -> list[tuple[str, Any]]:
    """The transactional outbox (when it is on): rows waiting, and the oldest one's age."""
    if outbox is None:
        return []
    if outbox.waiting is None:
        return [("outbox", f"unreadable ({outbox.database}: {outbox.error})")]
    oldest = ("" if outbox.oldest_age is None else
              f", the oldest due {format_age(outbox.oldest_age)} ago")
    return [("outbox", f"{outbox.waiting} row(s) waiting{oldest} ({outbox.database})")]


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
    """Queue depths, scheduled retries, dead letters by reason, attempts in flight, ordered
    endpoints' keys out and deliveries waiting, live worker processes, and endpoints with a
    breaker not closed, a Retry-After block or events waiting for rate slots: one screen."""
    if watch:
        watch_frames(lambda: _stats_frame(as_json, interval), interval=interval,
                     iterations=iterations, redraw=not as_json)
        return
    report, rows = stats_report()
    if as_json:
        echo_json(report)
        return
    echo_fields(rows)


