"""The event pages: search by event id (optionally at one endpoint, or in one application);
each endpoint's outcome (delivered, dead-lettered and why, scheduled and when, in flight) with
every kept attempt (time, status, latency, error, response excerpt); replay of a dead-lettered
delivery under the same event id.

Response excerpts and event types come from outside: the templates escape them like
everything else, and the CSP would stop a script that got through.
"""

from __future__ import annotations

from werkzeug.wrappers import Response

from hookline.console.visit import Routes, Visit
from hookline.service import events

routes = Routes("events")


@routes.get("/events")
def event_search(visit: Visit) -> Response:
    """The search form; with ``?event_id=`` the event's report. ``?endpoint=`` looks at that
    endpoint only (a direct read, no search through the keyspace); without it the search
    stops after ``SEARCH_SECONDS`` and the page says so."""
    query = {"event_id": visit.param("event_id"), "endpoint": visit.param("endpoint"),
             "app": visit.param("app")}
    report = None
    if query["event_id"]:
        report = events.find_event(visit.actor, query["event_id"],
                                   endpoint=query["endpoint"] or None,
                                   app=query["app"] or None, budget=events.SEARCH_SECONDS)
    return visit.render("events.html", query=query, report=report)


@routes.post("/events/replay")
def replay(visit: Visit) -> Response:
    return replay_then_show(visit, "events.event_search")


def replay_then_show(visit: Visit, search_page: str) -> Response:
    """Replay one dead-lettered delivery (``endpoint_id`` and ``event_id`` in the form), then
    show its event at that endpoint (``search_page``: the console's or the portal's)."""
    endpoint_id, event_id = visit.form("endpoint_id"), visit.form("event_id")
    events.replay_event(visit.actor, endpoint_id, event_id)
    return visit.redirect(search_page, {"event_id": event_id, "endpoint": endpoint_id,
                                        "notice": "replayed"})
