"""``hookline breaker``: read and reset the circuit breakers of endpoints
(``hookline.store.gates``).

A breaker opens after ``HOOKLINE_BREAKER_THRESHOLD`` consecutive retryable failures, waits its
cool-down, then lets one probe through (half-open). A Retry-After answer blocks the endpoint
until then whatever the breaker's state. Times are Redis server time, shown in local time.
"""

from __future__ import annotations

from typing import Any

import click

from hookline.cli.output import echo_fields, echo_json, echo_table, format_time
from hookline.service import endpoint_actions as actions
from hookline.service.actor import cli_actor
from hookline.service.endpoints import breaker as breaker_view
from hookline.service.endpoints import breakers
from hookline.store.gates import BreakerStatus

#: What the "open until" column shows for an open breaker whose cool-down has run out.
PROBE_DUE = "cool-down over: the next attempt probes"


def breaker_json(status: BreakerStatus, *, cooldown: bool = True) -> dict[str, Any]:
    """Times in Unix seconds, None when not applicable; ``cooldown`` in seconds, None when the
    breaker has not opened since it last closed."""
    data: dict[str, Any] = {
        "endpoint_id": status.endpoint_id,
        "state": status.state,
        "failures": status.failures,
        "open_until": status.open_until,
        "blocked_until": status.blocked_until,
    }
    if cooldown:
        data["cooldown"] = status.cooldown or None
    return data


def _open_until(status: BreakerStatus) -> str | None:
    if status.state == "open" and status.open_until is None:
        return PROBE_DUE
    return format_time(status.open_until)


def _cooldown(status: BreakerStatus) -> str | None:
    return f"{status.cooldown:g}s" if status.cooldown else None


def describe(status: BreakerStatus) -> str:
    """One line: ``open, 5 failures, until 2026-11-29 16:52:13 (in 12s)``."""
    parts = [status.state.replace("_", "-"), f"{status.failures} failure(s)"]
    if status.state == "open":
        parts.append(f"until {format_time(status.open_until)}" if status.open_until else PROBE_DUE)
    if status.blocked_until is not None:
        parts.append(f"Retry-After block until {format_time(status.blocked_until)}")
    return ", ".join(parts)


@click.group()
def breaker() -> None:
    """Inspect and reset endpoints' circuit breakers and Retry-After blocks."""


@breaker.command("status")
@click.argument("endpoint_id", metavar="[ENDPOINT]", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (a list; one object when ENDPOINT is given).")
def breaker_status(endpoint_id: str | None, as_json: bool) -> None:
    """Show the breaker of ENDPOINT, or of every endpoint."""
    actor = cli_actor()
    if endpoint_id is not None:
        status = breaker_view(actor, endpoint_id)
        if as_json:
            echo_json(breaker_json(status))
            return
        echo_fields([
            ("endpoint", status.endpoint_id),
            ("state", status.state),
            ("failures", status.failures),
            ("open until", _open_until(status)),
            ("blocked until", format_time(status.blocked_until)),
            ("cool-down", _cooldown(status)),
        ])
        return
    found = breakers(actor)
    if as_json:
        echo_json([breaker_json(status) for status in found])
        return
    if not found:
        click.echo("no endpoints: add one with 'hookline endpoint add ID --url URL'")
        return
    echo_table(
        ["endpoint", "state", "failures", "open until", "blocked until", "cool-down"],
        [
            (status.endpoint_id, status.state, status.failures, _open_until(status),
             format_time(status.blocked_until), _cooldown(status))
            for status in found
        ],
    )


@breaker.command("reset")
@click.argument("endpoint_id", metavar="ENDPOINT")
def breaker_reset(endpoint_id: str) -> None:
    """Close the breaker of ENDPOINT and lift its Retry-After block: sends resume at once.

    Use it when you know the receiver is back; otherwise the breaker's probe finds out.
    """
    actions.reset_breaker(cli_actor(), endpoint_id)
    click.echo(f"breaker of {endpoint_id} reset: closed, no Retry-After block")
