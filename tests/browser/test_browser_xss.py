"""Stored strings that come from outside never run in the console: an event type and an event
id given by the host's code, a receiver's response body, a reason typed into a form, an id in a
URL. Each payload would set ``window.__xss`` and add an element with a known id if it ran or
were parsed as HTML; the test asserts that neither happened and that the page shows the
payload as text.

The console's Content-Security-Policy would stop an inline script even if escaping failed, so
"no marker" alone would not prove the escaping: the element ids prove it (an ``<img>`` whose
``onerror`` the CSP blocks is still an element in the page when the markup was not escaped).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from examples.receiver import Receiver, Reply, always
from tests.conftest import wait_until
from tests.support.browser import Browser, console_path, forge_post, unique


def payload(tag: str) -> str:
    """Markup that, parsed as HTML, adds ``#xss-<tag>`` and sets ``window.__xss``."""
    return f'<img id="xss-{tag}" src="x" onerror="window.__xss=\'{tag}\'">'


#: An event id may hold any visible ASCII character but no space: ``/`` separates attributes.
ID_PAYLOAD = "<svg/id=xss-id/onload=window.__xss=1>"


def assert_inert(browser: Browser, *shown: str) -> None:
    """Nothing injected ran or became an element, and every string of ``shown`` is on the page
    as text."""
    time.sleep(0.2)  # an onerror fires once the image failed: give it the chance
    assert browser.xss_marker() is None
    injected = browser.js("return Array.from(document.querySelectorAll('[id^=\"xss-\"]'))"
                          ".map(element => element.id);")
    assert injected == []
    text = browser.text
    for string in shown:
        assert string in text, f"{string!r} not shown as text on {browser.driver.current_url}"


def dead_letter(endpoint_id: str, event_id: str, **fields: Any) -> str:
    from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue

    entry = DeadLetter(endpoint_id=endpoint_id, event_id=event_id,
                       event_type=fields.pop("event_type", "order.paid"),
                       payload=fields.pop("payload", {}), reason="exhausted", attempts=4,
                       last_status=500, enqueued_at=time.time() - 60, **fields)
    DeadLetterQueue().add(entry)
    return entry.id


def endpoint(receiver: Receiver, reply: Reply) -> str:
    from hookline.store.endpoints import EndpointRegistry

    endpoint_id = unique("ep")
    EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", always(reply)))
    return endpoint_id


def test_an_endpoint_id_cannot_hold_markup() -> None:
    """The validators keep every character of HTML out of endpoint ids (and application ids,
    which follow the same rule), so no page can be given one."""
    from hookline.core.endpoint import EndpointError
    from hookline.core.endpoint_validation import validate_endpoint_id

    for text in ("<script>", 'ep"onmouseover=x', "ep'x", "ep&amp;", "ep<b>"):
        with pytest.raises(EndpointError):
            validate_endpoint_id(text)


def test_markup_in_a_dead_letter_is_shown_as_text(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    endpoint_id = endpoint(receiver, Reply(204))
    event_type = payload("type")
    error = payload("error")
    response = payload("response")  # the receiver's answer, in the list's last error
    entry_id = dead_letter(endpoint_id, ID_PAYLOAD, event_type=event_type, last_error=error,
                           last_response=response, payload={"note": payload("payload")})

    browser.open(console_path("dead_letters.letter_list", {"endpoint": endpoint_id}))
    assert_inert(browser, ID_PAYLOAD, event_type, error, response)
    browser.click("#dead-letter-list input[type=checkbox]")  # its row ticked, to delete
    browser.click("#delete-selected")
    browser.wait(lambda page: page.css("#selection-confirm"))
    assert_inert(browser, ID_PAYLOAD)
    assert [row.get_attribute("data-entry-id")
            for row in browser.css("#selected-letters tr[data-entry-id]")] == [entry_id]
    browser.open(console_path("dead_letters.letter_show", {"id": entry_id}))
    assert_inert(browser, ID_PAYLOAD, event_type, error)
    browser.open(console_path("events.event_search", {"endpoint": endpoint_id}))  # the log
    assert_inert(browser, ID_PAYLOAD, event_type)
    browser.open(console_path("events.event_search", {"event_id": ID_PAYLOAD}))
    assert_inert(browser, event_type)
    assert browser.by_id("event-report").get_attribute("data-event-id") == ID_PAYLOAD


def test_a_receivers_html_answer_is_shown_as_text_on_the_event_page(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    """A real delivery: the receiver answers 400 with an HTML page carrying a script; the
    attempt's response excerpt is what the event page shows."""
    import hookline

    body = ("<html><body><script>window.__xss='script'</script>"
            + payload("body") + "</body></html>")
    endpoint_id = endpoint(receiver, Reply(400, headers={"Content-Type": "text/html"},
                                           body=body.encode()))
    event_type = "order." + payload("sent-type")
    event_id = unique("evt")
    hookline.send_webhook(endpoint_id, event_type, {"order": 1}, event_id=event_id)
    from hookline.store.dead_letter_queue import DeadLetterQueue

    wait_until(lambda: DeadLetterQueue().get(f"{endpoint_id}/{event_id}"), timeout=20)

    browser.open(console_path("events.event_search", {"event_id": event_id}))
    assert_inert(browser, "<script>window.__xss='script'</script>", event_type)


def test_a_reason_typed_into_a_form_is_shown_as_text(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    """The disable form's reason is free text from a browser: the endpoint page and the audit
    log show it escaped."""
    endpoint_id = endpoint(receiver, Reply(204))
    reason = payload("reason")
    browser.open(f"/endpoints/{endpoint_id}")
    forge_post(browser, f"/endpoints/{endpoint_id}/disable", {**browser.csrf(), "reason": reason})
    browser.open(f"/endpoints/{endpoint_id}")
    assert browser.by_id("endpoint-health").get_attribute("data-enabled") == "false"
    assert_inert(browser, reason)
    browser.open(console_path("overview.audit_log"))
    assert_inert(browser)


def test_markup_in_a_url_is_not_reflected_as_html(browser: Browser) -> None:
    """An unknown id in the path or a filter in the query string comes back in the page (the
    404's message, the filter's field) only as text."""
    from urllib.parse import quote

    browser.open("/endpoints/" + quote(payload("path"), safe=""))
    assert browser.status() in (400, 404)
    assert_inert(browser)
    browser.open(console_path("endpoints.endpoint_list", {"search": payload("search")}))
    assert_inert(browser)
    browser.open(console_path("events.event_search", {"event_id": payload("query")}))
    assert_inert(browser)


def test_markup_given_to_the_endpoint_forms_comes_back_only_as_text(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    """What the add, URL and test-event pages reflect (an application typed in, a refused id
    or URL, an event id in the path) is text; a reason shown beside the disabled state too."""
    from urllib.parse import quote

    endpoint_id = endpoint(receiver, Reply(204))
    browser.open(console_path("endpoints.endpoint_new", {"app": payload("new-app")}))
    assert_inert(browser)
    assert browser.css("#endpoint-add input[name=app]")[0].get_attribute("value") == (
        payload("new-app"))
    forge_post(browser, "/endpoints", {**browser.csrf(), "endpoint_id": payload("new-id"),
                                       "url": "http://127.0.0.1:9/x", "event_type": "*"})
    assert browser.status() == 400
    assert_inert(browser)
    browser.open(f"/endpoints/{endpoint_id}")
    forge_post(browser, f"/endpoints/{endpoint_id}/url",
               {**browser.csrf(), "url": "http://127.0.0.1:9/" + payload("url")})
    assert browser.status() == 400
    assert_inert(browser)
    browser.open(f"/endpoints/{endpoint_id}")
    forge_post(browser, f"/endpoints/{endpoint_id}/subscriptions",
               {**browser.csrf(), "event_types": payload("types")})
    assert browser.status() == 400
    assert_inert(browser)
    browser.open(f"/endpoints/{endpoint_id}/test-events/" + quote(payload("test-id"), safe=""))
    assert_inert(browser, payload("test-id"))
    forge_post(browser, f"/endpoints/{endpoint_id}/disable",
               {**browser.csrf(), "reason": payload("why")})
    browser.open(f"/endpoints/{endpoint_id}")
    assert_inert(browser, payload("why"))
    assert payload("why") in browser.by_id("disabled-why").text
