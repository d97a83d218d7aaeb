"""The tenant portal: one application's own corner of the console, opened by a portal link
(:mod:`hookline.service.portal`), as a WSGI application of its own.

    from hookline.console.portal import portal_app

    application = portal_app(os.environ)    # serve it at HOOKLINE_PORTAL_URL

A link points at ``<portal>/enter?token=...``. That request checks the token, puts it in a
session cookie (HttpOnly, SameSite, Secure on https) and answers with a redirect to the
portal's clean URL, so the token is neither left in the browser's history nor sent on in a
Referer; the token is then checked again on every request (an expired or revoked link stops
working at once, its sessions too). The tenant is a scoped actor: the service answers NotFound
for anything of another application and ReadOnly to a read-only link, whatever the page
offers. Every POST carries a CSRF token bound to the link; every response carries the console's
security headers, framing allowed to ``HOOKLINE_PORTAL_FRAME_ANCESTORS`` only.

No log line, message or page holds the token; served by werkzeug, :class:`PortalRequestHandler`
keeps it out of the access log too.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import Any

import redis
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.serving import WSGIRequestHandler
from werkzeug.wrappers import Request, Response

from hookline.console import portal_pages
from hookline.console.security import (
    SAFE_METHODS,
    SignedTokens,
    content_security_policy,
    frame_ancestors_setting,
    secured,
)
from hookline.console.visit import Visit
from hookline.console.wsgi import page_templates
from hookline.core.env import ConfigError
from hookline.core.errors import HooklineError, RedisUnavailable
from hookline.service import actor as actors
from hookline.service import portal
from hookline.transport.bounded import bounded

#: The cookie holding the session's signed token.
SESSION_COOKIE = "hookline_portal"
#: The vendored static files the portal serves (the console's own).
STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
#: What a visitor without a valid session is told (the link's reason added when known).
NO_SESSION = "Open the portal from the link you were given."
#: A token's value in a query string, as a request line shows it.
_TOKEN_VALUE = re.compile(r"(?<=[?&]token=)[^&\s]*")


def scrub(text: str) -> str:
    """``text`` (a request line, a URL) with a portal token's value hidden."""
    return _TOKEN_VALUE.sub("[hidden]", text)


class PortalRequestHandler(WSGIRequestHandler):
    """Werkzeug's request handler whose access log hides a link's token: serve the portal
    with ``make_server(..., request_handler=PortalRequestHandler)``. (A proxy in front that
    logs query strings needs the same care: the link's path is ``/enter``.)"""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        kept = self.path, self.requestline
        self.path, self.requestline = scrub(self.path), scrub(self.requestline)
        try:
            super().log_request(code, size)
        finally:
            self.path, self.requestline = kept


class Portal:
    """The portal's WSGI application (see the module's docstring)."""

    def __init__(self, key: bytes, *, frame_ancestors: str = "'none'") -> None:
        self.key = key
        self.csrf = SignedTokens(key)
        self.policy = content_security_policy(frame_ancestors)
        # Framed by another site's page, the cookie must be SameSite=None to be sent at all.
        self.same_site = "Lax" if frame_ancestors in ("'none'", "'self'") else "None"
        self.templates = page_templates(portal_pages.PORTAL)
        routes = portal_pages.routes
        rules = [Rule("/static/<name>", endpoint="static", methods=["GET"]),
                 Rule(portal.ENTER_PATH, endpoint="enter", methods=["GET"]),
                 *(rule.empty() for rule in routes.rules)]
        self.pages = dict(routes.pages)
        self.url_map = Map(rules, strict_slashes=False)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        response = self.respond(request)
        stricter = response.headers.get("Referrer-Policy")  # the token's URL: no-referrer
        response = secured(response, self.policy)
        if stricter:
            response.headers["Referrer-Policy"] = stricter
        return response(environ, start_response)

    def respond(self, request: Request) -> Response:
        adapter = self.url_map.bind_to_environ(request.environ)
        try:
            page, args = adapter.match()
        except HTTPException as exc:
            return Response(f"{exc.code} {exc.name}\n", status=exc.code or 500,
                            mimetype="text/plain")
        if page == "static":
            return self._static(str(args["name"]))
        if page == "enter":
            return self._enter(request)
        try:
            grant = portal.verify(request.cookies.get(SESSION_COOKIE, ""), key=self.key)
        except portal.TokenRefused as exc:
            answer = self._refused(request, exc if SESSION_COOKIE in request.cookies else None)
            if SESSION_COOKIE in request.cookies:
                answer.delete_cookie(SESSION_COOKIE, path=self._path(request))
            return answer
        actor = grant.actor()
        visit = Visit(request, actor, args, adapter, self.templates, self.csrf, str(page))
        if request.method not in SAFE_METHODS and not self.csrf.check(request, actor):
            return self._error(visit, 403, "This form has expired or did not come from the "
                               "portal (CSRF token missing or wrong): reload the page and try "
                               "again.")
        return self._page(visit, str(page))

    def _page(self, visit: Visit, page: str) -> Response:
        """The page, the service's refusals as status codes."""
        try:
            return bounded(self.pages[page])(visit)
        except actors.ReadOnly as exc:
            return self._error(visit, 403, str(exc))
        except actors.NotFound as exc:
            return self._error(visit, 404, str(exc))
        except (RedisUnavailable, redis.RedisError):  # a tenant is not told where, or why
            return self._error(visit, 503, "The portal cannot reach its data store: try "
                               "again in a moment.")
        except HooklineError as exc:
            return self._error(visit, 400, str(exc))

    def _enter(self, request: Request) -> Response:
        """Exchange the link's token for a session, then leave the URL that holds it."""
        token = request.args.get("token", "")
        try:
            grant = portal.verify(token, key=self.key)
        except portal.TokenRefused as exc:
            return self._refused(request, exc)
        response = Response(status=303)
        response.headers["Location"] = self._path(request)
        # The token must not travel on in a Referer from this response.
        response.headers["Referrer-Policy"] = "no-referrer"
        secure = request.scheme == "https" or self.same_site == "None"
        response.set_cookie(SESSION_COOKIE, token, path=self._path(request),
                            max_age=max(0, int(grant.expires_at - time.time())),
                            httponly=True, secure=secure, samesite=self.same_site)
        return response

    def _path(self, request: Request) -> str:
        """The portal's root as the browser sees it (under the host's mount point)."""
        return request.script_root.rstrip("/") + "/"

    def _refused(self, request: Request, exc: portal.TokenRefused | None) -> Response:
        message = f"{exc} {NO_SESSION}" if exc is not None else NO_SESSION
        html = self.templates.get_template("portal_refused.html").render(message=message)
        response = Response(html, status=403 if exc is not None else 401, mimetype="text/html")
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    def _error(self, visit: Visit, status: int, message: str) -> Response:
        return portal_pages.render(visit, "error.html", status=status,
                                   status_code=status, message=message)

    def _static(self, name: str) -> Response:
        if name not in STATIC:
            return Response("404 Not Found\n", status=404, mimetype="text/plain")
        body = resources.files("hookline.console").joinpath("static", name).read_bytes()
        return Response(body, mimetype=STATIC[name])


def portal_app(env: Mapping[str, str] | None = None) -> Portal:
    """The portal from ``env``'s settings (``os.environ`` when None): the signing key
    (``HOOKLINE_CONSOLE_SECRET_KEY``, required) and the allowed frame ancestors."""
    env = os.environ if env is None else env
    try:
        key = portal.signing_key(env)
    except portal.PortalUnavailable as exc:
        raise ConfigError(str(exc)) from None
    return Portal(key, frame_ancestors=frame_ancestors_setting(
        env, "HOOKLINE_PORTAL_FRAME_ANCESTORS"))
