"""The event pages: the event log (recent events newest first, filtered by endpoint, type
prefix, status and time window, each row a link to the event below); search by event id
(optionally at one endpoint, or in one application); each endpoint's outcome (delivered,
dead-lettered and why, scheduled and when, in flight) with every kept attempt (time, status,
latency, error, response excerpt); replay of a dead-lettered delivery under the same event id.

Response excerpts and event types come from outside: the templates escape them like
everything else, and the CSP would stop a script that got through.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from hookline.console.visit import Routes, Visit
from hookline.service import dead_letter_selection as selection
from hookline.service import event_log, events

routes = Routes("events")

#: Rows per page of the event log.
LOG_PAGE_SIZE = 50


@routes.get("/events")
def event_search(visit: Visit) -> Response:
    """The search form; with ``?event_id=`` the event's report. ``?endpoint=`` looks at that
    endpoint only (a direct read, no search through the keyspace); without it the search
    stops after ``SEARCH_SECONDS`` and the page says so. Without an event id: the event log
    (:func:`log_values`)."""
    query = {"event_id": visit.param("event_id"), "endpoint": visit.param("endpoint"),
             "app": visit.param("app")}
    report = None
    if query["event_id"]:
        report = events.find_event(visit.actor, query["event_id"],
                                   endpoint=query["endpoint"] or None,
                                   app=query["app"] or None, budget=events.SEARCH_SECONDS)
        return visit.render("events.html", query=query, report=report,
                            blocked=selection.blocked_entries(visit.actor, report.dead_letters()))
    return visit.render("events.html", query=query, report=report, **log_values(visit))


def log_values(visit: Visit) -> dict[str, Any]:
    """The event log's page for the query string's filters (``endpoint``, ``type``,
    ``status``, ``since``, ``until``, ``cursor``), as events.html draws it: a bad value is
    refused in one line (400), an endpoint out of scope answers as an unknown one (404)."""
    log_query = event_log.LogQuery.from_params(visit.request.args)
    listing = event_log.list_page(visit.actor, log_query, visit.param("cursor") or None,
                                  visit.limit(LOG_PAGE_SIZE))
    return {"log": listing, "log_query": log_query, "log_params": log_query.to_params(),
            "log_form": {name: visit.param(name) for name in event_log.PARAMS},
            "log_statuses": event_log.STATUSES, "log_retention": event_log.retention_text()}


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
