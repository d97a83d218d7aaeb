"""Portal links: a signed, expiring token that opens the tenant portal for one application, and
its revocation.

Public API::

    portal_link(app_id, *, ttl=3600, read_only=False, base_url=None, actor=None) -> str
    issue(app_id, *, ttl=3600, read_only=False, base_url=None, actor=None) -> PortalLink
    verify(token, *, key=None, now=None) -> Grant
        # TokenRefused (reason malformed, altered, expired or revoked)
    revoke(link_id, *, actor=None) -> None      # that link, until it would have expired anyway
    revoke_app(app_id, *, actor=None, removed=False) -> float
        # every link to the application issued so far; NotFound unless it exists
        # (removed=True: its id's links anyway, should the id be added again)
    @dataclass(frozen=True)
    class Grant:  app_id; link_id; read_only; issued_at; expires_at
                  def actor() -> Actor        # "portal:<app>", session "portal:<link id>"

The token is ``hlp1.<payload>.<signature>``: the payload (base64url JSON: application, issue
and expiry times, read-only flag, a random link id) signed with HMAC-SHA256 under
``HOOKLINE_CONSOLE_SECRET_KEY``; without that key no link is made (one error naming it), since a
per-process random key would make links no other process accepts. Revocation lives in Redis: a
revoked link id, and per application the time before which every link is refused; both keys
expire after :data:`MAX_TTL`, when every link they could refuse has expired by itself.

The token is a credential: no message, repr or log line of this module holds it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hookline.core.env import raw
from hookline.core.errors import HooklineError
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.apps import AppRegistry, UnknownApplication, validate_app_id
from hookline.transport.bounded import bounded

#: The variable whose value keys the tokens (the console's key: one secret to manage).
KEY_VARIABLE = "HOOKLINE_CONSOLE_SECRET_KEY"
#: The variable naming where the portal is served (the links' base URL).
URL_VARIABLE = "HOOKLINE_PORTAL_URL"
#: Shortest key accepted, characters (the console's rule).
MIN_KEY_LENGTH = 32
#: Shortest and longest life of a link, seconds.
MIN_TTL = 60
MAX_TTL = keys.PORTAL_MAX_TTL
#: The token's version prefix: a later format can be told apart.
PREFIX = "hlp1"
#: What a link id looks like (random hex): anything else is not one.
LINK_ID = re.compile(r"^[0-9a-f]{16}$")
#: The path under the portal's base URL that exchanges a token for a session.
ENTER_PATH = "/enter"


class PortalUnavailable(HooklineError):
    """No link can be made or checked: the key or the base URL is missing or wrong."""


class TokenRefused(HooklineError, PermissionError):
    """A token that does not open the portal; ``reason`` is one of malformed, altered,
    expired, revoked. The message never holds the token."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"this portal link is not valid ({reason}): ask for a new one")
        self.reason = reason


@dataclass(frozen=True)
class Grant:
    """What a valid token grants: one application, until ``expires_at``, perhaps read-only."""

    app_id: str
    link_id: str
    read_only: bool
    issued_at: float
    expires_at: float

    def actor(self) -> Actor:
        """The tenant as the service sees it: scoped to its application, its session the link
        id (the audit log can tell links apart; the id opens nothing by itself)."""
        return Actor(name=f"portal:{self.app_id}", session=f"portal:{self.link_id}",
                     can_act=not self.read_only, app_scope=self.app_id)


@dataclass(frozen=True)
class PortalLink:
    """A link made by :func:`issue`: the URL to hand over, and what it grants."""

    url: str
    link_id: str
    app_id: str
    read_only: bool
    expires_at: float

    def __repr__(self) -> str:  # the URL holds the token
        return (f"PortalLink(link_id={self.link_id!r}, app_id={self.app_id!r}, "
                f"read_only={self.read_only}, expires_at={self.expires_at})")


def signing_key(env: Mapping[str, str] | None = None) -> bytes:
    """The key the tokens are signed with, from ``HOOKLINE_CONSOLE_SECRET_KEY``."""
    key = raw(os.environ if env is None else env, KEY_VARIABLE)
    if not key:
        raise PortalUnavailable(f"portal links need {KEY_VARIABLE} (the key that signs them, "
                                f"{MIN_KEY_LENGTH} characters or more, the same in every "
                                "process that serves the portal)")
    if len(key) < MIN_KEY_LENGTH:
        raise PortalUnavailable(f"{KEY_VARIABLE} must be at least {MIN_KEY_LENGTH} characters "
                                "to sign portal links")
    return key.encode()


def portal_base_url(given: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Where the portal is served: ``given``, else ``HOOKLINE_PORTAL_URL``."""
    url = (given or raw(os.environ if env is None else env, URL_VARIABLE)).rstrip("/")
    if not url:
        raise PortalUnavailable(f"portal links need the portal's address: set {URL_VARIABLE} "
                                "(e.g. https://hooks.example.com/portal) or pass base_url")
    if not re.match(r"^https?://[^\s/?#]+(?:/[^\s?#]*)?$", url):
        raise PortalUnavailable(f"{URL_VARIABLE} must be an http(s) URL without a query "
                                "string, e.g. https://hooks.example.com/portal")
    return url


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, signed: str) -> str:
    return _b64(hmac.new(key, f"portal-link\0{signed}".encode(), hashlib.sha256).digest())


def _checked_ttl(ttl: float) -> int:
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise PortalUnavailable(f"a portal link lives between {MIN_TTL} seconds and "
                                f"{MAX_TTL // 86400} days, not {ttl:g} seconds")
    return int(ttl)


@bounded
def issue(app_id: str, *, ttl: float = 3600, read_only: bool = False,
          base_url: str | None = None, actor: Actor | None = None) -> PortalLink:
    """A new link to ``app_id``'s portal (the application must exist), valid ``ttl`` seconds.
    With ``actor``, the audit log records who made it (its link id, never the token)."""
    key = signing_key()
    url = portal_base_url(base_url)
    validate_app_id(app_id)
    if AppRegistry().get(app_id) is None:
        raise UnknownApplication(app_id)
    now = time.time()
    link_id = secrets.token_hex(8)
    expires_at = int(now) + _checked_ttl(ttl)
    claims = {"app": app_id, "lid": link_id, "ro": bool(read_only), "iat": now,
              "exp": expires_at}
    signed = f"{PREFIX}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
    token = f"{signed}.{_signature(key, signed)}"
    if actor is not None:
        audit.record(actor, "portal.link", link_id,
                     f"{'read-only, ' if read_only else ''}expires {expires_at}", app=app_id)
    return PortalLink(url=f"{url}{ENTER_PATH}?token={quote(token)}", link_id=link_id,
                      app_id=app_id, read_only=bool(read_only), expires_at=expires_at)


def portal_link(app_id: str, *, ttl: float = 3600, read_only: bool = False,
                base_url: str | None = None, actor: Actor | None = None) -> str:
    """The URL of a new link to ``app_id``'s portal (see :func:`issue`)."""
    return issue(app_id, ttl=ttl, read_only=read_only, base_url=base_url, actor=actor).url


def _claims(token: str, key: bytes) -> dict[str, Any]:
    """The signed claims of ``token``, or :class:`TokenRefused` (malformed or altered)."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or len(token) > 1000:
        raise TokenRefused("malformed")
    expected = _signature(key, f"{parts[0]}.{parts[1]}")
    if not hmac.compare_digest(expected.encode(), parts[2].encode()):
        raise TokenRefused("altered")
    try:
        claims = json.loads(_unb64(parts[1]))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TokenRefused("malformed") from None
    if (not isinstance(claims, dict) or not isinstance(claims.get("app"), str)
            or not isinstance(claims.get("lid"), str) or not isinstance(claims.get("ro"), bool)
            or not isinstance(claims.get("exp"), int)
            or not isinstance(claims.get("iat"), int | float)):
        raise TokenRefused("malformed")
    return claims


def verify(token: str, *, key: bytes | None = None, now: float | None = None,
           redis_client: Any = None) -> Grant:
    """What ``token`` grants, or :class:`TokenRefused`: checked signature first (nothing of
    an unsigned token is believed), then expiry, then revocation (one Redis round trip).
    ``key`` None: :func:`signing_key`'s."""
    claims = _claims(token, key or signing_key())
    now = time.time() if now is None else now
    if now >= claims["exp"]:
        raise TokenRefused("expired")
    client: Any = redis_client or store.client()
    link_revoked, app_revoked_at = client.mget(keys.portal_revoked_link_key(claims["lid"]),
                                               keys.portal_revoked_app_key(claims["app"]))
    if link_revoked is not None or (app_revoked_at is not None
                                    and claims["iat"] <= float(app_revoked_at)):
        raise TokenRefused("revoked")
    return Grant(app_id=claims["app"], link_id=claims["lid"], read_only=claims["ro"],
                 issued_at=float(claims["iat"]), expires_at=float(claims["exp"]))


def revoke(link_id: str, *, actor: Actor | None = None, redis_client: Any = None) -> None:
    """Refuse the link ``link_id`` from now on (its sessions included: every request checks)."""
    link_id = link_id.strip().lower()
    if not LINK_ID.match(link_id):
        raise PortalUnavailable(f"{link_id[:40]!r} is not a portal link id (16 hex digits, "
                                "as 'hookline portal link' prints)")
    client: Any = redis_client or store.client()
    client.set(keys.portal_revoked_link_key(link_id), "1", ex=MAX_TTL)
    if actor is not None:
        audit.record(actor, "portal.revoke", link_id)


def revoke_app(app_id: str, *, actor: Actor | None = None, redis_client: Any = None,
               removed: bool = False) -> float:
    """Refuse every link to ``app_id`` issued until now (later links work); returns the time.
    An application that does not exist is ``NotFound`` (a typo must not read as a
    revocation), unless ``removed`` says it was removed: its id's links are refused
    anyway, should an application of that id be added again."""
    validate_app_id(app_id)
    now = time.time()
    client: Any = redis_client or store.client()
    if not removed and AppRegistry(client).get(app_id) is None:
        raise NotFound("application", app_id)
    client.set(keys.portal_revoked_app_key(app_id), repr(now), ex=MAX_TTL)
    if actor is not None:
        audit.record(actor, "portal.revoke_app", app_id, app=app_id)
    return now
