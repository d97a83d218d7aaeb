"""The tenant portal in a real Chromium, served by ``hookline console`` under /portal: a link
opens one application's corner and nothing else, leaves no token in the address bar, shows the
tenant's own stored strings as text, and a read-only link acts on nothing, whatever is posted.

Each test makes two applications of its own, A (the link's) and B (another tenant's), each
with an endpoint, an event and a dead letter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import redis

from examples.receiver import Receiver, Reply, always
from tests.browser.test_browser_xss import assert_inert, payload
from tests.conftest import wait_until
from tests.support.browser import PORTAL_PATH, Browser, forge_post, unique


@dataclass(frozen=True)
class Tenant:
    """One application's data: its id, an endpoint, an event and that event's dead letter."""

    app_id: str
    endpoint_id: str
    event_id: str
    letter_id: str


def tenant_data(receiver: Receiver, *, event_type: str = "order.paid",
                payload_fields: dict[str, Any] | None = None) -> Tenant:
    """A new application with an endpoint and a dead-lettered event, in the console's Redis."""
    from hookline.store.apps import AppRegistry
    from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
    from hookline.store.endpoints import EndpointRegistry

    app_id = unique("app")
    AppRegistry().add(app_id)
    endpoint_id = unique("ep")
    EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))),
                           app=app_id)
    event_id = unique("evt")
    entry = DeadLetter(endpoint_id=endpoint_id, event_id=event_id, event_type=event_type,
                       payload=payload_fields or {"order": 1}, reason="exhausted", attempts=4,
                       last_status=500, enqueued_at=time.time() - 60)
    DeadLetterQueue().add(entry)
    return Tenant(app_id, endpoint_id, event_id, entry.id)


def enter(tenant: Browser, link: str) -> None:
    """Open ``link`` as a tenant would: from a blank page, following the redirect."""
    tenant.driver.get("about:blank")
    tenant.driver.get(link)


def portal(path: str) -> str:
    return PORTAL_PATH + path


def test_a_link_opens_its_applications_endpoints_and_events_and_leaves_no_token(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    a, b = tenant_data(receiver), tenant_data(receiver)
    link = portal_link(a.app_id)
    token = link.split("token=", 1)[1]

    enter(tenant, link)
    current = tenant.driver.current_url
    assert "token" not in current and token not in current
    assert urlsplit(current).path == portal("/")
    assert tenant.by_id("portal-app").text == a.app_id
    rows = tenant.css("#endpoint-list tr[data-endpoint-id]")
    assert [row.get_attribute("data-endpoint-id") for row in rows] == [a.endpoint_id]
    assert b.endpoint_id not in tenant.text

    tenant.open(portal("/events?event_id=" + quote(a.event_id)))
    report = tenant.by_id("event-report")
    assert report.get_attribute("data-found") == "true"
    assert [d.get_attribute("data-endpoint-id") for d in tenant.css(".delivery")] == [a.endpoint_id]

    tenant.open(portal("/dead-letters"))
    assert [row.get_attribute("data-entry-id")
            for row in tenant.css("#dead-letter-list tr[data-entry-id]")] == [a.letter_id]
    assert token not in tenant.driver.page_source


def test_another_applications_ids_typed_into_portal_urls_show_nothing_of_it(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    a, b = tenant_data(receiver), tenant_data(receiver, event_type="secret.of-b")
    enter(tenant, portal_link(a.app_id))

    tenant.open(portal(f"/endpoints/{b.endpoint_id}"))
    assert tenant.status() == 404
    assert not tenant.css("#endpoint-health")

    tenant.open(portal("/events?event_id=" + quote(b.event_id)))
    assert tenant.status() in (200, 404)
    assert not tenant.css(".delivery")
    assert "secret.of-b" not in tenant.text and b.endpoint_id not in tenant.text

    tenant.open(portal("/dead-letters/entry?id=" + quote(b.letter_id, safe="")))
    assert tenant.status() == 404
    assert not tenant.css("#dead-letter")
    tenant.open(portal("/dead-letters?endpoint=" + quote(b.endpoint_id)))
    assert not tenant.css("#dead-letter-list tr[data-entry-id]")

    page = tenant.driver.page_source
    assert "secret.of-b" not in page and b.letter_id not in page


def test_markup_stored_in_the_applications_data_does_not_run_in_the_portal(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str], console_worker: Any) -> None:
    import hookline
    from hookline.store.dead_letter_queue import DeadLetterQueue

    event_type = payload("portal-type")
    a = tenant_data(receiver, event_type=event_type,
                    payload_fields={"note": payload("portal-payload")})
    # A real delivery whose receiver answers with a page carrying a script.
    body = ("<html><body><script>window.__xss='portal-script'</script>"
            + payload("portal-body") + "</body></html>")
    from hookline.store.endpoints import EndpointRegistry

    answering = unique("ep")
    EndpointRegistry().add(answering, receiver.route(
        f"/{answering}", always(Reply(400, headers={"Content-Type": "text/html"},
                                      body=body.encode()))), app=a.app_id)
    sent = unique("evt")
    hookline.send_webhook(answering, "order.sent", {"order": 2}, event_id=sent)
    wait_until(lambda: DeadLetterQueue().get(f"{answering}/{sent}"), timeout=20)

    enter(tenant, portal_link(a.app_id))
    tenant.open(portal("/dead-letters"))
    assert_inert(tenant, event_type)
    tenant.open(portal("/dead-letters/entry?id=" + quote(a.letter_id, safe="")))
    assert_inert(tenant, event_type)
    assert "xss-portal-payload" in tenant.by_id("dead-letter-payload").text
    tenant.open(portal("/events?event_id=" + quote(a.event_id)))
    assert_inert(tenant, event_type)
    tenant.open(portal("/events?event_id=" + quote(sent)))
    assert_inert(tenant, "<script>window.__xss='portal-script'</script>")


def test_a_read_only_link_offers_no_action_and_a_forged_post_is_refused(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    from hookline.store.dead_letter_queue import DeadLetterQueue
    from hookline.store.endpoints import EndpointRegistry

    a = tenant_data(receiver)
    enter(tenant, portal_link(a.app_id, read_only=True))
    assert tenant.by_id("read-only").text == "read-only"
    for path in ("/", f"/endpoints/{a.endpoint_id}", "/dead-letters",
                 "/events?event_id=" + quote(a.event_id),
                 "/dead-letters/entry?id=" + quote(a.letter_id, safe="")):
        tenant.open(portal(path))
        assert tenant.status() == 200
        assert tenant.css("form[method=post]") == [], path

    tenant.open(portal(f"/endpoints/{a.endpoint_id}"))
    forge_post(tenant, portal(f"/endpoints/{a.endpoint_id}/pause"), tenant.csrf())
    assert tenant.status() == 403
    assert "read-only" in tenant.text
    assert not EndpointRegistry().require(a.endpoint_id).paused

    tenant.open(portal("/dead-letters"))
    forge_post(tenant, portal("/dead-letters/replay"), {**tenant.csrf(), "entry_id": a.letter_id})
    assert tenant.status() == 403
    assert DeadLetterQueue().get(a.letter_id) is not None
