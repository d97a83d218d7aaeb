"""The tenant portal's pages: the application's endpoints (add one; change its URL, pick its
subscriptions from the event catalog, rotate its secret, pause and resume it, disable and
enable it, send it a test event and see what became of it), its events with their attempts,
and its dead letters (replay one, replay or delete the rows ticked, purge exactly the
filtered set: the console's pages, ``hookline.console.dead_letters``).

Each page is one service call with the tenant's scoped actor: which endpoints, events and dead
letters belong to the application, what a read-only link may do and how an endpoint is checked
(its URL's SSRF rules included) are the service's decisions, the same as for the CLI and the
console. No page takes an application from the request: the link names it.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from hookline.console.dead_letters import dead_letter_actions
from hookline.console.endpoint_forms import add_from_form, endpoint_id, endpoint_pages
from hookline.console.endpoints import endpoint_page
from hookline.console.events import log_values, replay_then_show
from hookline.console.visit import Face, Routes, Visit
from hookline.service import dead_letter_selection as selection
from hookline.service import dead_letters, endpoint_setup, endpoints, events
from hookline.service.dead_letters import DeadLetterQuery

routes = Routes("portal")

#: Rows per page unless ``?limit=`` asks for another number (the service bounds it).
PAGE_SIZE = 50
#: The portal's notices after an action (fixed texts: the query string adds no words).
NOTICES = {
    "paused": "Endpoint paused: deliveries wait until it is resumed.",
    "resumed": "Endpoint resumed: waiting deliveries go out within its rate limit.",
    "subscribed": "Subscriptions saved: they apply to events published from now on.",
    "url-changed": "URL saved: the next attempt goes to the new URL.",
    "disabled": "Endpoint disabled: new deliveries are dead-lettered until it is enabled.",
    "enabled": "Endpoint enabled: new deliveries go out again.",
    "replayed": "Replay scheduled.",
}
#: The dead-letter filters the portal offers (the service checks each value).
LETTER_FILTERS = ("endpoint", "reason", "since", "until")
#: The portal's face: a tenant's facts only, no action to a read-only link.
PORTAL = Face("portal_base.html", {
    "endpoint": "portal.endpoint_show", "pause": "portal.pause", "resume": "portal.resume",
    "rotate_secret": "portal.rotate_secret", "subscriptions": "portal.subscriptions",
    "disable": "portal.disable", "enable": "portal.enable", "url": "portal.change_url",
    "test_event": "portal.test_event", "test_event_outcome": "portal.test_event_outcome",
    "events": "portal.event_search", "event_replay": "portal.event_replay",
    "letters": "portal.letter_list", "letter": "portal.letter_show",
    "letter_replay": "portal.letter_replay", "letter_select": "portal.letter_selection",
    "letter_delete": "portal.letter_delete", "letter_replay_selected":
    "portal.letter_replay_selected", "letter_purge": "portal.letter_purge_confirm",
    "letter_purge_start": "portal.letter_purge",
})


def render(visit: Visit, template: str, *, status: int = 200, **values: Any) -> Response:
    """``template`` with the portal's notice and the application's id and name."""
    return visit.render(template, status=status, app_id=visit.actor.app_scope,
                        app_name=endpoint_setup.app_name(visit.actor),
                        portal_notice=NOTICES.get(visit.param("notice")), **values)


@routes.get("/")
def home(visit: Visit) -> Response:
    """The application's endpoints, a page at a time, and the form to add one."""
    page = endpoints.list_endpoints(visit.actor, app=visit.actor.app_scope,
                                    cursor=visit.param("cursor") or None,
                                    limit=visit.limit(PAGE_SIZE))
    return render(visit, "portal_home.html", page=page,
                  choices=endpoint_setup.subscription_choices(visit.actor))


@routes.post("/endpoints")
def endpoint_add(visit: Visit) -> Response:
    """Add an endpoint to the application; a generated secret is shown in this answer only."""
    return add_from_form(visit, render, app=visit.actor.app_scope)


@routes.get("/endpoints/<endpoint_id>")
def endpoint_show(visit: Visit) -> Response:
    return render(visit, "endpoint.html", **endpoint_page(visit, endpoint_id(visit)))


endpoint_pages(routes, render, actions=("pause", "resume", "enable"),
               disable_reason=lambda visit: "disabled in the portal")


@routes.get("/events")
def event_search(visit: Visit) -> Response:
    """The application's event log (its endpoints' rows only); with ``?event_id=``, that
    event of the application: each of its endpoints' outcome and attempts."""
    query = {"event_id": visit.param("event_id"), "endpoint": visit.param("endpoint")}
    if query["event_id"]:
        report = events.find_event(visit.actor, query["event_id"],
                                   endpoint=query["endpoint"] or None)
        return render(visit, "events.html", query=query, report=report,
                      blocked=selection.blocked_entries(visit.actor, report.dead_letters()))
    return render(visit, "events.html", query=query, report=None, **log_values(visit))


@routes.post("/events/replay")
def event_replay(visit: Visit) -> Response:
    return replay_then_show(visit, "portal.event_search")


def _letter_query(params: Any) -> DeadLetterQuery:
    """The filters the portal offers, from the query string or a form (others ignored)."""
    return DeadLetterQuery.from_params({name: params.get(name, "") for name in LETTER_FILTERS
                                        if params.get(name)})


@routes.get("/dead-letters")
def letter_list(visit: Visit) -> Response:
    query = _letter_query(visit.request.args)
    page = dead_letters.list_page(visit.actor, query, visit.param("cursor") or None,
                                  visit.limit(PAGE_SIZE))
    return render(visit, "dead_letters.html", page=page, query=query, params=query.to_params(),
                  form={name: visit.param(name) for name in LETTER_FILTERS},
                  reasons=sorted(dead_letters.REASONS), reason_texts=dead_letters.REASONS)


@routes.get("/dead-letters/entry")
def letter_show(visit: Visit) -> Response:
    entry = dead_letters.get(visit.actor, visit.param("id"))
    return render(visit, "dead_letter.html", entry=entry,
                  blocked=selection.blocked_entries(visit.actor, [entry]))


dead_letter_actions(routes, _letter_query, render)
