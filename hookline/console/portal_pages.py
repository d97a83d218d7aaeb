"""The tenant portal's pages: the application's endpoints (add one, edit its subscriptions,
rotate its secret, pause and resume it), its events with their attempts, and its dead letters
(replay one).

Each page is one service call with the tenant's scoped actor: which endpoints, events and dead
letters belong to the application, what a read-only link may do and how an endpoint is checked
(its URL's SSRF rules included) are the service's decisions, the same as for the CLI and the
console. No page takes an application from the request: the link names it.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from hookline.console.endpoints import endpoint_page
from hookline.console.events import replay_then_show
from hookline.console.visit import Face, Routes, Visit
from hookline.service import dead_letters, endpoint_actions, endpoints, events
from hookline.service.dead_letters import DeadLetterQuery

routes = Routes("portal")

#: Rows per page unless ``?limit=`` asks for another number (the service bounds it).
PAGE_SIZE = 50
#: The portal's notices after an action (fixed texts: the query string adds no words).
NOTICES = {
    "paused": "Endpoint paused: deliveries wait until it is resumed.",
    "resumed": "Endpoint resumed: waiting deliveries go out within its rate limit.",
    "subscribed": "Subscriptions saved: they apply to events published from now on.",
    "replayed": "Replay scheduled.",
}
#: The dead-letter filters the portal offers (the service checks each value).
LETTER_FILTERS = ("endpoint", "reason", "since", "until")
#: The portal's face: a tenant's facts only, no action to a read-only link.
PORTAL = Face("portal_base.html", {
    "endpoint": "portal.endpoint_show", "pause": "portal.pause", "resume": "portal.resume",
    "rotate_secret": "portal.rotate_secret", "subscriptions": "portal.subscriptions",
    "events": "portal.event_search", "event_replay": "portal.event_replay",
    "letters": "portal.letter_list", "letter": "portal.letter_show",
    "letter_replay": "portal.letter_replay",
})


def render(visit: Visit, template: str, *, status: int = 200, **values: Any) -> Response:
    """``template`` with the portal's notice and the application's name."""
    return visit.render(template, status=status, app_id=visit.actor.app_scope,
                        portal_notice=NOTICES.get(visit.param("notice")), **values)


def _endpoint_id(visit: Visit) -> str:
    return str(visit.args["endpoint_id"])


def _names(text: str) -> list[str]:
    """Event types as typed: separated by commas or spaces."""
    return [name for name in text.replace(",", " ").split() if name]


@routes.get("/")
def home(visit: Visit) -> Response:
    """The application's endpoints, a page at a time, and the form to add one."""
    page = endpoints.list_endpoints(visit.actor, app=visit.actor.app_scope,
                                    cursor=visit.param("cursor") or None,
                                    limit=visit.limit(PAGE_SIZE))
    return render(visit, "portal_home.html", page=page)


@routes.post("/endpoints")
def endpoint_add(visit: Visit) -> Response:
    """Add an endpoint to the application; a generated secret is shown in this answer only."""
    added = endpoint_actions.add_endpoint(
        visit.actor, visit.form("endpoint_id"), visit.form("url"),
        event_types=_names(visit.form("event_types")) or None, app=visit.actor.app_scope,
        signature=visit.form("signature") or None)
    return render(visit, "secret.html", endpoint_id=added.summary.id, secret=added.secret,
                  public_key=added.public_key, added=True, previous_until=[])


@routes.get("/endpoints/<endpoint_id>")
def endpoint_show(visit: Visit) -> Response:
    return render(visit, "endpoint.html", **endpoint_page(visit, _endpoint_id(visit)))


def _back(visit: Visit, notice: str) -> Response:
    return visit.redirect("portal.endpoint_show", {"notice": notice},
                          endpoint_id=_endpoint_id(visit))


@routes.post("/endpoints/<endpoint_id>/subscriptions")
def subscriptions(visit: Visit) -> Response:
    """Set the event types the endpoint receives (none: every type)."""
    endpoint_actions.update_endpoint(visit.actor, _endpoint_id(visit),
                                     event_types=_names(visit.form("event_types")) or "none")
    return _back(visit, "subscribed")


@routes.post("/endpoints/<endpoint_id>/pause")
def pause(visit: Visit) -> Response:
    endpoint_actions.pause(visit.actor, _endpoint_id(visit))
    return _back(visit, "paused")


@routes.post("/endpoints/<endpoint_id>/resume")
def resume(visit: Visit) -> Response:
    endpoint_actions.resume(visit.actor, _endpoint_id(visit))
    return _back(visit, "resumed")


@routes.post("/endpoints/<endpoint_id>/rotate-secret")
def rotate_secret(visit: Visit) -> Response:
    """A new signing secret, shown in this answer only (no redirect, not cached)."""
    rotated = endpoint_actions.rotate_secret(visit.actor, _endpoint_id(visit),
                                             signature=visit.form("signature") or None)
    return render(visit, "secret.html", endpoint_id=rotated.summary.id, secret=rotated.secret,
                  public_key=rotated.public_key, added=False,
                  previous_until=rotated.previous_until)


@routes.get("/events")
def event_search(visit: Visit) -> Response:
    """An event of the application by id: each of its endpoints' outcome and attempts."""
    query = {"event_id": visit.param("event_id"), "endpoint": visit.param("endpoint")}
    report = None
    if query["event_id"]:
        report = events.find_event(visit.actor, query["event_id"],
                                   endpoint=query["endpoint"] or None)
    return render(visit, "events.html", query=query, report=report)


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
                  reasons=sorted(dead_letters.REASONS))


@routes.get("/dead-letters/entry")
def letter_show(visit: Visit) -> Response:
    entry = dead_letters.get(visit.actor, visit.param("id"))
    return render(visit, "dead_letter.html", entry=entry)


@routes.post("/dead-letters/replay")
def letter_replay(visit: Visit) -> Response:
    dead_letters.replay_one(visit.actor, visit.form("entry_id"))
    back = _letter_query(visit.request.form).to_params()
    return visit.redirect("portal.letter_list", {**back, "notice": "replayed"})
