"""Endpoint health in a real Chromium: the console's and the portal's endpoint page draw the
chart of the endpoint's minutes (server-drawn SVG, no script, nothing the CSP refuses) and
list its latest attempts, each linking to its event, the response excerpt redacted and escaped;
the status line says what holds the endpoint; a tenant opening another application's
endpoint gets 404, as for an unknown id."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from examples.receiver import Receiver
from tests.browser.test_browser_portal import enter, portal
from tests.support.browser import Browser, unique

SECRET_SEGMENT = "tok_1a2b3c4d5e6f"
HOSTILE = "<script>window.pwned=1</script>"


def health_written(endpoint_id: str, statuses: list[int]) -> list[str]:
    """Attempts at ``endpoint_id`` counted and written the way a worker does
    (``hookline.worker.health``), one a few seconds apart; returns their event ids."""
    from hookline.store.history import AttemptRecord
    from hookline.worker.health import HealthTally

    tally = HealthTally(interval=0)
    now = time.time()
    event_ids = []
    for n, status in enumerate(statuses):
        event_id = unique("evt")
        event_ids.append(event_id)
        body = f"no route for /in/{SECRET_SEGMENT} {HOSTILE}" if status >= 500 else "ok"
        tally.observe(endpoint_id, event_id, AttemptRecord(
            attempt=1, at=now - 600 + 7 * n, outcome="delivered" if status < 300 else "failed",
            status=status, latency=0.02 + 0.01 * (n % 5), response=body))
    assert tally.flush() > 0
    return event_ids


def endpoint_with_health(app_id: str | None = None) -> tuple[str, list[str]]:
    from hookline.store.apps import AppRegistry
    from hookline.store.endpoints import EndpointRegistry

    if app_id is not None:
        AppRegistry().add(app_id)
    endpoint_id = unique("ep")
    EndpointRegistry().add(endpoint_id, f"https://example.com/in/{SECRET_SEGMENT}", app=app_id)
    return endpoint_id, health_written(endpoint_id, [200, 200, 503, 200, 500, 200])


def check_page(page: Browser, event_ids: list[str]) -> None:
    assert page.status() == 200
    for chart in ("health-rate-chart", "health-latency-chart"):
        svg = page.by_id(chart)
        assert svg.tag_name == "svg" and svg.is_displayed()
    lines = page.css("#health-rate-chart [data-series='success rate']")
    assert len(lines) == 1 and lines[0].get_attribute("d")
    assert {e.get_attribute("data-series") for e in page.css("#health-latency-chart path")} \
        == {"p50", "p95"}
    section = page.by_id("endpoint-health-chart")
    assert (section.get_attribute("data-delivered"), section.get_attribute("data-failed")) \
        == ("4", "2")
    rows = page.css("#endpoint-attempts tbody tr")
    assert [row.get_attribute("data-event-id") for row in rows] == event_ids[::-1]
    assert [row.get_attribute("data-status") for row in rows] == [
        "200", "500", "200", "503", "200", "200"]
    link = rows[1].find_element("css selector", "a")
    assert event_ids[4] in link.get_attribute("href")
    text = page.text
    assert SECRET_SEGMENT not in page.driver.page_source
    assert f"no route for /in/*** {HOSTILE}" in text  # shown as text, never run
    assert page.js("return window.pwned === undefined")
    assert "delivering" in page.by_id("endpoint-status").text
    assert not [m for m in page.console_errors() if "Content Security Policy" in m]


def test_the_console_endpoint_page_shows_the_chart_and_the_attempts(
        browser: Browser, console_state: redis.Redis) -> None:
    endpoint_id, event_ids = endpoint_with_health()
    browser.open(f"/endpoints/{endpoint_id}")
    browser.driver.get_log("browser")
    browser.open(f"/endpoints/{endpoint_id}")
    check_page(browser, event_ids)
    browser.click(f"#endpoint-attempts tr[data-event-id='{event_ids[2]}'] a")
    browser.wait(lambda page: event_ids[2] in page.text)
    # A breaker holding the endpoint is the status line, not the retry policy.
    from hookline.store import keys

    now_ms = int(time.time() * 1000)
    console_state.hset(keys.breaker_key(endpoint_id), mapping={
        "state": "open", "failures": 5, "opened_at": now_ms - 60_000,
        "open_until": now_ms + 240_000})
    browser.open(f"/endpoints/{endpoint_id}")
    status = browser.by_id("endpoint-status")
    assert status.get_attribute("data-tone") == "failing"
    assert status.text.startswith("breaker open since ") and "next probe" in status.text


def test_the_portal_endpoint_page_shows_its_health_and_no_other_applications(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    app_a, app_b = unique("app"), unique("app")
    endpoint_a, events_a = endpoint_with_health(app_a)
    endpoint_b, _ = endpoint_with_health(app_b)
    enter(tenant, portal_link(app_a))
    tenant.driver.get_log("browser")
    tenant.open(portal(f"/endpoints/{endpoint_a}"))
    check_page(tenant, events_a)
    tenant.open(portal(f"/endpoints/{endpoint_b}"))
    assert tenant.status() == 404
    foreign = tenant.text.replace(endpoint_b, "X")
    tenant.open(portal(f"/endpoints/{unique('ep')}?span=60"))
    assert tenant.status() == 404
    assert endpoint_b not in foreign and "health-rate-chart" not in tenant.driver.page_source
