"""The console: one WSGI application, whoever serves it (``hookline console``, a Django URL
include, a Flask blueprint).

    from hookline.console import make_app

    application = make_app(authorizer, csrf=SignedTokens())

``authorizer(request)`` says who makes a request (an :class:`~hookline.service.actor.Actor`) or
``None``: then the answer is 401 with ``WWW-Authenticate: Basic`` (the standalone console's
sign-in), so a mounting host passes an authorizer that reads its own session instead. Every
state-changing request must pass ``csrf`` (:mod:`hookline.console.security`): 403 otherwise,
before any page runs. The service's refusals become status codes: read-only 403, unknown or out
of scope 404, bad input 400, Redis not answering within ``HOOKLINE_REDIS_TIMEOUT`` 503, each
with the service's one-line message.

``mount_prefix`` is the path the host serves the console under (``/ops/hookline``): requests
arriving with it are routed without it and every URL the pages build carries it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import redis
from jinja2 import Environment, PackageLoader, StrictUndefined
from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from hookline.console.dead_letters import routes as dead_letter_pages
from hookline.console.endpoints import routes as endpoint_pages
from hookline.console.events import routes as event_pages
from hookline.console.overview import FILTERS
from hookline.console.overview import routes as overview_pages
from hookline.console.security import SAFE_METHODS, Csrf, content_security_policy, secured
from hookline.console.visit import Face, Visit
from hookline.core import redact
from hookline.core.config import settings
from hookline.core.errors import HooklineError, RedisUnavailable
from hookline.service import actor as actors
from hookline.service.stats import BrokerUnreachable
from hookline.transport.bounded import bounded

Authorizer = Callable[[Request], "actors.Actor | None"]

#: The page modules' tables of pages.
PAGES = (overview_pages, endpoint_pages, event_pages, dead_letter_pages)
#: The vendored static files and their types: nothing else under /static is served.
STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
#: The realm a browser shows in its sign-in prompt.
REALM = "Hookline console"
#: The console's face: every fact, every action (disabled for a read-only viewer).
CONSOLE = Face("base.html", {
    "endpoint": "endpoints.endpoint_show", "pause": "endpoints.pause",
    "resume": "endpoints.resume", "disable": "endpoints.disable", "enable": "endpoints.enable",
    "reset_breaker": "endpoints.reset_breaker", "rotate_secret": "endpoints.rotate_secret",
    "url": "endpoints.change_url", "subscriptions": "endpoints.subscriptions",
    "test_event": "endpoints.test_event", "test_event_outcome": "endpoints.test_event_outcome",
    "add_endpoint": "endpoints.endpoint_add",
    "events": "events.event_search", "event_replay": "events.replay",
    "letters": "dead_letters.letter_list", "letter": "dead_letters.letter_show",
    "letter_replay": "dead_letters.letter_replay", "letter_select": "dead_letters.letter_selection",
    "letter_delete": "dead_letters.letter_delete",
    "letter_replay_selected": "dead_letters.letter_replay_selected",
    "letter_purge": "dead_letters.letter_purge_confirm",
    "letter_purge_start": "dead_letters.letter_purge",
}, operator=True)


def page_templates(face: Face) -> Environment:
    """The templates drawn for ``face``: Jinja2 with autoescape on for every template, each
    stored string (endpoint ids, event types, response bodies) comes from outside."""
    environment = Environment(loader=PackageLoader("hookline.console", "templates"),
                              autoescape=True, undefined=StrictUndefined)
    environment.filters.update(FILTERS)
    environment.globals["face"] = face
    return environment


class Console:
    """The WSGI application (see the module's docstring)."""

    def __init__(self, authorizer: Authorizer, *, csrf: Csrf, mount_prefix: str = "",
                 frame_ancestors: str = "'none'") -> None:
        self.authorizer = authorizer
        self.csrf = csrf
        self.mount_prefix = mount_prefix.rstrip("/")
        self.policy = content_security_policy(frame_ancestors)
        self.templates = page_templates(CONSOLE)
        rules: list[Rule] = [Rule("/static/<name>", endpoint="static", methods=["GET"])]
        self.pages: dict[str, Callable[[Visit], Response]] = {}
        for routes in PAGES:
            rules.extend(rule.empty() for rule in routes.rules)
            self.pages.update(routes.pages)
        self.url_map = Map(rules, strict_slashes=False)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ = self._unmounted(environ)
        request = Request(environ)
        response = secured(self.respond(request), self.policy)
        return response(environ, start_response)

    def _unmounted(self, environ: dict[str, Any]) -> dict[str, Any]:
        """``environ`` with the mount prefix moved from PATH_INFO to SCRIPT_NAME (a host that
        passes the full path); unchanged when the host already split it."""
        path = environ.get("PATH_INFO", "")
        prefix = self.mount_prefix
        if prefix and (path == prefix or path.startswith(prefix + "/")):
            environ = {**environ, "PATH_INFO": path[len(prefix):] or "/",
                       "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + prefix}
        return environ

    def respond(self, request: Request) -> Response:
        """The response to ``request``: static files, 401 without an actor, 403 without CSRF,
        else the page (its service errors turned into status codes)."""
        adapter = self.url_map.bind_to_environ(request.environ)
        try:
            page, args = adapter.match()
        except HTTPException as exc:
            return self._plain(exc)
        if page == "static":
            return self._static(str(args["name"]))
        actor = self.authorizer(request)
        if actor is None:
            return self._sign_in()
        visit = Visit(request, actor, args, adapter, self.templates, self.csrf, str(page))
        if request.method not in SAFE_METHODS and not self.csrf.check(request, actor):
            return self._error(visit, 403, "This form has expired or did not come from the "
                               "console (CSRF token missing or wrong): reload the page and "
                               "try again.")
        try:
            return bounded(self.pages[str(page)])(visit)
        except RedisUnavailable as exc:  # within HOOKLINE_REDIS_TIMEOUT, not a hang
            return self._error(visit, 503, str(exc))
        except actors.ReadOnly as exc:
            return self._error(visit, 403, str(exc))
        except actors.NotFound as exc:
            return self._error(visit, 404, str(exc))
        except BrokerUnreachable as exc:
            return self._error(visit, 503, f"the broker at {redact.url(exc.url)} "
                               f"({exc.variable}) does not answer: {exc}")
        except redis.RedisError as exc:
            return self._error(visit, 503, f"Hookline's Redis does not answer: "
                               f"{redact.scrub(str(exc), settings().redis_url)}")
        except HooklineError as exc:
            return self._error(visit, 400, str(exc))
        except HTTPException as exc:
            return self._error(visit, exc.code or 500, exc.description or exc.name)

    def _error(self, visit: Visit, status: int, message: str) -> Response:
        return visit.render("error.html", status=status, status_code=status, message=message)

    def _sign_in(self) -> Response:
        response = Response("Sign in to the Hookline console.\n", status=401,
                            mimetype="text/plain")
        response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
        return response

    def _plain(self, exc: HTTPException) -> Response:
        """Routing errors (no such page, wrong method) before anyone is known: plain text."""
        response = Response(f"{exc.code} {exc.name}\n", status=exc.code or 500,
                            mimetype="text/plain")
        if exc.code == 405 and hasattr(exc, "valid_methods") and exc.valid_methods:
            response.headers["Allow"] = ", ".join(exc.valid_methods)
        return response

    def _static(self, name: str) -> Response:
        if name not in STATIC:
            return self._plain(NotFound())
        body = resources.files("hookline.console").joinpath("static", name).read_bytes()
        return Response(body, mimetype=STATIC[name])


def make_app(authorizer: Authorizer, *, csrf: Csrf, mount_prefix: str = "",
             frame_ancestors: str = "'none'") -> Console:
    """The console as a WSGI application: see the module's docstring."""
    return Console(authorizer, csrf=csrf, mount_prefix=mount_prefix,
                   frame_ancestors=frame_ancestors)
