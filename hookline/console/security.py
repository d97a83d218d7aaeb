"""What keeps the console safe in a browser: CSRF tokens bound to the actor's session, and the
headers every response carries.

A form that changes state carries a token the server derived from the actor's session with a
key the attacker never sees (HMAC-SHA256); a forged cross-site POST has no way to know it, so
it is refused with 403 before any service function runs. Standalone, the key is random per
process unless ``HOOKLINE_CONSOLE_SECRET_KEY`` gives one that several processes share. Mounted
in a host, the host's own CSRF protection can stand in (:class:`HostCsrf`).

The Content-Security-Policy allows scripts and styles from the console's own origin only: no
inline script, no inline style, no ``eval``; a stored ``<script>`` that escaped the templates'
autoescape would still not run.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Protocol

from werkzeug.wrappers import Request, Response

from hookline.core.env import ConfigError, raw
from hookline.service.actor import Actor

#: The form field and the header (for scripts) a state-changing request carries its token in.
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
#: Methods that never change state: no token asked.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: One source of a frame-ancestors setting: a keyword, a scheme, or a host source.
FRAME_SOURCE = re.compile(r"^(?:'self'|[a-z][a-z0-9+.-]*:|(?:[a-z][a-z0-9+.-]*://)?"
                          r"(?:\*\.)?[A-Za-z0-9.-]+(?::(?:\d{1,5}|\*))?(?:/[A-Za-z0-9._~/%-]*)?)$")


class Csrf(Protocol):
    """How the console protects its state-changing requests: the field a form carries, the
    token to put in it for this actor, and whether a request's token is good."""

    field_name: str

    def token(self, request: Request, actor: Actor) -> str: ...

    def check(self, request: Request, actor: Actor) -> bool: ...


class SignedTokens:
    """The console's own CSRF protection: the token is an HMAC of the actor's name and session
    under ``key`` (bytes; a new random key when ``None``, valid for this process only)."""

    field_name = CSRF_FIELD

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key else secrets.token_bytes(32)

    def token(self, request: Request, actor: Actor) -> str:
        message = f"csrf\0{actor.name}\0{actor.session}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def check(self, request: Request, actor: Actor) -> bool:
        given = request.form.get(self.field_name) or request.headers.get(CSRF_HEADER) or ""
        return hmac.compare_digest(given.encode(), self.token(request, actor).encode())

    def derive(self, purpose: str, value: str) -> str:
        """An opaque digest of ``value`` under the key (a session id for the audit log made
        from a cookie, so that the log never shows the cookie itself)."""
        message = f"{purpose}\0{value}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:16]


class HostCsrf:
    """A host's CSRF protection (Django's middleware, Flask-WTF) that has already checked the
    request before the console sees it: the console only puts the host's token in its forms,
    under the host's field name."""

    def __init__(self, field_name: str, token: Callable[[Request], str]) -> None:
        self.field_name = field_name
        self._token = token

    def token(self, request: Request, actor: Actor) -> str:
        return self._token(request)

    def check(self, request: Request, actor: Actor) -> bool:
        return True


def content_security_policy(frame_ancestors: str = "'none'") -> str:
    """The policy: own-origin scripts and styles only, images also as ``data:`` URLs (the
    charts are inline SVG, which needs neither), forms posting back to the console, and framing
    by ``frame_ancestors`` only (``'none'``: nobody)."""
    return ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            f"frame-ancestors {frame_ancestors}; form-action 'self'; base-uri 'none'; "
            "object-src 'none'")


def frame_ancestor_sources(value: str, setting_name: str) -> list[str]:
    """The frame-ancestors sources ``value`` lists, separated by spaces (none for an empty value
    or ``'none'``), each checked: a :class:`ConfigError` naming ``setting_name`` and the first
    source that is not one otherwise (a stray ``;`` would add a directive to the policy)."""
    if not value or value == "'none'":
        return []
    sources = value.split()
    wrong = [source for source in sources if not FRAME_SOURCE.match(source)]
    if wrong:
        raise ConfigError(f"{setting_name}: {wrong[0][:80]!r} is not a frame-ancestors source "
                          "(e.g. https://app.example.com, 'self'); separate sources with spaces")
    return sources


def frame_ancestors_setting(env: Mapping[str, str], setting_name: str) -> str:
    """The policy's frame-ancestors from the setting ``setting_name`` of ``env``, checked
    (:func:`frame_ancestor_sources`): ``'none'`` when it names no source."""
    return " ".join(frame_ancestor_sources(raw(env, setting_name), setting_name)) or "'none'"


def secured(response: Response, policy: str) -> Response:
    """``response`` with the security headers every console response carries."""
    response.headers["Content-Security-Policy"] = policy
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    if "frame-ancestors 'none'" in policy:
        response.headers["X-Frame-Options"] = "DENY"  # for browsers without CSP level 2
    return response
