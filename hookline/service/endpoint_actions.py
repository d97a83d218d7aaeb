"""What an operator or a tenant does to an endpoint: add, update, remove, pause and resume,
disable and enable, reset its breaker, rotate its secret.

Public API (each: ``ReadOnly`` first for a read-only actor, then ``NotFound`` for an endpoint
that does not exist or is outside ``actor.app_scope``; one audit entry once done)::

    @dataclass(frozen=True)
    class AddedEndpoint:   summary: EndpointSummary; secret: str | None   # generated: once
                           public_key: str | None                 # whpk_ of an ed25519 key
    @dataclass(frozen=True)
    class RotatedSecret:   summary: EndpointSummary; secret: str | None; public_key: str | None
                           previous_until: list[float | None]   # old secrets' expiry
                           repaired: bool; released: int         # see below
    @dataclass(frozen=True)
    class UpdatedEndpoint: summary: EndpointSummary; repaired: bool; released: int
    add_endpoint(actor, endpoint_id, url, *, signature=None, **spec) -> AddedEndpoint
    update_endpoint(actor, endpoint_id, *, url=None, **spec) -> UpdatedEndpoint
        # spec: an EndpointSpec's settings (hookline.core.specs), as keyword arguments
    remove_endpoint(actor, endpoint_id) -> None
    pause(actor, endpoint_id) -> EndpointSummary
    resume(actor, endpoint_id) -> int                     # held deliveries made due now
    disable(actor, endpoint_id, reason="disabled by operator") -> EndpointSummary
    enable(actor, endpoint_id) -> EndpointSummary
    reset_breaker(actor, endpoint_id) -> None
    check_ordered(ordered) -> bool     # EndpointError where the broker keeps no ordered lines
    rotate_secret(actor, endpoint_id, *, overlap=None, secret=None, signature=None)
        -> RotatedSecret

``signature`` is the kind of key generated when no ``secret`` is given: ``hmac`` (a
``whsec_`` secret, in the answer once) or ``ed25519`` (a ``whsk_`` key pair: the answer carries
its public key, never the private key); given with ``secret``, the two must agree. A rotation
without one keeps the kind of the endpoint's newest key; with ``overlap=0`` it replaces the
current keys at once (what ``hookline endpoint update --signature`` does).

A new secret (``update_endpoint(secret=...)``, ``rotate_secret``) replaces a sealed secret that
does not open with the key its id names (damaged, or copied from another endpoint or field:
``hookline.core.sealing``), which every other action refuses: ``repaired`` says so, the
audit entry too, and the deliveries held for it (deferred ``secrets_unreadable``) are made due
now (``released``, ``retries.release_unreadable``). A rotation then keeps no previous secret.
Another field that does not open, or a key not held, is still refused.

A scoped actor's endpoints stay in its application: ``add_endpoint`` puts them there (another
application is NotFound) and ``update_endpoint`` cannot move one out. Validation and the SSRF
rules are the registry's, the same for every face.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Unpack

from hookline.core.endpoint import Endpoint, EndpointError, generate_secret
from hookline.core.endpoint_validation import validate_signature
from hookline.core.signing import HMAC, public_key, secret_kind
from hookline.core.specs import EndpointSpec, given_settings
from hookline.delivery import retries
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.service.endpoints import (
    EndpointSummary,
    require_endpoint,
    require_replacing_secrets,
    summarize,
)
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from hookline.store.ordering import OrderLines
from hookline.transport.face import broker_face


@dataclass(frozen=True)
class AddedEndpoint:
    """The new endpoint; ``secret`` is the generated HMAC secret, shown this once (None when
    the caller gave one, or for an ed25519 key, whose private half is never shown);
    ``public_key`` the ``whpk_`` key receivers verify an ed25519 endpoint with (None for
    HMAC)."""

    summary: EndpointSummary
    secret: str | None
    public_key: str | None = None


@dataclass(frozen=True)
class RotatedSecret:
    """The new key: ``secret`` a generated HMAC secret, shown this once (None when the caller
    gave it, or for ed25519), ``public_key`` an ed25519 key's ``whpk_``; and when each previous
    secret stops signing (Unix seconds; None: never), newest first."""

    summary: EndpointSummary
    secret: str | None
    previous_until: list[float | None]
    public_key: str | None = None
    repaired: bool = False
    released: int = 0


@dataclass(frozen=True)
class UpdatedEndpoint:
    """The changed endpoint; ``repaired``: a new secret replaced a sealed one that did not
    open, and ``released`` deliveries held for it were made due now."""

    summary: EndpointSummary
    repaired: bool = False
    released: int = 0


#: What an answer and the audit log say of a sealed secret that did not open, replaced.
REPAIRED = "replaced an unreadable sealed secret"


def _new_key(secret: str | None, signature: str | None, default: str) -> tuple[str, bool]:
    """The key to install and whether it was generated here: ``secret`` if given (of kind
    ``signature`` when both are), else a new key of kind ``signature`` (``default`` when
    None)."""
    secret = secret or None
    kind = validate_signature(signature, secret)
    if secret is not None:
        return secret, False
    return generate_secret(kind or default), True


def _shown_once(key: str, generated: bool) -> str | None:
    """What of a new key an answer may carry as ``secret``: a generated HMAC secret only."""
    return key if generated and secret_kind(key) == HMAC else None


def _repair(registry: EndpointRegistry, endpoint: Endpoint, damaged: bool) -> tuple[int, str]:
    """After a new secret replaced a damaged sealed one: the deliveries held for it made due
    now (how many), and what the action's audit entry adds (nothing when not damaged)."""
    if not damaged:
        return 0, ""
    released = retries.release_unreadable(registry, endpoint)
    return released, f"; {REPAIRED}, {released} held deliveries due"


def _in_scope_app(actor: Actor, app: str | None) -> str | None:
    """The application a scoped actor's endpoint goes to: its own (another: NotFound)."""
    if actor.app_scope is None:
        return app
    if app not in (None, actor.app_scope):
        raise NotFound("application", str(app))
    return actor.app_scope


def check_ordered(ordered: bool) -> bool:
    """An endpoint can be ordered only where consume.lua keeps its lines: a Redis broker that
    is Hookline's own Redis (the default), not RabbitMQ, not a state Redis apart from it."""
    if ordered and not broker_face().ordered_lines:
        raise EndpointError("an ordered endpoint needs the broker to be Hookline's own Redis "
                            "(HOOKLINE_BROKER_URL unset or equal to REDIS_URL): its deliveries "
                            "wait in lines there, one key at a time", "ordered")
    return bool(ordered)


def add_endpoint(actor: Actor, endpoint_id: str, url: str, *, signature: str | None = None,
                 **spec: Unpack[EndpointSpec]) -> AddedEndpoint:
    """Register an endpoint (``burst`` None: the registry's default; ``signature`` the kind of
    key generated without ``secret``, HMAC by default; ``ordered``: one delivery of an
    ordering key at a time, ``order_policy`` what a dead-lettered head does)."""
    actor.require_act(f"add endpoint {endpoint_id}")
    app = _in_scope_app(actor, spec.get("app"))
    key, generated = _new_key(spec.get("secret"), signature, HMAC)
    check_ordered(bool(spec.get("ordered")))
    settings: EndpointSpec = {**spec, "secret": key, "app": app}
    added = EndpointRegistry().add(endpoint_id, url, **settings)
    audit.record(actor, "endpoint.add", added.id, f"signature {secret_kind(key)}"
                 + (f", ordered ({added.order_policy})" if added.ordered else "")
                 + (", trace context sent" if added.trace_context else ""),
                 app=added.app)
    return AddedEndpoint(summary=summarize(added), secret=_shown_once(key, generated),
                         public_key=public_key(key))


def update_endpoint(actor: Actor, endpoint_id: str, *, url: str | None = None,
                    **spec: Unpack[EndpointSpec]) -> UpdatedEndpoint:
    """Change an endpoint (``EndpointRegistry.update``'s meanings: ``rate="none"`` removes
    the limit, ``app="none"`` takes it out of its application, 0 removes the cap). Ordering
    turned off puts the deliveries waiting in the endpoint's lines back on the queue. A new
    ``secret`` replaces a damaged sealed one (see the module's docstring)."""
    actor.require_act(f"update endpoint {endpoint_id}")
    registry = EndpointRegistry()
    damaged = False
    if spec.get("secret") is None:
        require_endpoint(actor, endpoint_id, registry)
    else:
        damaged = require_replacing_secrets(actor, endpoint_id, registry)[1]
    app = spec.get("app")
    if actor.app_scope is not None and app is not None and app != actor.app_scope:
        raise NotFound("application", app)
    check_ordered(bool(spec.get("ordered")))
    updated = registry.update(endpoint_id, url=url, **spec)
    if spec.get("ordered") is False:
        OrderLines(registry.redis).release(endpoint_id)
    released, repair = _repair(registry, updated, damaged)
    # The names of what changed, never a value (a secret, a header's credentials).
    audit.record(actor, "endpoint.update", endpoint_id,
                 ", ".join(given_settings(spec, url=url)) + repair, app=updated.app)
    return UpdatedEndpoint(summary=summarize(updated), repaired=damaged, released=released)


def remove_endpoint(actor: Actor, endpoint_id: str) -> None:
    """Forget the endpoint; its scheduled retries are dead-lettered (endpoint_removed)."""
    actor.require_act(f"remove endpoint {endpoint_id}")
    registry = EndpointRegistry()
    endpoint = require_endpoint(actor, endpoint_id, registry)
    retries.remove_endpoint(registry, endpoint_id)
    audit.record(actor, "endpoint.remove", endpoint_id, app=endpoint.app)


def pause(actor: Actor, endpoint_id: str) -> EndpointSummary:
    """Hold every delivery to the endpoint in the retry schedule until :func:`resume`."""
    actor.require_act(f"pause endpoint {endpoint_id}")
    registry = EndpointRegistry()
    require_endpoint(actor, endpoint_id, registry)
    paused = retries.pause_endpoint(registry, endpoint_id)
    audit.record(actor, "endpoint.pause", endpoint_id, app=paused.app)
    return summarize(paused)


def resume(actor: Actor, endpoint_id: str) -> int:
    """End the pause: returns how many held deliveries were made due now."""
    actor.require_act(f"resume endpoint {endpoint_id}")
    registry = EndpointRegistry()
    endpoint = require_endpoint(actor, endpoint_id, registry)
    _, released = retries.resume_endpoint(registry, endpoint_id)
    audit.record(actor, "endpoint.resume", endpoint_id, f"{released} held deliveries due",
                 app=endpoint.app)
    return released


def disable(actor: Actor, endpoint_id: str,
            reason: str = "disabled by operator") -> EndpointSummary:
    """Stop sending, recording the reason, the time and the actor's name on the endpoint;
    its scheduled retries are dead-lettered (endpoint_disabled)."""
    actor.require_act(f"disable endpoint {endpoint_id}")
    registry = EndpointRegistry()
    require_endpoint(actor, endpoint_id, registry)
    disabled = retries.disable_endpoint(registry, endpoint_id, reason, by=actor.name)
    audit.record(actor, "endpoint.disable", endpoint_id, reason, app=disabled.app)
    return summarize(disabled)


def enable(actor: Actor, endpoint_id: str) -> EndpointSummary:
    actor.require_act(f"enable endpoint {endpoint_id}")
    registry = EndpointRegistry()
    require_endpoint(actor, endpoint_id, registry)
    enabled = registry.enable(endpoint_id)
    audit.record(actor, "endpoint.enable", endpoint_id, app=enabled.app)
    return summarize(enabled)


def reset_breaker(actor: Actor, endpoint_id: str) -> None:
    """Close the breaker and lift its Retry-After block: sends resume at once."""
    actor.require_act(f"reset the breaker of {endpoint_id}")
    endpoint = require_endpoint(actor, endpoint_id)
    Gate().reset_breaker(endpoint.id)
    audit.record(actor, "breaker.reset", endpoint_id, app=endpoint.app)


def rotate_secret(actor: Actor, endpoint_id: str, *, overlap: float | None = None,
                  secret: str | None = None, signature: str | None = None) -> RotatedSecret:
    """A new signing key in front (of kind ``signature``; the newest key's kind when None);
    the current ones keep signing for ``overlap`` seconds (``HOOKLINE_SECRET_OVERLAP`` when
    None; 0 replaces them at once). A generated HMAC secret is in the answer only: the audit
    entry names the new key's kind, never the key. A damaged sealed secret is replaced (see
    the module's docstring): none is kept, and without ``signature`` the new key is HMAC."""
    actor.require_act(f"rotate the secret of {endpoint_id}")
    registry = EndpointRegistry()
    current, damaged = require_replacing_secrets(actor, endpoint_id, registry)
    newest = secret_kind(current.secrets[0]) if current.secrets else HMAC
    key, generated = _new_key(secret, signature, newest)
    rotated, new = registry.rotate_secret(endpoint_id, secret=key, overlap=overlap)
    released, repair = _repair(registry, rotated, damaged)
    audit.record(actor, "endpoint.rotate_secret", endpoint_id,
                 ", ".join([f"signature {secret_kind(new)}",
                            *([] if overlap is None else [f"overlap {overlap:g}s"])]) + repair,
                 app=rotated.app)
    return RotatedSecret(summary=summarize(rotated), secret=_shown_once(new, generated),
                         public_key=public_key(new),
                         previous_until=[rotated.secret_expiry.get(old)
                                         for old in rotated.secrets[1:]],
                         repaired=damaged, released=released)
