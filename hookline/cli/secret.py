"""``hookline endpoint rotate-secret``: a new signing key, the old one kept for a while; and
what the endpoint commands print of signing keys (a generated HMAC secret once, an ed25519
key's public key, never its private key)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from hookline.cli.output import format_time
from hookline.core.signing import KINDS
from hookline.service.actor import cli_actor
from hookline.service.endpoint_actions import REPAIRED
from hookline.service.endpoint_actions import rotate_secret as rotate

#: ``--signature``: the kind of key generated (``hookline.core.signing``).
SIGNATURE_CHOICE = click.Choice(KINDS)
SECRET_METAVAR = "whsec_...|whsk_..."
SECRET_HELP = ("whsec_ + base64 of 24-64 bytes (HMAC), or whsk_ + base64 of an ed25519 key "
               "(its 32-byte seed, or seed and public key)")
Command = TypeVar("Command", bound=Callable[..., Any])


def key_options(*, secret_help: str, signature_help: str) -> Callable[[Command], Command]:
    """A command's ``--secret`` (a key given) and ``--signature`` (the kind generated)."""
    def decorate(command: Command) -> Command:
        command = click.option("--signature", type=SIGNATURE_CHOICE,
                               help=signature_help)(command)
        return click.option("--secret", metavar=SECRET_METAVAR, help=secret_help)(command)
    return decorate


def echo_new_key(secret: str | None, public_key: str | None, *, label: str) -> None:
    """Print a generated HMAC secret (once: it is not kept anywhere shown) or an ed25519 key's
    public key, which the receiver verifies ``v1a`` signatures with."""
    if secret:
        click.echo(f"{label}signing secret: {secret}")
        click.echo("Store it now: it will not be shown again.")
    if public_key:
        click.echo(f"{label}public key: {public_key}")
        click.echo("Give it to the receiver: it verifies the v1a signatures with it. The "
                   "private key never leaves Hookline.")


def echo_repair(repaired: bool, released: int) -> None:
    """Say that a new key replaced a sealed secret that did not open (damaged, or copied from
    another endpoint or field), and how many deliveries held for it are due now."""
    if repaired:
        click.echo(f"{REPAIRED} (damaged, or copied from another endpoint or field); "
                   f"{released} held deliveries due now")


def describe_secrets(public: dict[str, Any]) -> str:
    """``endpoint show``'s secrets: each masked, with its kind, an ed25519 key's public key
    and when an old one stops signing, newest first."""
    described = []
    for masked, kind, key, until in zip(public["secrets"], public["secret_kinds"],
                                        public["public_keys"], public["secret_expires_at"],
                                        strict=True):
        notes = [kind, *([f"public key {key}"] if key else []),
                 *([f"signs until {format_time(until)}"] if until else [])]
        described.append(f"{masked} ({', '.join(notes)})")
    return "; ".join(described)


@click.command("rotate-secret")
@click.argument("endpoint_id", metavar="ID")
@click.option("--overlap", type=float, metavar="SECONDS",
              help="How long the current secrets keep signing too (default "
                   "HOOKLINE_SECRET_OVERLAP, one day).")
@key_options(secret_help=f"The new key: {SECRET_HELP}; generated when omitted.",
             signature_help="The kind of key generated: hmac (v1 signatures) or ed25519 "
                            "(v1a); default: the kind of the current key. hmac -> ed25519 is "
                            "a rotation like any other.")
def rotate_secret(endpoint_id: str, overlap: float | None, secret: str | None,
                  signature: str | None) -> None:
    """Give endpoint ID a new signing key: an HMAC secret is printed once, an ed25519 key's
    public key is printed (its private key never).

    Every request is signed with the new key and, until the overlap ends, with the old ones
    too (one `webhook-signature` header, several signatures), so the receiver can switch to the
    new key at its own pace: from HMAC to ed25519 too, without a missed verification. Expired
    secrets are removed.

    A sealed secret that does not open (damaged, or copied from another endpoint or field) is
    replaced, none kept, and the deliveries held for it go now; give --signature ed25519 if
    the endpoint signed with ed25519 (the kind of the lost key cannot be read).
    """
    rotated = rotate(cli_actor(), endpoint_id, secret=secret, overlap=overlap,
                     signature=signature)
    click.echo(f"rotated the signing secret of {rotated.summary.id}")
    echo_repair(rotated.repaired, rotated.released)
    echo_new_key(rotated.secret, rotated.public_key, label="new ")
    for until in rotated.previous_until:
        click.echo(f"previous secret signs until {format_time(until) if until else 'never'}")
