"""``hookline outbox``: the transactional outbox's rows in the host's database
(``hookline.outbox``; docs/guides/outbox.md)."""

from __future__ import annotations

import time

import click

from hookline.cli.output import echo_json, format_age
from hookline.cli.schedule import configure_logging, serve
from hookline.core.config import settings
from hookline.outbox.relay import Outage, Relay, relay_from_settings


@click.group()
def outbox() -> None:
    """The transactional outbox: events written in the host's database, moved to the broker
    by a relay (every worker runs one when HOOKLINE_OUTBOX=on)."""


def _relay() -> Relay:
    return relay_from_settings(settings())


@outbox.command("relay")
@click.option("--once", is_flag=True,
              help="Move every row due now, then exit (a cron job, a test, a release step).")
def relay_command(once: bool) -> None:
    """Move committed rows to the broker until SIGINT (Ctrl-C) or SIGTERM.

    Every worker already runs a relay when HOOKLINE_OUTBOX=on; run this beside them, or in
    their place for a database the workers cannot reach. Several relays are safe together:
    a row is published by one of them (again only if one dies between its publish and its
    removal, and the event id makes that copy a duplicate delivered once). The database is
    HOOKLINE_OUTBOX_URL's, else the Django project's of DJANGO_SETTINGS_MODULE.
    """
    configure_logging()
    relay = _relay()
    try:
        waiting, _ = relay.depth()  # an unreachable database fails here, in one line
        if once:
            click.echo(f"moved {relay.drain()} row(s) of {waiting} waiting")
            return
    except Outage as outage:
        raise click.ClickException(f"the outbox at {relay.database.describe()}: the "
                                   f"{outage.side} is unavailable ({outage})") from None
    serve(relay, name="relay",
          started=f"relay started: moving outbox rows from {relay.database.describe()} to the "
                  f"broker ({waiting} waiting); stop with Ctrl-C or SIGTERM")
    click.echo("relay stopped")


@outbox.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(as_json: bool) -> None:
    """Rows waiting in the outbox, and the age of the oldest."""
    relay = _relay()
    try:
        waiting, oldest = relay.depth()
    except Outage as outage:
        raise click.ClickException(f"the outbox at {relay.database.describe()} cannot be read "
                                   f"({outage})") from None
    age = None if oldest is None else max(0.0, time.time() - oldest)
    if as_json:
        echo_json({"waiting": waiting, "oldest_age_s": None if age is None else round(age, 3)})
        return
    shown = "" if age is None else f", the oldest {format_age(age)} old"
    click.echo(f"outbox: {waiting} row(s) waiting{shown} ({relay.database.describe()})")
