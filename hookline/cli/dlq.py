"""``hookline dlq``: inspect, replay and purge dead letters, through the service layer
(``hookline.service.dead_letters``), which holds every rule; this module parses and prints.

Replay and purge act on a selection (entry ids, ``--endpoint``, ``--reason``, ``--status``,
``--since``, ``--until``, ``--min-attempts``, ``--max-attempts``) and refuse to run with none
unless ``--all`` says so; ``--dry-run`` shows what a selection holds without touching it. A
large replay is spread in time through the retry schedule (``--rate``); ``trim`` applies the
retention; ``reindex`` builds the per-endpoint and per-status indexes of entries older than
them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
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
from hookline.core.event import shown
from hookline.core.policy import PolicyError, parse_rate
from hookline.core.times import TIME_HELP, parse_age, parse_time
from hookline.delivery.replay import DEFAULT_REPLAY_RATE, THROTTLE_ABOVE
from hookline.service import dead_letters
from hookline.service.actor import NotFound, cli_actor
from hookline.service.dead_letters import (
    DeadLetterQuery,
    InvalidQuery,
    lookup_id,
    require_selection,
)
from hookline.store.dead_letter_queue import REASONS, DeadLetter, DeadLetterQueue

__all__ = ["dlq", "lookup_id", "parse_age", "parse_time"]


class ParsedParam(click.ParamType):
    """A value ``parse`` reads (Unix seconds, or seconds of age); its ValueError is click's
    one-line error."""

    def __init__(self, name: str, parse: Callable[[str], float]) -> None:
        self.name, self.parse = name, parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        if isinstance(value, float):
            return value
        try:
            return self.parse(str(value))
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


#: A time as ``--since`` and ``--until`` take it, and an age as ``--older-than`` does.
TIME, AGE = ParsedParam("TIME", parse_time), ParsedParam("AGE", parse_age)


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--endpoint``, ``--reason``, ``--status``, ``--since``, ``--until`` and the attempt
    bounds, shared by every dlq verb."""
    options = [
        click.option("--endpoint", "endpoint_id", metavar="ID",
                     help="Only dead letters of this endpoint."),
        click.option("--reason", type=click.Choice(sorted(REASONS)),
                     help="Only dead letters with this reason."),
        click.option("--status", type=click.IntRange(min=0, max=599), metavar="CODE",
                     help="Only dead letters whose last attempt got this HTTP status (0: no "
                          "response)."),
        click.option("--since", type=TIME,
                     help=f"Dead-lettered at or after TIME: {TIME_HELP}."),
        click.option("--until", type=TIME, help="Dead-lettered at or before TIME."),
        click.option("--min-attempts", type=click.IntRange(min=0), metavar="N",
                     help="Only dead letters with at least N attempts."),
        click.option("--max-attempts", type=click.IntRange(min=0), metavar="N",
                     help="Only dead letters with at most N attempts."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def flag(name: str) -> str:
    """A query parameter as this command spells it: ``min_attempts`` -> ``--min-attempts``."""
    return "--" + name.replace("_", "-")


def build_query(ids: Iterable[str] = (), *, endpoint_id: str | None = None,
                reason: str | None = None, status: int | None = None,
                since: float | None = None, until: float | None = None,
                min_attempts: int | None = None,
                max_attempts: int | None = None) -> DeadLetterQuery:
    query = DeadLetterQuery(endpoint=endpoint_id, reason=reason, status=status, since=since,
                            until=until, min_attempts=min_attempts, max_attempts=max_attempts,
                            ids=tuple(lookup_id(given) for given in ids))
    try:
        return query.checked(spell=flag)
    except InvalidQuery as exc:
        raise click.UsageError(str(exc)) from None


def _narrowed(filters: dict[str, Any]) -> bool:
    return any(value is not None for value in filters.values())


def action_query(ids: tuple[str, ...], select_all: bool, **filters: Any) -> DeadLetterQuery:
    """The selection for replay/purge: refuses "everything" unless ``--all`` asked for it."""
    query = build_query(ids, **filters)
    try:
        return require_selection(query, select_all, spell=flag, all_flag="--all")
    except InvalidQuery as exc:
        raise click.UsageError(str(exc)) from None


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
    entries = dead_letters.find(cli_actor(), build_query(**filters), limit=limit + 1)
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
    try:
        entry = dead_letters.get(cli_actor(), lookup_id(entry_id))
    except NotFound:
        raise click.ClickException(
            f"no dead letter {shown(entry_id)}: ids look like ENDPOINT/EVENT_ID "
            "(see 'hookline dlq list')"
        ) from None
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


def _warn_undeliverable(plan: dead_letters.ReplayPlan) -> None:
    """Replaying to a removed or disabled endpoint only dead-letters the events again."""
    for endpoint_id, state in plan.undeliverable:
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
    actor = cli_actor()
    plan = dead_letters.plan_replay(actor, action_query(ids, select_all, **filters), rate=rate)
    _echo_missing(ids, plan.entries)
    _warn_undeliverable(plan)
    if dry_run:
        click.echo(f"would replay {len(plan.valid)} dead letter(s) "
                   f"{_describe_pace(plan.interval, plan.spread)}")
        for entry in plan.valid:
            click.echo(printable(entry.id))
        for entry, problem in plan.invalid:
            click.echo(f"would not replay, not a valid event: {printable(entry.id)}: {problem}",
                       err=True)
        return
    outcome = dead_letters.replay(actor, plan)
    click.echo(f"replayed {len(outcome.replayed)} dead letter(s) "
               f"{_describe_pace(plan.interval, outcome.spread)}")
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
    actor = cli_actor()
    entries = dead_letters.find(actor, action_query(ids, select_all, **filters))
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
    removed = dead_letters.purge(actor, entries)
    click.echo(f"purged {removed} dead letter(s)")


@dlq.command("trim")
@click.option("--older-than", type=AGE,
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
    click.echo(f"trimmed {dead_letters.trim(cli_actor(), before)} dead letter(s) {described}")


@dlq.command("restore-spool")
def dlq_restore_spool() -> None:
    """Move dead letters spooled to disk while Redis was down into Redis."""
    path = settings().dlq_spool_path
    try:
        moved = dead_letters.restore_spool(cli_actor())
    except (OSError, ValueError, TypeError) as exc:
        raise click.ClickException(f"cannot restore the spool file {path}: {exc}") from None
    if moved:
        click.echo(f"moved {moved} dead letter(s) from {path} into Redis")
    else:
        click.echo(f"no spooled dead letters at {path}: nothing to restore")


@dlq.command("reindex")
def dlq_reindex() -> None:
    """Index every dead letter by endpoint and by last status (after an upgrade from a version
    without those indexes, or once older workers stopped writing). The first filtered read
    does it too when it was never done; this is for doing it on purpose."""
    seen = dead_letters.reindex(cli_actor())
    click.echo(f"indexed {seen} dead letter(s) by endpoint and status")
