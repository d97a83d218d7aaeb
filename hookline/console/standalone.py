"""The console on its own (``hookline console``): HTTP basic auth from the environment, a
session cookie, its own CSRF tokens.

``HOOKLINE_CONSOLE_BASIC_AUTH=user:password[,user:password...]`` lists the operators who may
act, ``HOOKLINE_CONSOLE_VIEWERS`` (same form) those who may only look; with neither there is no
console (no default password). The values are secrets: no message, repr or log shows them.

Each browser gets an opaque session cookie (HttpOnly, SameSite=Strict) the first time it signs
in; the audit log records a digest of it (so two browsers of one user are two sessions) and the
CSRF tokens are bound to it. ``HOOKLINE_CONSOLE_SECRET_KEY`` keys both, so that several console
processes behind one balancer accept each other's forms; unset, the key is random per process.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

from werkzeug.wrappers import Request

from hookline.console.security import SignedTokens, frame_ancestors_setting
from hookline.console.wsgi import Console, make_app
from hookline.core.env import ConfigError, raw
from hookline.service.actor import Actor

#: The cookie that names a browser's session.
SESSION_COOKIE = "hookline_console_session"
#: Shortest ``HOOKLINE_CONSOLE_SECRET_KEY`` accepted, characters.
MIN_SECRET_KEY = 32


@dataclass(frozen=True)
class Credential:
    """One user the console knows: the password never shows in a repr."""

    user: str
    password: str = field(repr=False)
    can_act: bool = True


@dataclass(frozen=True)
class ConsoleSettings:
    """The standalone console's settings, read by :func:`console_settings`."""

    credentials: tuple[Credential, ...] = field(repr=False)
    secret_key: bytes | None = field(default=None, repr=False)
    frame_ancestors: str = "'none'"


def _credentials(env: Mapping[str, str], name: str, *, can_act: bool) -> list[Credential]:
    """``user:password[,user:password...]`` from ``name`` (a password may hold colons, not
    commas); a malformed entry is refused by its position, never by its text (it holds a
    password)."""
    text = raw(env, name)
    found: list[Credential] = []
    for position, entry in enumerate(text.split(",") if text else [], start=1):
        user, colon, password = entry.strip().partition(":")
        if not colon or not user or not password:
            raise ConfigError(f"{name}: entry {position} must be user:password (a user name, "
                              "a colon, a password of one character or more)")
        found.append(Credential(user, password, can_act))
    return found


def console_settings(env: Mapping[str, str]) -> ConsoleSettings:
    """The standalone console's settings from ``env``, each checked; a :class:`ConfigError`
    naming the variable (never showing a secret) otherwise."""
    credentials = [*_credentials(env, "HOOKLINE_CONSOLE_BASIC_AUTH", can_act=True),
                   *_credentials(env, "HOOKLINE_CONSOLE_VIEWERS", can_act=False)]
    if not credentials:
        raise ConfigError("the console needs credentials and has no default password: set "
                          "HOOKLINE_CONSOLE_BASIC_AUTH=user:password (operators) or "
                          "HOOKLINE_CONSOLE_VIEWERS=user:password (read-only)")
    users = [credential.user for credential in credentials]
    twice = sorted({user for user in users if users.count(user) > 1})
    if twice:
        raise ConfigError(f"HOOKLINE_CONSOLE_BASIC_AUTH and HOOKLINE_CONSOLE_VIEWERS name the "
                          f"user {twice[0]!r} more than once")
    key = raw(env, "HOOKLINE_CONSOLE_SECRET_KEY")
    if key and len(key) < MIN_SECRET_KEY:
        raise ConfigError(f"HOOKLINE_CONSOLE_SECRET_KEY must be at least {MIN_SECRET_KEY} "
                          "characters (e.g. python -c 'import secrets; "
                          "print(secrets.token_urlsafe(32))')")
    return ConsoleSettings(tuple(credentials), key.encode() if key else None,
                           frame_ancestors_setting(env, "HOOKLINE_CONSOLE_FRAME_ANCESTORS"))


class BasicAuth:
    """The standalone authorizer: the request's basic-auth user and password against the
    known ones (compared in constant time, every entry looked at), the session from its
    cookie."""

    def __init__(self, credentials: Iterable[Credential], tokens: SignedTokens) -> None:
        self._credentials = tuple(credentials)
        self._tokens = tokens

    def __call__(self, request: Request) -> Actor | None:
        given = request.authorization
        if given is None or given.type != "basic":
            return None
        user, password = (given.username or "").encode(), (given.password or "").encode()
        match = None
        for credential in self._credentials:
            same_user = hmac.compare_digest(user, credential.user.encode())
            same_password = hmac.compare_digest(password, credential.password.encode())
            if same_user and same_password:
                match = credential
        if match is None:
            return None
        cookie = request.cookies.get(SESSION_COOKIE, "")
        session = "basic-" + self._tokens.derive("session", f"{match.user}\0{cookie}")
        return Actor(name=match.user, session=session, can_act=match.can_act)


class SessionCookie:
    """WSGI middleware: a request without the session cookie gets one, seen by the console at
    once (added to the request) and kept by the browser (Set-Cookie on the response)."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]]) -> None:
        self.wsgi_app = wsgi_app

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        cookies = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        if SESSION_COOKIE in cookies:
            return self.wsgi_app(environ, start_response)
        value = secrets.token_urlsafe(24)
        present = environ.get("HTTP_COOKIE", "")
        environ = {**environ, "HTTP_COOKIE": f"{present}; {SESSION_COOKIE}={value}".lstrip("; ")}
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        path = environ.get("SCRIPT_NAME", "") or "/"
        cookie = f"{SESSION_COOKIE}={value}; Path={path}; HttpOnly; SameSite=Strict{secure}"

        def with_cookie(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            return start_response(status, [*headers, ("Set-Cookie", cookie)], *rest)

        return self.wsgi_app(environ, with_cookie)


def standalone_app(env: Mapping[str, str], *, mount_prefix: str = "") -> SessionCookie:
    """The standalone console from ``env``'s settings (:func:`console_settings`): basic auth,
    session cookies, CSRF tokens under the configured or a random key."""
    config = console_settings(env)
    tokens = SignedTokens(config.secret_key)
    console: Console = make_app(BasicAuth(config.credentials, tokens), csrf=tokens,
                                mount_prefix=mount_prefix,
                                frame_ancestors=config.frame_ancestors)
    return SessionCookie(console)
