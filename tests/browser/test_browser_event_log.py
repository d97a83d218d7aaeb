"""The event log in a real Chromium, with a real worker and a real receiver: an operator finds
the failed events of one endpoint in the last hour without knowing an id (the filters, then a
row's link to the event's attempts); a tenant's log shows only its application's events, and
another application's endpoint in its filter answers as an unknown one does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from examples.receiver import Receiver, Reply, always
from tests.browser.test_browser_portal import enter, portal, tenant_data
from tests.browser.test_browser_xss import assert_inert, payload
from tests.conftest import wait_until
from tests.support.browser import Browser, console_path, unique


def endpoint_answering(receiver: Receiver, reply: Reply, **options: Any) -> str:
    from hookline.store.endpoints import EndpointRegistry

    endpoint_id = unique("ep")
    EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", always(reply)),
                           **options)
    return endpoint_id


def log_status(endpoint_id: str, event_id: str) -> str | None:
    from hookline.store.event_log_pages import EventLogPages

    row = EventLogPages().get(endpoint_id, event_id)
    return row.status if row else None


def shown(browser: Browser) -> list[str]:
    return [row.get_attribute("data-entry-id")
            for row in browser.css("#event-log-table tr[data-entry-id]")]


def test_an_operator_finds_an_endpoints_failed_events_of_the_last_hour_and_their_attempts(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    import hookline
    from hookline.store.event_log import EventLog

    failing = endpoint_answering(receiver, Reply(503), retry_policy={
        "max_attempts": 2, "initial_backoff": 0.2, "max_backoff": 0.2, "jitter": 0})
    healthy = endpoint_answering(receiver, Reply(204))
    failed = [unique("evt") for _ in range(2)]
    delivered = [unique("evt") for _ in range(2)]
    for event_id in failed:
        hookline.send_webhook(failing, "order.paid", {"n": 1}, event_id=event_id)
    for event_id in delivered:
        hookline.send_webhook(healthy, "order.paid", {"n": 1}, event_id=event_id)
        hookline.send_webhook(failing, "order.created", {"n": 1}, event_id=event_id + "-x")
    # A failure of the same endpoint two hours ago: outside the window asked for.
    old = unique("evt")
    EventLog().record(failing, old, "dead", event_type="order.paid", attempts=2,
                      last_status=503, at_ms=int((time.time() - 7200) * 1000))
    wait_until(lambda: all(log_status(failing, e) == "dead" for e in failed)
               and all(log_status(healthy, e) == "delivered" for e in delivered)
               and all(log_status(failing, e + "-x") == "dead" for e in delivered),
               timeout=60, what="the events' fates in the log")

    browser.open(console_path("events.event_search"))
    assert f"{healthy}/{delivered[0]}" in shown(browser)  # recent events, unfiltered
    browser.by_id("log-endpoint").send_keys(failing)
    browser.js("document.getElementById('log-status').value = 'dead';")
    browser.by_id("log-type").send_keys("order.pa")
    browser.by_id("log-since").send_keys("1h")
    browser.click("#log-filter")
    browser.wait(lambda page: "status=dead" in page.driver.current_url)
    assert browser.status() == 200
    # Exactly the endpoint's failed events of the hour, newest change first (the worker
    # dead-letters them in whatever order its threads finish).
    from hookline.store.event_log_pages import EventLogPages

    rows = [EventLogPages().get(failing, event_id) for event_id in failed]
    newest_first = sorted(rows, key=lambda row: (row.changed_at, row.entry_id), reverse=True)
    assert shown(browser) == [row.entry_id for row in newest_first]
    assert {row.get_attribute("data-status")
            for row in browser.css("#event-log-table tr[data-entry-id]")} == {"dead"}
    assert "503" in browser.by_id("event-log-table").text
    assert '"n"' not in browser.driver.page_source  # no payload on the log

    browser.click(f"#event-log-table tr[data-entry-id='{failing}/{failed[0]}'] a.event-link")
    browser.wait(lambda page: page.css("#event-report"))
    report = browser.by_id("event-report")
    assert report.get_attribute("data-event-id") == failed[0]
    assert report.text.count("failed 503") == 2  # both attempts, with their status

    browser.open(console_path("events.event_search", {"status": "lost"}))
    assert browser.status() == 400
    assert "status 'lost' is not one of delivered, retrying, held, dead" in browser.text


def test_a_tenants_log_shows_only_its_applications_events(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    a, b = tenant_data(receiver), tenant_data(receiver)
    enter(tenant, portal_link(a.app_id))
    tenant.open(portal("/events"))
    assert tenant.status() == 200
    assert shown(tenant) == [a.letter_id]
    assert b.endpoint_id not in tenant.text and b.event_id not in tenant.text

    tenant.open(portal(f"/events?endpoint={b.endpoint_id}"))
    other = (tenant.status(), tenant.by_id("error").text)
    tenant.open(portal("/events?endpoint=ep-nobody-has"))
    unknown = (tenant.status(), tenant.by_id("error").text)
    assert other[0] == unknown[0] == 404
    assert other[1].replace(b.endpoint_id, "X") == unknown[1].replace("ep-nobody-has", "X")
    assert b.event_id not in tenant.text


def test_markup_in_an_event_type_and_id_is_shown_as_text_on_the_log(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    from hookline.store.event_log import EventLog

    endpoint_id = endpoint_answering(receiver, Reply(204))
    event_type, event_id = payload("log-type"), "<svg/id=xss-log-id/onload=window.__xss=1>"
    EventLog().record(endpoint_id, event_id, "retrying", event_type=event_type, attempts=1)
    browser.open(console_path("events.event_search", {"endpoint": endpoint_id}))
    assert shown(browser) == [f"{endpoint_id}/{event_id}"]
    assert_inert(browser, event_type, event_id)
    browser.open(console_path("events.event_search", {"type": payload("log-filter")}))
    assert_inert(browser)
    assert browser.by_id("log-type").get_attribute("value") == payload("log-filter")
    assert not browser.js("return document.querySelectorAll('script:not([src])').length")
