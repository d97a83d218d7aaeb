"""The console mounted in a Flask application: a blueprint, behind the host's own check.

    from hookline.contrib.flask_console import console_blueprint

    def authorize(request, action):      # action: "view" or "act"
        user = current_user()             # the host's sign-in
        return user is not None and (action == "view" or user.is_admin)

    app.register_blueprint(console_blueprint(authorize, user=lambda request: current_user().name),
                           url_prefix="/hookline")

``authorize(request, action)`` is asked ``"view"`` for every console request (False: 403; it
may also abort with the host's own answer, a redirect to its sign-in page) and ``"act"`` to
know whether the user may change anything: without it every page shows and every change is
refused by the service, whatever is posted. ``user(request)`` names the user in the audit log.

CSRF: the console's own tokens, bound to a session cookie of its own and keyed by the app's
``SECRET_KEY`` (several processes agree; without one the key is random per process). A host
that checks CSRF itself (Flask-WTF's ``CSRFProtect``) passes ``host_csrf=HostCsrf(field,
token)`` (:class:`hookline.console.security.HostCsrf`) and the forms carry its token instead.

Framing: the pages ``frame_ancestors`` names (CSP sources) may frame the console; without it,
those ``HOOKLINE_CONSOLE_FRAME_ANCESTORS`` names, as for the standalone console (none by
default).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Flask, Response, abort, current_app, request
from werkzeug.wrappers import Request

from hookline.console.mount import (
    Mounted,
    WsgiApp,
    call_console,
    frame_ancestors,
    host_actor,
    host_authorizer,
    prefix_of,
)
from hookline.console.security import Csrf, HostCsrf, SignedTokens
from hookline.console.standalone import SESSION_COOKIE, SessionCookie
from hookline.console.wsgi import make_app
from hookline.service.actor import Actor

__all__ = ["console_blueprint"]

Authorize = Callable[[Any, str], bool]
METHODS = ["GET", "HEAD", "POST"]


def _default_user(host: Any) -> str:
    """The user the host's server or basic auth names, else ``"host"``."""
    given = host.authorization
    return str(host.remote_user or (given.username if given else "") or "host")


class _SessionAuthorizer:
    """The host's actor with a session id from the console's own session cookie (what the
    CSRF tokens are bound to), as a digest: the audit log never shows the cookie."""

    def __init__(self, tokens: SignedTokens) -> None:
        self._tokens = tokens

    def __call__(self, request: Request) -> Actor | None:
        actor = host_authorizer(request)
        if actor is None:
            return None
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return replace(actor, session="flask-" + self._tokens.derive(
            "session", f"{actor.name}\0{cookie}"))


def _key(app: Flask, secret_key: bytes | None) -> bytes | None:
    """The CSRF key: the one given, else one derived from the app's ``SECRET_KEY`` (never the
    key itself), else ``None`` (random per process)."""
    if secret_key:
        return secret_key
    app_key = app.secret_key
    if not app_key:
        return None
    raw = app_key if isinstance(app_key, bytes) else str(app_key).encode()
    return hmac.new(raw, b"hookline.console.csrf", hashlib.sha256).digest()


def _build(app: Flask, host_csrf: HostCsrf | None, secret_key: bytes | None,
           framed_by: str | None) -> WsgiApp:
    tokens = SignedTokens(_key(app, secret_key))
    csrf: Csrf = host_csrf if host_csrf is not None else tokens
    console = make_app(_SessionAuthorizer(tokens), csrf=csrf,
                       frame_ancestors=frame_ancestors() if framed_by is None else framed_by)
    return SessionCookie(console)


def _body(environ: dict[str, Any]) -> bytes:
    """The request body for the console, also when the host parsed the form already (its
    CSRF check did): the fields encoded again."""
    if "form" in request.__dict__ or "files" in request.__dict__:
        environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
        return urlencode(list(request.form.items(multi=True))).encode()
    return request.get_data(cache=True)


def console_blueprint(authorize: Authorize, *, user: Callable[[Any], str] | None = None,
                      host_csrf: HostCsrf | None = None, secret_key: bytes | None = None,
                      frame_ancestors: str | None = None,
                      name: str = "hookline_console") -> Blueprint:
    """A blueprint serving the console at every URL below its ``url_prefix``: see the
    module's docstring."""
    blueprint = Blueprint(name, __name__)
    extension = f"{name}.app"
    name_of = user or _default_user

    def console_view(path: str = "") -> Response:
        if not authorize(request, "view"):
            abort(403)
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        if extension not in app.extensions:
            app.extensions[extension] = _build(app, host_csrf, secret_key, frame_ancestors)
        actor = host_actor("flask", name_of(request), session="",
                           can_act=bool(authorize(request, "act")))
        environ = dict(request.environ)
        body = _body(environ) if request.method == "POST" else None
        mounted = Mounted(environ, prefix_of(request.path, path), path, request, actor, body)
        answer = call_console(app.extensions[extension], mounted)
        return Response(answer.body, status=answer.status, headers=answer.headers)

    blueprint.add_url_rule("/", "console", console_view, defaults={"path": ""},
                           methods=METHODS)
    blueprint.add_url_rule("/<path:path>", "console", console_view, methods=METHODS)
    return blueprint
