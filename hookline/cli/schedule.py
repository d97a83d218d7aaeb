"""``hookline schedule`` and ``hookline releaser``: the durable retry schedule
(``hookline.store.schedule``).

Retries wait in Redis, scored by their due time, until a releaser moves them onto the retry
queue. Due times are Redis server time: "due in 12s" is measured against Redis's clock, not
this machine's.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from dataclasses import asdict
from types import FrameType
from typing import Any, Protocol

import click

from hookline.cli.output import echo_json, echo_table, format_age, format_time, shorten
from hookline.core.config import settings
from hookline.core.logs import configure_json_logging
from hookline.core.messages import RETRY_QUEUE
from hookline.delivery.releaser import Releaser
from hookline.service.actor import cli_actor
from hookline.service.schedule import list_retries, schedule_stats
from hookline.store.schedule import ScheduledRetry, ScheduleStats

#: Seconds ``hookline releaser`` waits, after a signal, for its release loop to finish.
STOP_TIMEOUT = 5.0
#: Endpoints listed by name under "scheduled retries" in ``hookline stats``; the rest are summed.
TOP_ENDPOINTS = 10


def describe_due(due: float, now: float) -> str:
    """``due in 12s`` or ``due 3s ago``."""
    if due > now:
        return f"due in {format_age(due - now)}"
    return f"due {format_age(now - due)} ago"


def describe_lag(lag: float) -> str:
    """``releaser behind by 2.1s`` when the earliest retry is overdue, else ``releaser on
    time``."""
    if lag <= 0:
        return "releaser on time"
    if lag < 0.1:
        return f"releaser behind by {lag * 1000:.0f}ms"
    if lag < 60:
        return f"releaser behind by {lag:.1f}s"
    return f"releaser behind by {format_age(lag)}"


def schedule_json(found: ScheduleStats) -> dict[str, Any]:
    """``stats --json``'s "schedule": times in Unix seconds (Redis time), lag in seconds."""
    return {
        "total": found.total,
        "by_endpoint": dict(sorted(found.by_endpoint.items())),
        "oldest_due": found.oldest_due,
        "lag": round(found.lag, 3),
    }


def top_endpoints(by_endpoint: dict[str, int], top: int = TOP_ENDPOINTS
                  ) -> tuple[list[tuple[str, int]], int, int]:
    """The ``top`` endpoints with the most retries (ties by id), then how many endpoints and
    retries are left out."""
    ranked = sorted(by_endpoint.items(), key=lambda item: (-item[1], item[0]))
    rest = ranked[top:]
    return ranked[:top], len(rest), sum(count for _, count in rest)


def schedule_rows(found: ScheduleStats, now: float) -> list[tuple[str, Any]]:
    """``hookline stats`` lines on the schedule: totals, busiest endpoints, oldest due, lag
    (``now``: Redis time)."""
    shown, hidden, hidden_count = top_endpoints(found.by_endpoint)
    rows: list[tuple[str, Any]] = [
        ("scheduled retries", found.total),
        *((f"  {endpoint_id}", count) for endpoint_id, count in shown),
    ]
    if hidden:
        rows.append((f"  ({hidden} more endpoint(s))", hidden_count))
    if found.oldest_due is None:
        oldest = "none scheduled"
    elif found.lag > 0:  # measured in the same Redis round trip as oldest_due
        oldest = describe_due(found.oldest_due, found.oldest_due + found.lag)
    else:
        oldest = describe_due(found.oldest_due, now)
    rows += [("oldest retry", oldest), ("release", describe_lag(found.lag))]
    return rows


# -- schedule list --------------------------------------------------------------------------


def retry_json(retry: ScheduledRetry) -> dict[str, Any]:
    return asdict(retry)


def _due_cell(retry: ScheduledRetry, now: float) -> str | None:
    # A retry claimed by a releaser that pushes to a separate broker has left the due set.
    return "being released" if retry.due <= 0 else format_time(retry.due, now=now)


@click.group()
def schedule() -> None:
    """Inspect the retries waiting in the durable retry schedule."""


@schedule.command("list")
@click.option("--endpoint", "endpoint_id", metavar="ID", help="Only retries of this endpoint.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="Show at most N retries, the soonest due first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (payloads included).")
def schedule_list(endpoint_id: str | None, limit: int, as_json: bool) -> None:
    """List scheduled retries, the soonest due first (times are Redis time).

    Reads every scheduled retry (of ENDPOINT with --endpoint) to sort them: slow when
    hundreds of thousands are scheduled.
    """
    listed = list_retries(cli_actor(), endpoint=endpoint_id, limit=limit)
    more, retries = listed.more, listed.retries
    if as_json:
        echo_json([retry_json(retry) for retry in retries])
        return
    if not retries:
        click.echo("no scheduled retries" + (f" for endpoint {endpoint_id}" if endpoint_id
                                             else ""))
        return
    now = listed.now
    echo_table(
        ["id", "due", "attempts", "last status", "last error"],
        [
            (retry.id, _due_cell(retry, now), retry.attempts, retry.last_status,
             shorten(retry.last_error) or None)
            for retry in retries
        ],
    )
    if more:
        click.echo(f"(showing the {limit} soonest due: raise --limit or give --endpoint)",
                   err=True)


# -- releaser -------------------------------------------------------------------------------


def configure_logging() -> None:
    """Releaser warnings (Redis unreachable) on stderr, as text or JSON like the workers'."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if settings().log_format == "json":
        configure_json_logging()


class Loop(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...


def serve(running: Loop, started: str, *, name: str = "releaser") -> None:
    """Run ``running`` in a thread until SIGINT or SIGTERM stops it (or it fails: then raise
    its exception); print ``started`` once the signal handlers are in place.

    The release loop runs in its own thread so that the handler, which sets the releaser's
    stop flag from the main thread, never waits for a lock that thread holds; and so that a
    loop stuck in a Redis call cannot hold the exit back beyond ``STOP_TIMEOUT``.
    """
    failures: list[BaseException] = []

    def work() -> None:
        try:
            running.run()
        except BaseException as exc:  # re-raised in the main thread below
            failures.append(exc)

    signalled: list[float] = []
    previous: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signalled.append(time.monotonic())
        running.stop()
        for number, handler in previous.items():  # a second signal stops the hard way
            signal.signal(number, handler)

    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, on_signal)
    thread = threading.Thread(target=work, name=f"hookline-{name}", daemon=True)
    thread.start()
    click.echo(started)
    try:
        while thread.is_alive():
            thread.join(0.2)
            if signalled and time.monotonic() - signalled[0] > STOP_TIMEOUT:
                # Stuck in a call: leaving it is safe (a release is atomic; a relay's rows
                # stay in the outbox until removed, and go again under the same event id).
                click.echo(f"warning: the {name} did not stop within {STOP_TIMEOUT:g}s",
                           err=True)
                break
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if failures:
        raise failures[0]


@click.command()
def releaser() -> None:
    """Release due retries onto the retry queue until SIGINT (Ctrl-C) or SIGTERM.

    Every worker already runs a releaser unless HOOKLINE_RELEASER=off: run this command in
    that case (in a dedicated container, say), or beside the workers' own. Several
    releasers are safe together: each release is one atomic Redis script, so a retry is
    neither released twice nor lost.
    """
    configure_logging()
    waiting = schedule_stats(cli_actor()).total  # an unreachable Redis fails here, in one line
    serve(Releaser(queue=RETRY_QUEUE),
          started=f"releaser started: releasing due retries onto {RETRY_QUEUE} "
                  f"({waiting} scheduled); stop with Ctrl-C or SIGTERM")
    click.echo("releaser stopped")
