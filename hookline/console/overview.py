"""The pages about the whole system: the overview (``hookline stats``' screen), the retry
schedule, deliveries and outcomes over time (a server-drawn SVG chart), and the audit log; and
the template filters every page uses to show times, shares and durations.
"""

from __future__ import annotations

import time
from typing import Any

from werkzeug.wrappers import Response

from hookline.console.chart import line_chart
from hookline.console.visit import Routes, Visit
from hookline.service import audit, endpoint_health
from hookline.service import schedule as retry_schedule
from hookline.service import stats as service_stats

routes = Routes("overview")

#: Audit entries and schedule rows per page.
PAGE_SIZE = 50
#: The stats chart's spans a reader can pick, minutes.
CHART_SPANS = {60: "hour", 360: "6 hours", 1440: "day"}
#: The outcomes the chart draws first, in this order (each keeps its colour).
CHART_OUTCOMES = ("delivered", "retry_scheduled", "dead_lettered", "deferred")
#: Breakers needing attention the overview lists.
OVERVIEW_ROWS = service_stats.ATTENTION_ROWS
#: Disabled endpoints, and failing ones, the overview lists (each counted in full).
TROUBLED_ROWS = 200


# -- filters ---------------------------------------------------------------------------------


def when(at: float | None) -> str:
    """Unix seconds as a UTC time (``2025-05-01 12:00:03 UTC``); "-" for none."""
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(at)))


def percent(share: float | None) -> str:
    """A share as a percentage (``97.5 %``); "-" before there is one."""
    return "-" if share is None else f"{100 * share:.1f} %"


def seconds(value: float | None) -> str:
    """A duration: ``850 ms``, ``12.5 s``, ``3.2 h``, ``2.1 days``."""
    if value is None:
        return "-"
    value = float(value)
    for size, unit in ((86400, "days"), (3600, "h"), (60, "min")):
        if value >= 2 * size:
            return f"{value / size:.1f} {unit}"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def endpoint_state(endpoint: Any) -> str:
    """What an endpoint does with new deliveries: disabled, paused or enabled."""
    if not endpoint.enabled:
        return "disabled"
    return "paused" if endpoint.paused else "enabled"


FILTERS = {"when": when, "percent": percent, "seconds": seconds, "endpoint_state": endpoint_state}



# -- pages -----------------------------------------------------------------------------------


@routes.get("/")
def overview(visit: Visit) -> Response:
    """What an operator asks first; its figures refresh. Bounded whatever the number of
    endpoints (``service.stats.overview``): ``hookline stats`` is the full screen."""
    return visit.render("overview.html", **_overview_figures(visit))


@routes.get("/overview/fragment")
def overview_fragment(visit: Visit) -> Response:
    """The overview's figures alone: the overview page refreshes itself with them."""
    return visit.render("_overview_figures.html", **_overview_figures(visit))


def _overview_figures(visit: Visit) -> dict[str, Any]:
    """The figures, the last hour's totals, and every disabled or failing endpoint (at most
    :data:`TROUBLED_ROWS` of each listed, all counted)."""
    return {"overview": service_stats.overview(visit.actor), "most": OVERVIEW_ROWS,
            "hour": endpoint_health.last_hour(visit.actor),
            "troubled": endpoint_health.troubled_endpoints(visit.actor, limit=TROUBLED_ROWS)}


@routes.get("/schedule")
def schedule(visit: Visit) -> Response:
    """The retry schedule: totals and the busiest endpoints (refreshing), and the retries due
    soonest (of ``?endpoint=``, a page at a time)."""
    endpoint = visit.param("endpoint") or None
    retries = retry_schedule.soonest_retries(visit.actor, endpoint=endpoint,
                                             cursor=visit.param("retries_cursor") or None,
                                             limit=visit.limit(PAGE_SIZE))
    return visit.render("schedule.html", retries=retries, endpoint=endpoint or "",
                        **_schedule_figures(visit))


@routes.get("/schedule/fragment")
def schedule_fragment(visit: Visit) -> Response:
    """The schedule's totals, due counts and waiting bulk replay jobs alone, for the page's
    self-refresh."""
    return visit.render("_schedule_figures.html", **_schedule_figures(visit))


def _schedule_figures(visit: Visit) -> dict[str, Any]:
    cursor = visit.param("cursor") or None
    return {"stats": retry_schedule.schedule_stats(visit.actor),
            "counts": retry_schedule.due_counts(visit.actor, cursor=cursor,
                                                limit=visit.limit(PAGE_SIZE)),
            "waiting_jobs": retry_schedule.waiting_jobs(visit.actor),
            "cursor": cursor or ""}


@routes.get("/stats")
def stats(visit: Visit) -> Response:
    """Deliveries and outcomes per minute over the last ``?minutes=`` (60 by default), as
    the workers counted them, drawn as an SVG chart with the numbers in a table under it."""
    text = visit.param("minutes")
    minutes = int(text) if text.isdigit() else next(iter(CHART_SPANS))
    series = service_stats.series(visit.actor, minutes=minutes)
    outcomes = _outcomes(series)
    chart = line_chart([point.start for point in series],
                       {outcome: [point.counts.get(outcome, 0) for point in series]
                        for outcome in outcomes},
                       title=f"Outcomes per minute, last {minutes} minutes")
    return visit.render("stats.html", chart=chart, series=series, outcomes=outcomes,
                        minutes=minutes, spans=CHART_SPANS)


def _outcomes(series: list[service_stats.MinuteOutcomes]) -> list[str]:
    """The outcomes the series holds: the usual ones first, in a fixed order (so that each
    keeps its colour), then any other by name."""
    seen = {name for point in series for name in point.counts}
    return [name for name in CHART_OUTCOMES if name in seen] + sorted(seen - set(CHART_OUTCOMES))


@routes.get("/audit")
def audit_log(visit: Visit) -> Response:
    page = audit.recent(visit.actor, limit=visit.limit(PAGE_SIZE),
                        before=visit.param("cursor") or None)
    return visit.render("audit.html", page=page)
