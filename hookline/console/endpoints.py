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
from hookline.console.endpoint_forms import (
    add_from_form,
    plain,
    show_test_outcome,
    subscriptions_from_form,
    test_event_from_form,
    url_from_form,
)
from hookline.console.visit import Routes, Visit
from hookline.service import (
    apps,
    endpoint_actions,
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


def _done(visit: Visit, notice: str) -> Response:
    return visit.redirect("endpoints.endpoint_show", {"notice": notice},
                          endpoint_id=visit.args["endpoint_id"])


@routes.post("/endpoints/<endpoint_id>/pause")
def pause(visit: Visit) -> Response:
    endpoint_actions.pause(visit.actor, str(visit.args["endpoint_id"]))
    return _done(visit, "paused")


@routes.post("/endpoints/<endpoint_id>/resume")
def resume(visit: Visit) -> Response:
    endpoint_actions.resume(visit.actor, str(visit.args["endpoint_id"]))
    return _done(visit, "resumed")


@routes.post("/endpoints/<endpoint_id>/disable")
def disable(visit: Visit) -> Response:
    reason = visit.form("reason") or "disabled by operator"
    endpoint_actions.disable(visit.actor, str(visit.args["endpoint_id"]), reason)
    return _done(visit, "disabled")


@routes.post("/endpoints/<endpoint_id>/enable")
def enable(visit: Visit) -> Response:
    endpoint_actions.enable(visit.actor, str(visit.args["endpoint_id"]))
    return _done(visit, "enabled")


@routes.post("/endpoints/<endpoint_id>/reset-breaker")
def reset_breaker(visit: Visit) -> Response:
    endpoint_actions.reset_breaker(visit.actor, str(visit.args["endpoint_id"]))
    return _done(visit, "breaker-reset")


@routes.post("/endpoints/<endpoint_id>/rotate-secret")
def rotate_secret(visit: Visit) -> Response:
    rotated = endpoint_actions.rotate_secret(visit.actor, str(visit.args["endpoint_id"]),
                                             signature=visit.form("signature") or None)
    return visit.render("secret.html", endpoint_id=rotated.summary.id, secret=rotated.secret,
                        public_key=rotated.public_key, added=False,
                        previous_until=rotated.previous_until)


@routes.post("/endpoints/<endpoint_id>/url")
def change_url(visit: Visit) -> Response:
    url_from_form(visit)
    return _done(visit, "url-changed")


@routes.post("/endpoints/<endpoint_id>/subscriptions")
def subscriptions(visit: Visit) -> Response:
    subscriptions_from_form(visit)
    return _done(visit, "subscribed")


@routes.post("/endpoints/<endpoint_id>/test-event")
def test_event(visit: Visit) -> Response:
    return test_event_from_form(visit, "endpoints.test_event_show")


@routes.get("/endpoints/<endpoint_id>/test-events/<event_id>")
def test_event_show(visit: Visit) -> Response:
    return show_test_outcome(visit, plain, fragment=False)


@routes.get("/endpoints/<endpoint_id>/test-events/<event_id>/outcome")
def test_event_outcome(visit: Visit) -> Response:
    return show_test_outcome(visit, plain, fragment=True)
