"""What the Django and Flask mounts of the console share: the host's request handed to the one
WSGI application, the actor built from the host's user, and the WSGI call itself.

A host routes every URL under its prefix (``/hookline/``) to one view; the view checks the
host's own authentication and permissions, then calls :func:`call_console` with the host's
request. The console sees a WSGI environ whose ``SCRIPT_NAME`` is the mount prefix (so every
link it builds carries it) and whose ``PATH_INFO`` is the rest; the host's request object rides
along under :data:`HOST_REQUEST`, where the host's authorizer and CSRF token reader find it.

Framing follows ``HOOKLINE_CONSOLE_FRAME_ANCESTORS``, read and checked as the standalone
console reads it (:func:`frame_ancestors`): ``'none'`` (no page may frame it) unless it names
the pages that may.

The audit log's session id is a keyed digest of a session cookie (the host's session key in
Django, the console's own session cookie in Flask), never the cookie itself: it is a credential.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Request

from hookline.console.security import frame_ancestors_setting
from hookline.service.actor import Actor

#: The setting naming the pages that may frame the console, standalone or mounted.
FRAME_ANCESTORS_SETTING = "HOOKLINE_CONSOLE_FRAME_ANCESTORS"
#: The environ key under which the host's own request object reaches the console's authorizer
#: and CSRF token reader.
HOST_REQUEST = "hookline.host_request"
#: The environ key under which the mount's view leaves the actor it built for the request.
HOST_ACTOR = "hookline.host_actor"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def frame_ancestors(env: Mapping[str, str] | None = None) -> str:
    """The mounted console's CSP ``frame-ancestors`` from :data:`FRAME_ANCESTORS_SETTING` in
    ``env`` (the process's environment by default), checked as the standalone console checks
    it: a ``ConfigError`` naming the setting for a bad source."""
    return frame_ancestors_setting(os.environ if env is None else env, FRAME_ANCESTORS_SETTING)


def host_request(request: Request) -> Any:
    """The host's request object (Django's ``HttpRequest``, Flask's ``Request``) behind the
    console's ``request``."""
    return request.environ[HOST_REQUEST]


def host_authorizer(request: Request) -> Actor | None:
    """The authorizer of a mounted console: the actor the host's view built (it has already
    refused whoever may not see the console), ``None`` when the view built none."""
    actor = request.environ.get(HOST_ACTOR)
    return actor if isinstance(actor, Actor) else None


def session_digest(key: bytes, session_key: str | None) -> str:
    """An opaque id for the audit log made from the host's session key (``None``: no session,
    e.g. a host authenticating every request by a header)."""
    if not session_key:
        return "none"
    return hmac.new(key, f"session\0{session_key}".encode(), hashlib.sha256).hexdigest()[:16]


def host_actor(host: str, user: str, *, session: str, can_act: bool) -> Actor:
    """The actor for the host's ``user`` (``"django:bob"``): may act only when the host says so
    (the service enforces it, whatever the page shows)."""
    return Actor(name=f"{host}:{user}", session=f"{host}-{session}", can_act=can_act)


def prefix_of(path: str, rest: str) -> str:
    """The mount prefix of a request for ``path`` whose part below the prefix is ``rest``
    (``"/ops/hookline/endpoints"``, ``"endpoints"`` -> ``"/ops/hookline"``)."""
    head = path[:len(path) - len(rest)] if rest and path.endswith(rest) else path
    return head.rstrip("/")


def _wsgi_path(text: str) -> str:
    """A decoded path as WSGI carries it: its UTF-8 bytes as latin-1 characters."""
    return text.encode("utf-8").decode("latin-1")


@dataclass
class Mounted:
    """What a host's view hands the console for one request."""

    environ: Mapping[str, Any]
    #: The host's path prefix of the console (``/hookline``), below the host's SCRIPT_NAME.
    prefix: str
    #: The path below the prefix (``endpoints/shop-1``).
    rest: str
    host_request: Any
    actor: Actor
    #: The request body when the host has read it already (Django's middleware did).
    body: bytes | None = None


@dataclass
class Answer:
    """The console's WSGI answer, for the host to turn into its own response."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def console_environ(mounted: Mounted) -> dict[str, Any]:
    """The environ the console sees: the prefix moved into ``SCRIPT_NAME``, the rest in
    ``PATH_INFO``, the body readable again, the host's request and the actor attached."""
    environ = dict(mounted.environ)
    environ["SCRIPT_NAME"] = _wsgi_path(str(environ.get("SCRIPT_NAME", "")).rstrip("/")
                                        + mounted.prefix)
    environ["PATH_INFO"] = _wsgi_path("/" + mounted.rest.lstrip("/"))
    if mounted.body is not None:
        environ["wsgi.input"] = io.BytesIO(mounted.body)
        environ["CONTENT_LENGTH"] = str(len(mounted.body))
    environ[HOST_REQUEST] = mounted.host_request
    environ[HOST_ACTOR] = mounted.actor
    return environ


def call_console(wsgi_app: WsgiApp, mounted: Mounted) -> Answer:
    """Run the console for one mounted request and collect its answer."""
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
        captured["status"], captured["headers"] = status, headers
        return lambda data: None

    chunks = wsgi_app(console_environ(mounted), start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return Answer(int(captured["status"].split()[0]), list(captured["headers"]), body)
