"""``hookline endpoint rotate-secret``: a new signing secret, the old one kept for a while."""

from __future__ import annotations

import click

from hookline.cli.output import format_time
from hookline.service.actor import cli_actor
from hookline.service.endpoint_actions import rotate_secret as rotate


@click.command("rotate-secret")
@click.argument("endpoint_id", metavar="ID")
@click.option("--overlap", type=float, metavar="SECONDS",
              help="How long the current secrets keep signing too (default "
                   "HOOKLINE_SECRET_OVERLAP, one day).")
@click.option("--secret", metavar="whsec_...",
              help="The new secret (whsec_ + base64 of 24-64 bytes); generated when omitted.")
def rotate_secret(endpoint_id: str, overlap: float | None, secret: str | None) -> None:
    """Give endpoint ID a new signing secret, printed once.

    Every request is signed with the new secret and, until the overlap ends, with the old ones
    too (one `webhook-signature` header, several signatures), so the receiver can switch to the
    new secret at its own pace. Expired secrets are removed.
    """
    rotated = rotate(cli_actor(), endpoint_id, secret=secret, overlap=overlap)
    click.echo(f"rotated the signing secret of {rotated.summary.id}")
    if not secret:
        click.echo(f"new signing secret: {rotated.secret}")
        click.echo("Store it now: it will not be shown again.")
    for until in rotated.previous_until:
        click.echo(f"previous secret signs until {format_time(until) if until else 'never'}")
