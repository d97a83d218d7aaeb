"""The application and endpoint pages: the applications, a paginated list of endpoints (by
application, by id search), one endpoint's health (an ordered endpoint's: its first keys'
lines too), and its actions (pause and resume, disable
and enable, breaker reset, secret rotation; its URL, its subscriptions picked from the event
catalog, a test event and its outcome: :mod:`hookline.console.endpoint_forms`), and the form
that adds an endpoint.

Each action is one service call: the service refuses a read-only actor, keeps a tenant inside
its application and writes the audit entry. A rotated secret is shown once, in the answer to
the POST that made it (no redirect, ``Cache-Control: no-store``), and never again.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from hookline.console.chart import line_chart
from hookline.console.endpoint_forms import add_from_form, endpoint_pages, plain
from hookline.console.visit import Routes, Visit
from hookline.service import (
    apps,
    endpoint_health,
    endpoint_setup,
    endpoint_status,
    endpoints,
    ordering,
)
from hookline.store.health import MinuteHealth

routes = Routes("endpoints")

#: Applications or endpoints per page unless ``?limit=`` asks for another number (the
#: service bounds it).
PAGE_SIZE = 50
#: Ordering keys an ordered endpoint's page lists, those with the most waiting first.
PAGE_LINES = 20
#: The health chart's spans a reader can pick (``?span=``, minutes); the first is the default.
HEALTH_SPANS = {1440: "day", 360: "6 hours", 60: "hour"}


@routes.get("/apps")
def app_list(visit: Visit) -> Response:
    """The applications (a tenant: its own), each with its number of endpoints, a page at a
    time."""
    page = apps.apps_page(visit.actor, cursor=visit.param("cursor") or None,
                          limit=visit.limit(PAGE_SIZE))
    return visit.render("apps.html", page=page)


@routes.get("/endpoints")
def endpoint_list(visit: Visit) -> Response:
    query = {"app": visit.param("app"), "search": visit.param("search")}
    page = endpoints.list_endpoints(visit.actor, app=query["app"] or None,
                                    search=query["search"] or None,
                                    cursor=visit.param("cursor") or None,
                                    limit=visit.limit(PAGE_SIZE))
    return visit.render("endpoints.html", page=page, query=query)


def endpoint_page(visit: Visit, endpoint_id: str) -> dict[str, Any]:
    """What endpoint.html draws, on the console and the portal alike: the endpoint's health
    (its status line, the chart of its attempts per minute, its latest attempts) and, when it
    is ordered, its first :data:`PAGE_LINES` keys' lines (else None)."""
    health = endpoints.endpoint_health(visit.actor, endpoint_id)
    lines = (ordering.key_lines(visit.actor, endpoint_id, limit=PAGE_LINES)
             if health.summary.public["ordered"] else None)
    text = visit.param("span")
    span = int(text) if text.isdigit() and int(text) in HEALTH_SPANS else next(iter(HEALTH_SPANS))
    minutes = endpoint_health.health_minutes(visit.actor, endpoint_id, minutes=span)
    return {"health": health, "endpoint": health.summary, "lines": lines,
            "choices": endpoint_setup.subscription_choices(visit.actor),
            "now_status": endpoint_status.endpoint_status(visit.actor, endpoint_id),
            "attempts": endpoint_health.latest_attempts(visit.actor, endpoint_id),
            "span": span, "spans": HEALTH_SPANS, **health_charts(minutes)}


def health_charts(minutes: list[MinuteHealth]) -> dict[str, Any]:
    """The two charts of an endpoint's minutes (success rate in %, p50 and p95 latency in
    ms; a minute without attempts is a gap) and the span's totals."""
    starts = [minute.start for minute in minutes]
    rate = line_chart(starts, {"success rate": [
        None if minute.success_rate is None else 100 * minute.success_rate
        for minute in minutes]}, height=180, peak=100, unit="%", chart_id="health-rate-chart",
        title="Success rate per minute (%)")
    latency = line_chart(starts, {
        "p50": [None if minute.p50 is None else 1000 * minute.p50 for minute in minutes],
        "p95": [None if minute.p95 is None else 1000 * minute.p95 for minute in minutes]},
        height=200, unit=" ms", chart_id="health-latency-chart",
        title="Latency per minute, p50 and p95 (ms)")
    delivered = sum(minute.delivered for minute in minutes)
    failed = sum(minute.failed for minute in minutes)
    buckets: dict[int, int] = {}
    for minute in minutes:
        for bucket, n in minute.buckets.items():
            buckets[bucket] = buckets.get(bucket, 0) + n
    whole = MinuteHealth(start=0, delivered=delivered, failed=failed, buckets=buckets)
    return {"rate_chart": rate, "latency_chart": latency, "span_health": whole,
            "busy_minutes": sum(1 for minute in minutes if minute.attempts)}


@routes.get("/endpoints/<endpoint_id>")
def endpoint_show(visit: Visit) -> Response:
    return visit.render("endpoint.html", **endpoint_page(visit, str(visit.args["endpoint_id"])))


@routes.get("/new-endpoint")
def endpoint_new(visit: Visit) -> Response:
    """The form that adds an endpoint (the CLI's ``endpoint add``, its first options)."""
    return visit.render("endpoint_new.html",
                        choices=endpoint_setup.subscription_choices(visit.actor),
                        app=visit.param("app"))


@routes.post("/endpoints")
def endpoint_add(visit: Visit) -> Response:
    """Add an endpoint; a generated secret is shown in this answer only, never again."""
    return add_from_form(visit, plain, app=visit.form("app") or None)


endpoint_pages(routes, plain, actions=("pause", "resume", "enable", "reset_breaker"),
               disable_reason=lambda visit: visit.form("reason") or "disabled by operator")
