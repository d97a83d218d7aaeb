"""One signed-in request as a page sees it (:class:`Visit`), and the table of pages
(:class:`Routes`) each page module fills with its own.

A page is a function of a :class:`Visit`: it reads the request's parameters, calls the service
with ``visit.actor``, and renders a template with the answer. It holds no rule of its own: who
may act, what is in scope and what a list holds are the service's decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment
from werkzeug.routing import MapAdapter, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from hookline.console.security import Csrf
from hookline.service.actor import Actor

Page = Callable[["Visit"], Response]

#: Notices a page shows after an action redirected to it (``?notice=paused``): fixed texts,
#: so the query string never puts words of its own on the page.
NOTICES = {
    "paused": "Endpoint paused: deliveries wait until it is resumed.",
    "resumed": "Endpoint resumed: waiting deliveries go out within its rate limit.",
    "disabled": "Endpoint disabled: new deliveries are dead-lettered.",
    "enabled": "Endpoint enabled.",
    "url-changed": "URL saved: the next attempt goes to the new URL.",
    "subscribed": "Subscriptions saved: they apply to events published from now on.",
    "breaker-reset": "Circuit breaker reset.",
    "replayed": "Replay scheduled.",
    "cancelled": "Bulk replay cancelled.",
}


#: The navigation: (page, label, the pages that count as its section).
NAVIGATION = (
    ("overview.overview", "Overview", ("overview.overview",)),
    ("endpoints.app_list", "Applications", ("endpoints.app_list",)),
    ("endpoints.endpoint_list", "Endpoints", ("endpoints.",)),
    ("events.event_search", "Events", ("events.",)),
    ("dead_letters.letter_list", "Dead letters", ("dead_letters.",)),
    ("overview.schedule", "Retry schedule", ("overview.schedule",)),
    ("overview.stats", "Stats", ("overview.stats",)),
    ("overview.audit_log", "Audit log", ("overview.audit",)),
)


@dataclass(frozen=True)
class Face:
    """The face a page is drawn for, the operator's console or an application's portal: the
    templates both show (an endpoint, an event's deliveries, dead letters) are one each and
    read here what differs. The templates have it as ``face``."""

    #: The layout a page extends (``base.html``).
    layout: str
    #: The pages the shared templates link and post to, by role (``"endpoint"``: one
    #: endpoint's page); an action whose role is missing is not offered on this face.
    pages: Mapping[str, str]
    #: The operator's face: the facts only an operator sees are shown (a dead letter's detail,
    #: the error texts in lists (both faces show the status and the receiver's answer), the
    #: failures behind a breaker, a conflicting event), and a
    #: read-only viewer sees the actions, disabled, rather than none.
    operator: bool = False

    def offers(self, actor: Actor) -> bool:
        """Whether the pages show ``actor`` their actions (the service refuses what a
        read-only actor posts, whatever a page shows)."""
        return actor.can_act or self.operator


@dataclass
class Visit:
    """The request, who makes it, and what a page needs to answer: templates, URLs, the CSRF
    token for its forms."""

    request: Request
    actor: Actor
    args: Mapping[str, Any]
    adapter: MapAdapter
    templates: Environment
    csrf: Csrf
    #: The page's name (``"endpoints.endpoint_show"``): the navigation marks its section.
    name: str = ""

    def current(self, page: str) -> bool:
        """Whether ``page``'s navigation entry is the section of this visit's page."""
        for entry, _, section in NAVIGATION:
            if any(self.name.startswith(prefix) for prefix in section):
                return entry == page
        return False

    def url(self, page: str, query: Mapping[str, Any] | None = None, **values: Any) -> str:
        """The URL of ``page`` (``"endpoints.show"``) with its path ``values`` and, when given,
        a query string (values of ``None`` or "" left out)."""
        url = self.adapter.build(page, values)
        kept = {key: value for key, value in (query or {}).items() if value not in (None, "")}
        return f"{url}?{urlencode(kept)}" if kept else url

    def param(self, name: str, default: str = "") -> str:
        """A query-string parameter, stripped."""
        return (self.request.args.get(name) or default).strip()

    def limit(self, default: int) -> int:
        """``?limit=`` when it is a number, else ``default``; the service bounds it either way."""
        text = self.param("limit")
        return int(text) if text.isdigit() else default

    def form(self, name: str, default: str = "") -> str:
        """A posted form field, stripped."""
        return (self.request.form.get(name) or default).strip()

    def render(self, template: str, *, status: int = 200, **values: Any) -> Response:
        """``template`` rendered with ``values`` and what every page shows (the actor, the
        navigation, the CSRF token, a notice)."""
        notice = NOTICES.get(self.param("notice"))
        html = self.templates.get_template(template).render(
            visit=self, actor=self.actor, navigation=NAVIGATION, csrf_field=self.csrf.field_name,
            csrf_token=self.csrf.token(self.request, self.actor), notice=notice, **values)
        return Response(html, status=status, mimetype="text/html")

    def redirect(self, page: str, query: Mapping[str, Any] | None = None,
                 **values: Any) -> Response:
        """A 303 to ``page`` (after a POST: a reload does not repeat the action)."""
        return redirect(self.url(page, query, **values), code=303)


class Routes:
    """A page module's pages: ``@routes.get("/endpoints")`` registers a page under the name
    ``"<module>.<function>"`` (or ``name``, for a page made by a function the console and the
    portal share) for :class:`~hookline.console.wsgi.Console` to route."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rules: list[Rule] = []
        self.pages: dict[str, Page] = {}

    def _add(self, path: str, methods: list[str], name: str | None) -> Callable[[Page], Page]:
        def register(page: Page) -> Page:
            key = f"{self.name}.{name or page.__name__}"
            self.rules.append(Rule(path, endpoint=key, methods=methods))
            self.pages[key] = page
            return page
        return register

    def get(self, path: str, *, name: str | None = None) -> Callable[[Page], Page]:
        return self._add(path, ["GET"], name)

    def post(self, path: str, *, name: str | None = None) -> Callable[[Page], Page]:
        return self._add(path, ["POST"], name)
