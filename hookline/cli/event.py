"""``hookline event show``: the attempts of one event and what became of it
(``hookline.store.history``).

Attempts are kept for ``HOOKLINE_HISTORY_RETENTION`` after an event's latest attempt, the latest
``HOOKLINE_HISTORY_ATTEMPTS`` of them. Attempt times are the worker's clock, retry due times
Redis's.
"""

from __future__ import annotations

from typing import Any

import click

from hookline.cli.output import echo_fields, echo_json, echo_table, format_age, format_time, shorten
from hookline.core.config import settings
from hookline.core.event import shown
from hookline.service.actor import cli_actor
from hookline.service.events import PublishedOutcomes, find_event
from hookline.store.events import EventDelivery
from hookline.store.history import RecentAttempts


def _state(delivery: EventDelivery) -> str:
    if delivery.state == "dead_lettered" and delivery.dead_letter is not None:
        entry = delivery.dead_letter
        detail = f": {entry.detail}" if entry.detail else ""
        return (f"dead-lettered ({entry.reason}{detail}) "
                f"{format_time(entry.dead_lettered_at)}; see 'hookline dlq show {entry.id}'")
    if delivery.state == "scheduled":
        due = format_time(delivery.retry_due) if delivery.retry_due else "being released"
        return f"retry scheduled, due {due}"
    return {
        "delivered": "delivered",
        "in_flight": "an attempt is in flight",
        "pending": "no outcome recorded yet (waiting in a queue, or deferred)",
    }.get(delivery.state, delivery.state)


def _conflict(delivery: EventDelivery) -> str | None:
    entry = delivery.conflict
    if entry is None:
        return None
    return (f"a copy with another type or payload was dead-lettered (conflict) "
            f"{format_time(entry.dead_lettered_at)}; see 'hookline dlq show {entry.id}'")


def _echo_delivery(delivery: EventDelivery) -> None:
    fields: list[tuple[str, Any]] = [
        ("event", delivery.event_id),
        ("endpoint", delivery.endpoint_id),
        ("state", _state(delivery)),
        ("attempts kept", len(delivery.attempts)),
    ]
    if delivery.conflict is not None:
        fields.append(("conflict", _conflict(delivery)))
    echo_fields(fields)
    if not delivery.attempts:
        return
    click.echo()
    echo_table(
        ["attempt", "ended", "outcome", "status", "latency", "error", "response"],
        [
            (record.attempt, format_time(record.at), record.outcome, record.status,
             f"{record.latency * 1000:.0f}ms", record.error or None,
             shorten(record.response, 40) or None)
            for record in delivery.attempts
        ],
    )


@click.group()
def event() -> None:
    """Look up what happened to an event."""


@event.command("show")
@click.argument("event_id", metavar="EVENT_ID")
@click.option("--endpoint", "endpoint_id", metavar="ID",
              help="Only this endpoint's delivery of the event (without it, every endpoint's "
                   "keys are scanned for the event: slower on a large Redis).")
@click.option("--app", "app_id", metavar="APP",
              help="The application EVENT_ID was published to (without it, the published "
                   "events of every application are scanned for it).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def event_show(event_id: str, endpoint_id: str | None, app_id: str | None,
               as_json: bool) -> None:
    """Show each kept attempt of EVENT_ID (time, status, latency, error, the start of the
    response) and whether it was delivered, is scheduled for a retry or was dead-lettered.
    For an event published to an application ('hookline publish'), one line per receiver:
    its outcome, or pending."""
    found_event = find_event(cli_actor(), event_id, endpoint=endpoint_id, app=app_id)
    event_id = found_event.event_id  # an overlong id is recorded by its start and length
    if found_event.published:
        _show_published(found_event.published, as_json)
        return
    deliveries = found_event.deliveries
    if not deliveries:
        where = f" at endpoint {shown(endpoint_id)}" if endpoint_id else ""
        kept = format_age(settings().history_lifetime)
        raise click.ClickException(
            f"nothing recorded for event {shown(event_id)}{where}: no attempt in the last {kept} "
            "(HOOKLINE_HISTORY_RETENTION), no scheduled retry, no dead letter; it may still "
            "be waiting in the hookline queue")
    if as_json:
        report: dict[str, Any] = {"event_id": event_id,
                                  "deliveries": [found.as_dict() for found in deliveries]}
        echo_json(report)
        return
    for number, found in enumerate(deliveries):
        if number:
            click.echo()
        _echo_delivery(found)


def _show_published(published: list[PublishedOutcomes], as_json: bool) -> None:
    """Every receiver's outcome of a published event (an application's fan-out)."""
    reports = [(outcomes.record, outcomes.deliveries) for outcomes in published]
    if as_json:
        echo_json([{**record.public(), "deliveries": [
            {**found.as_dict(), "enqueued": number < record.cursor}
            for number, found in enumerate(deliveries)]} for record, deliveries in reports])
        return
    for index, (record, deliveries) in enumerate(reports):
        if index:
            click.echo()
        states = [found.state for found in deliveries]
        summary = ", ".join(f"{states.count(state)} {state.replace('_', ' ')}"
                            for state in dict.fromkeys(states)) or "no receivers"
        echo_fields([
            ("event", record.event_id),
            ("application", record.app_id),
            ("type", record.event_type),
            ("channels", ", ".join(record.channels) or None),
            ("published", format_time(record.published_at)),
            ("receivers", f"{len(record.receivers)} (fixed at publish)"),
            ("fan-out", "finished" if record.finished
             else f"{record.cursor} of {len(record.receivers)} deliveries enqueued"),
            ("outcomes", summary),
        ])
        if not deliveries:
            continue
        click.echo()
        echo_table(["endpoint", "state", "attempts", "last status"], [
            (found.endpoint_id,
             _state(found) if number < record.cursor or found.state != "pending"
             else "not enqueued yet (the fan-out is in progress)",
             len(found.attempts), found.attempts[-1].status if found.attempts else None)
            for number, found in enumerate(deliveries)])


def describe_recent(recent: RecentAttempts) -> str:
    """``97% delivered of the last 100 attempts (97 delivered, 3 failed)``: for ``endpoint
    show``."""
    if recent.success_rate is None:
        return "none recorded"
    counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(
        recent.counts().items(), key=lambda pair: (-pair[1], pair[0])))
    plural = "s" if recent.attempts != 1 else ""
    return (f"{recent.success_rate:.0%} delivered of the last {recent.attempts} "
            f"attempt{plural} ({counts})")


def describe_last_error(recent: RecentAttempts) -> str | None:
    """``HTTP 503, 2026-11-29 16:52:13 (5m ago), event evt-1``: for ``endpoint show``."""
    if not recent.last_error:
        return None
    return (f"{recent.last_error}, {format_time(recent.last_error_at)}, "
            f"event {recent.last_error_event}")
