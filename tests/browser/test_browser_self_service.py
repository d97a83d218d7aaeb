"""Self-service in a real Chromium, with the session's worker and a real receiver: a tenant
fixes the URL of an endpoint a real 410 disabled, enables it and its next event is delivered;
a tenant's test event arrives signed and verifies (``standardwebhooks``) with the secret the
portal showed once; an operator adds an endpoint in the console and an event reaches it.

Then what every new action must keep: a POST without its CSRF token is 403, a tenant's post
about another application's endpoint answers as an unknown id would and changes nothing, and a
read-only operator is 403 whatever is posted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis
from standardwebhooks import Webhook

from examples.receiver import Receiver, Reply, always
from tests.browser.test_browser_portal import enter, portal, tenant_data
from tests.conftest import wait_until
from tests.support.browser import ADMIN, VIEWER, Browser, console_path, forge_post, unique

#: The test event's type, as the docs name it.
TEST_EVENT_TYPE = "hookline:test"


def type_into(browser: Browser, selector: str, text: str) -> None:
    # Waited for: the field may be on a page a click has only begun to load.
    field = browser.wait(lambda page: (page.css(selector) or [None])[0])
    field.clear()
    field.send_keys(text)


def notice(browser: Browser, words: str) -> None:
    browser.wait(lambda page: words in page.by_id("notice").text)


def verified(received: Any, secret: str) -> dict[str, Any]:
    """The request's body, once its signature verifies with ``secret`` (Standard Webhooks'
    own library, not Hookline's code)."""
    headers = {name.lower(): value for name, value in received.headers.items()}
    return dict(Webhook(secret).verify(received.body, headers))


def test_a_tenant_fixes_the_url_of_an_endpoint_a_410_disabled_enables_it_and_it_delivers(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str], console_worker: Any) -> None:
    import hookline
    from hookline.store.apps import AppRegistry
    from hookline.store.endpoints import EndpointRegistry

    app_id, endpoint_id = unique("app"), unique("ep")
    AppRegistry().add(app_id, name="Acme Shop")
    gone, fixed = f"/{endpoint_id}/gone", f"/{endpoint_id}/fixed"
    EndpointRegistry().add(endpoint_id, receiver.route(gone, always(Reply(410))), app=app_id)
    fixed_url = receiver.route(fixed, always(Reply(204)))
    hookline.send_webhook(endpoint_id, "order.paid", {"order": 1})
    wait_until(lambda: not EndpointRegistry().require(endpoint_id).enabled, timeout=30)
    assert len(receiver.requests_to(gone)) == 1  # the receiver's real 410 disabled it

    enter(tenant, portal_link(app_id))
    assert tenant.by_id("portal-app").text == "Acme Shop"  # its name, not its id
    tenant.open(portal(f"/endpoints/{endpoint_id}"))
    assert tenant.by_id("endpoint-state").text == "disabled"
    why = tenant.by_id("disabled-why").text
    assert "410" in why and "since" in why and "by the worker" in why, why

    type_into(tenant, "#url-form input[name=url]", "http://169.254.169.254/latest")
    tenant.click("#url-form button")
    tenant.wait(lambda page: page.status() == 400)
    assert "169.254.169.254" in tenant.text and "link-local" in tenant.text
    assert EndpointRegistry().require(endpoint_id).url != fixed_url

    tenant.open(portal(f"/endpoints/{endpoint_id}"))
    type_into(tenant, "#url-form input[name=url]", fixed_url)
    tenant.click("#url-form button")
    notice(tenant, "URL saved")
    assert EndpointRegistry().require(endpoint_id).url == fixed_url
    tenant.click("form[data-action='enable'] button")
    notice(tenant, "Endpoint enabled")
    assert tenant.by_id("endpoint-health").get_attribute("data-enabled") == "true"
    assert not tenant.css("#disabled-why")

    event_id = hookline.send_webhook(endpoint_id, "order.paid", {"order": 2})
    assert receiver.wait_for(lambda received: any(
        item.path == fixed and item.webhook_id == event_id for item in received), timeout=30)
    assert len(receiver.requests_to(gone)) == 1


def test_a_tenants_test_event_arrives_signed_and_verifies_with_the_secret_shown_once(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str], console_worker: Any) -> None:
    from hookline.store.apps import AppRegistry

    app_id, endpoint_id = unique("app"), unique("ep")
    AppRegistry().add(app_id)
    path = f"/{endpoint_id}"
    url = receiver.route(path, always(Reply(202)))
    enter(tenant, portal_link(app_id))
    type_into(tenant, "#endpoint-add input[name=endpoint_id]", endpoint_id)
    type_into(tenant, "#endpoint-add input[name=url]", url)
    tenant.click("#endpoint-add button[type=submit]")
    secret = tenant.wait(lambda page: page.by_id("new-secret").text)
    assert secret.startswith("whsec_")

    tenant.open(portal(f"/endpoints/{endpoint_id}"))
    assert secret not in tenant.driver.page_source  # shown once, never again
    assert "Reversible" in tenant.by_id("signature-switch-help").text
    tenant.click("form[data-action='test-event'] button")
    # The outcome refreshes itself (console.js, data-refresh) until it is known.
    tenant.wait(lambda page: page.by_id("test-event").get_attribute("data-state")
                == "delivered", timeout=30)
    assert "202" in tenant.by_id("test-event-outcome").text
    event_id = tenant.by_id("test-event").get_attribute("data-event-id")

    arrived = [item for item in receiver.requests_to(path) if item.webhook_id == event_id]
    assert len(arrived) == 1
    body = verified(arrived[0], secret)
    assert body["type"] == TEST_EVENT_TYPE
    assert body["data"]["endpoint_id"] == endpoint_id and body["data"]["test"] is True
    assert json.loads(arrived[0].body)["data"]["sent_by"] == f"portal:{app_id}"
    assert secret not in tenant.driver.page_source


def test_an_operator_adds_an_endpoint_in_the_console_and_an_event_to_it_is_delivered(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    import hookline
    from hookline.store.apps import AppRegistry
    from hookline.store.catalog import EventCatalog
    from hookline.store.endpoints import EndpointRegistry

    app_id, endpoint_id = unique("app"), unique("ep")
    AppRegistry().add(app_id)
    event_type, other_type = f"{unique('order')}.paid", f"{unique('order')}.sent"
    path = f"/{endpoint_id}"
    url = receiver.route(path, always(Reply(204)))
    catalog = EventCatalog()
    catalog.add(event_type)
    catalog.add(other_type)
    try:
        browser.open("/endpoints")
        browser.click("#add-endpoint")
        type_into(browser, "#endpoint-add input[name=endpoint_id]", endpoint_id)
        type_into(browser, "#endpoint-add input[name=url]", url)
        type_into(browser, "#endpoint-add input[name=app]", app_id)
        browser.click("#endpoint-add input[name=event_type][value='*']")  # untick every type
        browser.click(f"#endpoint-add input[name=event_type][value='{event_type}']")
        type_into(browser, "#endpoint-add input[name=rate]", "50/s")
        browser.click("#endpoint-add button[type=submit]")
        secret = browser.wait(lambda page: page.by_id("new-secret").text)
        stored = EndpointRegistry().require(endpoint_id)
        assert (stored.app, stored.event_types, stored.rate) == (app_id, (event_type,), "50/s")

        browser.open(f"/endpoints/{endpoint_id}")
        assert secret not in browser.driver.page_source
        ticked = [box.get_attribute("value") for box in
                  browser.css("#subscriptions-form input[name=event_type]") if box.is_selected()]
        assert ticked == [event_type]
        browser.click(f"#subscriptions-form input[name=event_type][value='{event_type}']")
        browser.click("#subscriptions-form button[type=submit]")
        browser.wait(lambda page: page.status() == 400)
        assert "pick at least one event type" in browser.text  # nothing ticked is refused
        assert EndpointRegistry().require(endpoint_id).event_types == (event_type,)

        event_id = hookline.publish(app_id, event_type, {"order": 7})
        hookline.publish(app_id, other_type, {"order": 8})  # not subscribed: not sent
        assert receiver.wait_for(lambda received: any(
            item.path == path and item.webhook_id == event_id for item in received), timeout=30)
        body = verified(receiver.requests_to(path)[0], secret)
        assert (body["type"], body["data"]) == (event_type, {"order": 7})
        assert len(receiver.requests_to(path)) == 1
    finally:
        catalog.remove(event_type)
        catalog.remove(other_type)


#: The portal's new actions on an endpoint: (path under the endpoint, form fields).
PORTAL_ACTIONS = (("url", {"url": "http://127.0.0.1:9/stolen"}),
                  ("subscriptions", {"event_type": "*"}),
                  ("disable", {}), ("enable", {}), ("rotate-secret", {}),
                  ("test-event", {}))


def test_a_tenants_action_on_another_applications_endpoint_is_an_unknown_id_and_changes_nothing(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    from hookline.store.endpoints import EndpointRegistry

    a, b = tenant_data(receiver), tenant_data(receiver)
    registry = EndpointRegistry()
    before = registry.get_replacing_secrets(b.endpoint_id)[0]
    enter(tenant, portal_link(a.app_id))
    for action, fields in PORTAL_ACTIONS:
        tenant.open(portal("/"))
        forge_post(tenant, portal(f"/endpoints/{b.endpoint_id}/{action}"),
                   {**tenant.csrf(), **fields})
        assert tenant.status() == 404, action
        other = tenant.text.replace(b.endpoint_id, "X")
        tenant.open(portal("/"))
        unknown = unique("ep")
        forge_post(tenant, portal(f"/endpoints/{unknown}/{action}"),
                   {**tenant.csrf(), **fields})
        assert tenant.status() == 404, action
        assert other == tenant.text.replace(unknown, "X"), action
    tenant.open(portal(f"/endpoints/{b.endpoint_id}/test-events/test_x"))
    assert tenant.status() == 404
    assert registry.get_replacing_secrets(b.endpoint_id)[0] == before
    assert not receiver.requests_to(f"/{b.endpoint_id}")


def test_the_portals_new_actions_need_their_csrf_token(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    from hookline.store.endpoints import EndpointRegistry

    a = tenant_data(receiver)
    before = EndpointRegistry().get_replacing_secrets(a.endpoint_id)[0]
    enter(tenant, portal_link(a.app_id))
    for action, fields in PORTAL_ACTIONS:
        tenant.open(portal(f"/endpoints/{a.endpoint_id}"))
        forge_post(tenant, portal(f"/endpoints/{a.endpoint_id}/{action}"), fields)
        assert tenant.status() == 403, action
        assert "CSRF" in tenant.text
    tenant.open(portal("/"))
    forge_post(tenant, portal("/endpoints"), {"endpoint_id": unique("ep"),
                                             "url": "http://127.0.0.1:9/x", "event_type": "*"})
    assert tenant.status() == 403
    assert EndpointRegistry().get_replacing_secrets(a.endpoint_id)[0] == before


#: The console's new actions: (path, form fields); ``{ep}`` is the endpoint's id.
CONSOLE_ACTIONS = (("/endpoints", {"endpoint_id": "{new}", "url": "http://127.0.0.1:9/x",
                                   "event_type": "*"}),
                   ("/endpoints/{ep}/url", {"url": "http://127.0.0.1:9/stolen"}),
                   ("/endpoints/{ep}/subscriptions", {"event_type": "*"}),
                   ("/endpoints/{ep}/test-event", {}))


def test_the_consoles_new_actions_need_csrf_and_refuse_a_read_only_operator(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    from hookline.store.endpoints import EndpointRegistry

    registry = EndpointRegistry()
    endpoint_id = unique("ep")
    registry.add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))),
                 event_types=["order.paid"])
    before = registry.get_replacing_secrets(endpoint_id)[0]
    new_id = unique("ep")
    for path, fields in CONSOLE_ACTIONS:
        path = path.format(ep=endpoint_id)
        fields = {name: value.format(new=new_id) for name, value in fields.items()}
        browser.open(f"/endpoints/{endpoint_id}")
        forge_post(browser, path, fields)
        assert browser.status() == 403, path
        assert "CSRF" in browser.text

        browser.sign_in(VIEWER).open(f"/endpoints/{endpoint_id}")
        forge_post(browser, path, {**browser.csrf(), **fields})
        assert browser.status() == 403, path
        assert "read-only" in browser.text
        browser.sign_in(ADMIN)
    browser.sign_in(VIEWER).open(console_path("endpoints.endpoint_new"))
    assert browser.css("#endpoint-add button[disabled]")
    assert registry.get_replacing_secrets(endpoint_id)[0] == before
    assert registry.get(new_id) is None
    assert not receiver.requests_to(f"/{endpoint_id}")


def test_markup_in_an_application_name_a_reason_and_a_test_events_answer_is_inert_in_the_portal(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str], console_worker: Any) -> None:
    from hookline.service.actor import Actor
    from hookline.service.endpoint_actions import disable
    from hookline.store.apps import AppRegistry
    from hookline.store.endpoints import EndpointRegistry
    from tests.browser.test_browser_xss import assert_inert, payload

    app_id, endpoint_id = unique("app"), unique("ep")
    AppRegistry().add(app_id, name=payload("app-name"))
    body = "<html><script>window.__xss='test-body'</script>" + payload("test-body") + "</html>"
    EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(
        400, headers={"Content-Type": "text/html"}, body=body.encode()))), app=app_id)
    enter(tenant, portal_link(app_id))
    assert_inert(tenant, payload("app-name"))
    assert tenant.driver.title.endswith(payload("app-name"))

    tenant.open(portal(f"/endpoints/{endpoint_id}"))
    tenant.click("form[data-action='test-event'] button")
    tenant.wait(lambda page: page.by_id("test-event").get_attribute("data-state")
                == "dead_lettered", timeout=30)
    assert "400" in tenant.by_id("test-event-outcome").text
    assert_inert(tenant, "<script>window.__xss='test-body'</script>")

    disable(Actor(name="alice", session="s"), endpoint_id, payload("reason"))
    tenant.open(portal(f"/endpoints/{endpoint_id}"))
    assert_inert(tenant, payload("reason"))
    assert "by an operator" in tenant.by_id("disabled-why").text  # not the operator's name
