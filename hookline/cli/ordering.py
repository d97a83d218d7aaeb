"""``hookline endpoint lines``: an ordered endpoint's keys with a delivery out, the most
waiting first, each with its head, how many deliveries wait behind it and why the head waits
(``hookline.service.ordering``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from hookline.cli.output import echo_json, echo_table, format_time
from hookline.service.actor import cli_actor
from hookline.service.ordering import EndpointLines, key_lines
from hookline.service.pages import MAX_LIMIT


def lines_json(found: EndpointLines) -> dict[str, Any]:
    """What ``endpoint lines --json`` prints."""
    return {"endpoint_id": found.endpoint_id, "ordered": found.ordered, "policy": found.policy,
            "keys_out": found.keys_out, "waiting": found.waiting, "more": found.more,
            "lines": [asdict(line) for line in found.lines]}


@click.command("lines")
@click.argument("endpoint_id", metavar="ID")
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=50, show_default=True,
              metavar="N", help="Most keys listed, those with the most waiting first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def endpoint_lines(endpoint_id: str, limit: int, as_json: bool) -> None:
    """Show ordered endpoint ID's keys with a delivery out, the most waiting first: each
    key's head (event id and sequence number), how many deliveries wait behind it, and why
    the head waits (dead-lettered, held in the retry schedule, or on the queue or in
    flight)."""
    found = key_lines(cli_actor(), endpoint_id, limit=limit)
    if as_json:
        echo_json(lines_json(found))
        return
    if not found.ordered:
        click.echo(f"endpoint {found.endpoint_id} is not ordered (make it so with 'hookline "
                   f"endpoint update {found.endpoint_id} --ordered')")
        return
    click.echo(f"{found.keys_out} keys with a delivery out, {found.waiting} deliveries waiting "
               f"behind their heads (policy {found.policy})")
    if found.lines:
        echo_table(["key", "head", "sequence", "waiting", "why", "until"],
                   [(line.key, line.head_event, line.head_sequence, line.waiting, line.why,
                     format_time(line.until)) for line in found.lines])
    if found.more:
        click.echo(f"({found.more} more keys: raise --limit)")
