"""``hookline secrets``: the keys that encrypt endpoints' secrets and header values at rest
(``HOOKLINE_ENCRYPTION_KEYS``, ``hookline.core.sealing``): make one, see what the stored
records need, and move every record to the newest key."""

from __future__ import annotations

import click

from hookline.cli.output import echo_json, echo_table
from hookline.core import sealing
from hookline.core.config import settings
from hookline.service import audit
from hookline.service.actor import cli_actor
from hookline.store import sealed


@click.group("secrets")
def secrets_group() -> None:
    """Encryption at rest of signing secrets and header values (HOOKLINE_ENCRYPTION_KEYS)."""


@secrets_group.command("generate-key")
def generate_key_command() -> None:
    """Print a new random key for HOOKLINE_ENCRYPTION_KEYS (put it first to make it the
    newest). It is printed once, and kept nowhere: store it as you store passwords."""
    click.echo(sealing.generate_key())


def _configured() -> list[str]:
    ring = sealing.keyring(settings().encryption_keys)
    return [sealing.key_id(raw) for raw in ring.keys]


@secrets_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status_command(as_json: bool) -> None:
    """What the stored endpoints' credential fields are encrypted with, by key id (plain:
    not encrypted), and any endpoint whose fields the configured keys cannot open."""
    found = sealed.census()
    configured = _configured()
    if as_json:
        echo_json({"endpoints": found.endpoints, "fields": dict(found.fields),
                   "configured_keys": configured,
                   "unreadable": [{"endpoint": error.endpoint_id, "error": str(error)}
                                  for error in found.unreadable]})
        return
    click.echo(f"{found.endpoints} endpoints; configured keys (newest first): "
               f"{', '.join(configured) or 'none: secrets are stored in plain text'}")
    echo_table(["stored with", "fields"], sorted(found.fields.items()))
    for error in found.unreadable:
        click.echo(f"unreadable: {error}", err=True)
    if found.unreadable:
        raise SystemExit(1)


@secrets_group.command("reencrypt")
def reencrypt_command() -> None:
    """Encrypt every endpoint's secrets and header values with the newest key (those stored
    in plain text too). Safe beside running workers; when interrupted, run it again. Drop an
    old key only after this reports nothing left on it ('hookline secrets status')."""
    done = sealed.reencrypt()
    newest = _configured()[0]
    audit.record(cli_actor(), "secrets.reencrypt", newest,
                 f"moved={done.moved} current={done.current} skipped={len(done.skipped)}")
    click.echo(f"moved {done.moved} fields to key {newest}; {done.current} were on it already")
    for endpoint_id, why in done.skipped:
        click.echo(f"skipped {endpoint_id}: {why}", err=True)
    if done.skipped:
        raise SystemExit(1)
