"""``hookline dlq``: inspect, replay and purge dead letters (``hookline.store.deadletter``).

Replay and purge act on a selection (entry ids, ``--endpoint``, ``--reason``, ``--since``,
``--until``, ``--min-attempts``, ``--max-attempts``) and refuse to run with none unless ``--all``
says so; ``--dry-run`` shows what a selection holds without touching it. A large replay is
spread in time through the retry schedule (``--rate``); ``trim`` applies the retention.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from datetime import datetime
from typing import Any

import click

from hookline.cli.output import (
    echo_fields,
    echo_json,
    echo_table,
    format_age,
    format_time,
    printable,
    readable_json,
    shorten,
)
from hookline.core.config import settings
from hookline.core.event import recorded_id, shown
from hookline.core.policy import PolicyError, parse_rate
from hookline.delivery.replay import (
    DEFAULT_REPLAY_RATE,
    THROTTLE_ABOVE,
    invalid_entries,
    replay_entries,
    replay_interval,
    replay_spread,
)
from hookline.store.deadletter import (
    REASONS,
    DeadLetter,
    DeadLetterFilter,
    DeadLetterQueue,
    restore_spool,
)
from hookline.store.endpoints import EndpointRegistry

TIME_HELP = "Unix seconds, ISO 8601, or an age such as 15m, 2h, 1d (meaning that long ago)"
#: Seconds per unit of a relative age.
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
AGE_PATTERN = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
#: Entry ids per HDEL/ZREM when purging.
PURGE_BATCH = 500


def parse_time(text: str, *, now: float | None = None) -> float:
    """Unix seconds from ``1764435133``, ``2026-11-29T16:52:13+00:00`` (local time when no
    offset is given) or an age ``15m`` / ``2h`` / ``1d`` before ``now``."""
    text = text.strip()
    age = AGE_PATTERN.match(text)
    if age:
        return (time.time() if now is None else now) - float(age[1]) * AGE_UNITS[age[2]]
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use {TIME_HELP}") from None


def parse_age(text: str) -> float:
    """Seconds from ``30d``, ``12h``, ``90m`` or plain seconds."""
    text = text.strip()
    age = AGE_PATTERN.match(text)
    if age:
        return float(age[1]) * AGE_UNITS[age[2]]
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not an age: use seconds or e.g. 90m, 12h, 30d")
    return seconds


class AgeParam(click.ParamType):
    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_age(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class RateParam(click.ParamType):
    """``N/s``, ``N/m`` or ``N/h``, as an endpoint's ``--rate``."""

    name = "N/s|N/m|N/h"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> str:
        text = str(value).strip()
        try:
            parse_rate(text)
        except PolicyError as exc:
            self.fail(str(exc), param, ctx)
        return text


class TimeParam(click.ParamType):
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--endpoint``, ``--reason``, ``--since``, ``--until``, shared by every dlq verb."""
    options = [
        click.option("--endpoint", "endpoint_id", metavar="ID",
                     help="Only dead letters of this endpoint."),
        click.option("--reason", type=click.Choice(sorted(REASONS)),
                     help="Only dead letters with this reason."),
        click.option("--since", type=TimeParam(),
                     help=f"Dead-lettered at or after TIME: {TIME_HELP}."),
        click.option("--until", type=TimeParam(), help="Dead-lettered at or before TIME."),
        click.option("--min-attempts", type=click.IntRange(min=0), metavar="N",
                     help="Only dead letters with at least N attempts."),
        click.option("--max-attempts", type=click.IntRange(min=0), metavar="N",
                     help="Only dead letters with at most N attempts."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def lookup_id(given: str) -> str:
    """An entry id (``ENDPOINT/EVENT_ID``) or event id as a dead letter records it: an
    overlong event id is recorded by its start and length (``recorded_id``), so the id as it
    was sent still finds its entry."""
    endpoint_id, slash, event_id = given.partition("/")
    return f"{endpoint_id}/{recorded_id(event_id)}" if slash else recorded_id(given)


def build_filter(ids: Iterable[str] = (), *, endpoint_id: str | None = None,
                 reason: str | None = None, since: float | None = None,
                 until: float | None = None, min_attempts: int | None = None,
                 max_attempts: int | None = None) -> DeadLetterFilter:
    if since is not None and until is not None and since > until:
        raise click.UsageError("--since is later than --until: the range is empty")
    if min_attempts is not None and max_attempts is not None and min_attempts > max_attempts:
        raise click.UsageError("--min-attempts is above --max-attempts: the range is empty")
    return DeadLetterFilter(endpoint_id=endpoint_id, reason=reason, since=since, until=until,
                            ids=tuple(lookup_id(given) for given in ids),
                            min_attempts=min_attempts,
                            max_attempts=max_attempts)


def _narrowed(filters: dict[str, Any]) -> bool:
    return any(value is not None for value in filters.values())


def action_filter(ids: tuple[str, ...], select_all: bool, **filters: Any) -> DeadLetterFilter:
    """The selection for replay/purge: refuses "everything" unless ``--all`` asked for it."""
    narrowed = bool(ids) or _narrowed(filters)
    if select_all and narrowed:
        raise click.UsageError("--all selects every dead letter: give it without ids or filters")
    if not select_all and not narrowed:
        raise click.UsageError(
            "refusing to act on every dead letter: give entry ids, a filter (--endpoint, "
            "--reason, --since, --until, --min-attempts, --max-attempts) or --all"
        )
    return build_filter(ids, **filters)


def entry_json(entry: DeadLetter) -> dict[str, Any]:
    return {"id": entry.id, **asdict(entry)}


@click.group()
def dlq() -> None:
    """Inspect, replay and purge dead letters (events that will not be delivered)."""


@dlq.command("list")
@selection_options
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="Show at most N entries, oldest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (full entries).")
def dlq_list(limit: int, as_json: bool, **filters: Any) -> None:
    """List dead letters, oldest first."""
    entries = DeadLetterQueue().find(build_filter(**filters), limit=limit + 1)
    more, entries = len(entries) > limit, entries[:limit]
    if as_json:
        echo_json([entry_json(entry) for entry in entries])
        return
    if not entries:
        click.echo("no dead letters" + (" match" if _narrowed(filters) else ""))
        return
    echo_table(
        ["id", "reason", "attempts", "last status", "last error", "dead-lettered at"],
        [
            (entry.id, entry.reason, entry.attempts, entry.last_status,
             shorten(entry.last_error) or None, format_time(entry.dead_lettered_at))
            for entry in entries
        ],
    )
    if more:
        click.echo(f"(showing the oldest {limit}: raise --limit or narrow the filters)", err=True)


@dlq.command("show")
@click.argument("entry_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def dlq_show(entry_id: str, as_json: bool) -> None:
    """Show one dead letter, payload included. ID is ENDPOINT/EVENT_ID, as 'dlq list' shows."""
    entry = DeadLetterQueue().get(lookup_id(entry_id))
    if entry is None:
        raise click.ClickException(
            f"no dead letter {shown(entry_id)}: ids look like ENDPOINT/EVENT_ID "
            "(see 'hookline dlq list')"
        )
    if as_json:
        echo_json(entry_json(entry))
        return
    echo_fields([
        ("id", entry.id),
        ("endpoint", entry.endpoint_id),
        ("event id", entry.event_id),
        ("event type", entry.event_type),
        ("reason", f"{entry.reason} ({REASONS.get(entry.reason, 'unknown reason')})"),
        ("detail", entry.detail or None),
        ("attempts", entry.attempts),
        ("first attempt", format_time(entry.first_attempt_at)),
        ("last attempt", format_time(entry.last_attempt_at)),
        ("last status", entry.last_status),
        ("last error", entry.last_error or None),
        ("dead-lettered", format_time(entry.dead_lettered_at)),
    ])
    click.echo("payload:")
    click.echo(readable_json(entry.payload))


def _action_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--dry-run", is_flag=True,
                           help="Print how many entries (and which) would be affected.")(command)
    command = click.option("--all", "select_all", is_flag=True,
                           help="Select every dead letter (required when no id or filter is "
                                "given).")(command)
    command = selection_options(command)
    return click.argument("ids", nargs=-1, metavar="[ID]...")(command)


def _echo_selection(verb: str, entries: list[DeadLetter]) -> None:
    click.echo(f"would {verb} {len(entries)} dead letter(s)")
    for entry in entries:
        click.echo(printable(entry.id))


def _echo_missing(ids: tuple[str, ...], entries: list[DeadLetter]) -> None:
    found = {entry.id for entry in entries} | {entry.event_id for entry in entries}
    missing = [entry_id for entry_id in ids if lookup_id(entry_id) not in found]
    if missing:
        click.echo(f"not in the dead-letter queue: {', '.join(map(printable, missing))}", err=True)


def _warn_undeliverable(entries: list[DeadLetter]) -> None:
    """Replaying to a removed or disabled endpoint only dead-letters the events again."""
    registry = EndpointRegistry()
    for endpoint_id in sorted({entry.endpoint_id for entry in entries}):
        endpoint = registry.get(endpoint_id)
        if endpoint is None or not endpoint.enabled:
            state = "does not exist" if endpoint is None else "is disabled"
            click.echo(f"warning: endpoint {endpoint_id!r} {state}: its replayed events will "
                       "be dead-lettered again", err=True)


def _describe_pace(interval: float | None, spread: float) -> str:
    if interval is None:
        return "straight onto the delivery queue"
    per_second = 1 / interval
    pace = f"{per_second:g}/s" if per_second >= 1 else f"one every {interval:g}s"
    if spread <= 0:
        last = "all at once"
    elif spread < 60:
        last = f"the last in {round(spread, 1):g}s"
    else:
        last = f"the last in about {format_age(spread)}"
    return f"through the retry schedule, {pace} per endpoint ({last})"


@dlq.command("replay")
@_action_options
@click.option("--rate", type=RateParam(), metavar="N/s|N/m|N/h",
              help=f"Spread the replayed events: at most this many per endpoint (e.g. 10/s, "
                   f"600/m). Default: {DEFAULT_REPLAY_RATE} when more than {THROTTLE_ABOVE} "
                   f"dead letters are selected, else straight onto the queue.")
def dlq_replay(ids: tuple[str, ...], select_all: bool, dry_run: bool, rate: str | None,
               **filters: Any) -> None:
    """Send dead letters again (same event ids), then remove them from the queue.

    Give entry ids (ENDPOINT/EVENT_ID, or just EVENT_ID), filters, or --all. Replayed events
    pass the endpoint's gates (breaker, rate limit, Retry-After) like any delivery; a large
    replay is also spread in time through the retry schedule (--rate), so that a receiver
    that has just recovered is not flooded.
    """
    queue = DeadLetterQueue()
    entries = queue.find(action_filter(ids, select_all, **filters))
    interval = replay_interval(len(entries), rate)
    _echo_missing(ids, entries)
    if entries:
        _warn_undeliverable(entries)
    if dry_run:
        invalid = invalid_entries(entries)
        refused = {id(entry) for entry, _ in invalid}
        entries = [entry for entry in entries if id(entry) not in refused]
        click.echo(f"would replay {len(entries)} dead letter(s) "
                   f"{_describe_pace(interval, replay_spread(entries, interval))}")
        for entry in entries:
            click.echo(printable(entry.id))
        for entry, problem in invalid:
            click.echo(f"would not replay, not a valid event: {printable(entry.id)}: {problem}",
                       err=True)
        return
    outcome = replay_entries(queue, entries, interval=interval)
    click.echo(f"replayed {len(outcome.replayed)} dead letter(s) "
               f"{_describe_pace(interval, outcome.spread)}")
    for entry, problem in outcome.invalid:
        click.echo(f"not replayed, not a valid event (it stays in the queue): "
                   f"{printable(entry.id)}: {problem}", err=True)
    if outcome.kept:
        click.echo(f"warning: {len(outcome.kept)} dead letter(s) not replayed: the retry "
                   "schedule is at its cap (HOOKLINE_SCHEDULE_MAX, "
                   "HOOKLINE_SCHEDULE_MAX_PER_ENDPOINT); they stay in the queue", err=True)


@dlq.command("purge")
@_action_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def dlq_purge(ids: tuple[str, ...], select_all: bool, dry_run: bool, yes: bool,
              **filters: Any) -> None:
    """Delete dead letters for good. Give entry ids, filters, or --all."""
    queue = DeadLetterQueue()
    entries = queue.find(action_filter(ids, select_all, **filters))
    _echo_missing(ids, entries)
    if dry_run:
        _echo_selection("purge", entries)
        return
    if not entries:
        click.echo("no dead letters match: nothing purged")
        return
    if not yes:
        click.confirm(f"Delete {len(entries)} dead letter(s) for good?", abort=True)
    # Exactly the entries counted (and confirmed): not ones dead-lettered since, nor events
    # dead-lettered again meanwhile (their entries are new).
    removed = sum(
        queue.remove_unchanged({entry.id: entry.dead_lettered_at
                                for entry in entries[start : start + PURGE_BATCH]})
        for start in range(0, len(entries), PURGE_BATCH)
    )
    click.echo(f"purged {removed} dead letter(s)")


@dlq.command("trim")
@click.option("--older-than", type=AgeParam(),
              help="Trim dead letters older than AGE (seconds, or e.g. 12h, 7d) instead of "
                   "HOOKLINE_DLQ_RETENTION.")
@click.option("--dry-run", is_flag=True, help="Only count what would be trimmed.")
@click.option("--yes", "-y", is_flag=True,
              help="Do not ask for confirmation (asked only when --older-than is shorter "
                   "than the retention).")
def dlq_trim(older_than: float | None, dry_run: bool, yes: bool) -> None:
    """Delete dead letters older than the retention (HOOKLINE_DLQ_RETENTION, default 30 days).

    Workers do the same at most once a minute as they add dead letters; this command is for
    a retention just lowered, or a queue no worker writes to. Dead letters are never trimmed
    by size.
    """
    retention = settings().dlq_retention
    if older_than is None:
        if retention <= 0:
            raise click.UsageError("HOOKLINE_DLQ_RETENTION=0 keeps dead letters forever: "
                                   "give --older-than AGE to trim anyway")
        older_than = retention
    queue = DeadLetterQueue()
    before = time.time() - older_than
    count = queue.count_before(before)
    described = (f"older than {format_age(older_than)} (dead-lettered before "
                 f"{format_time(before)})")
    if dry_run or not count:
        click.echo(f"{'would trim' if dry_run else 'nothing to trim:'} {count} dead letter(s) "
                   f"{described}")
        return
    shorter = retention <= 0 or older_than < retention
    if shorter and not yes:
        click.confirm(f"Delete {count} dead letter(s) {described} for good?", abort=True)
    click.echo(f"trimmed {queue.trim(before)} dead letter(s) {described}")


@dlq.command("restore-spool")
def dlq_restore_spool() -> None:
    """Move dead letters spooled to disk while Redis was down into Redis."""
    path = settings().dlq_spool_path
    try:
        moved = restore_spool(DeadLetterQueue())
    except (OSError, ValueError, TypeError) as exc:
        raise click.ClickException(f"cannot restore the spool file {path}: {exc}") from None
    if moved:
        click.echo(f"moved {moved} dead letter(s) from {path} into Redis")
    else:
        click.echo(f"no spooled dead letters at {path}: nothing to restore")
