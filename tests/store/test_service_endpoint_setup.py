"""The endpoint forms' service (``hookline.service.endpoint_setup``) and the disable record on
a real Redis: a disable records why, when and by whom (an actor's, and the worker's after a
real receiver's 410), a new URL passes the CLI's checks and the SSRF rules or changes nothing,
subscriptions are picked from the catalog's types (or every type), a test event is enqueued
like any delivery, and a tenant reaches none of it in another application."""

from __future__ import annotations

import time
import uuid

import pytest

from examples.receiver import Receiver, Reply, always
from hookline.core.errors import HooklineError, InvalidField
from hookline.delivery.engine import GONE_REASON, DeliveryEngine, DeliveryRequest
from hookline.service import audit, endpoint_actions, endpoint_setup
from hookline.service.actor import Actor, NotFound, ReadOnly
from hookline.store.apps import AppRegistry
from hookline.store.catalog import EventCatalog
from hookline.store.endpoints import EndpointRegistry

OPERATOR = Actor(name="alice", session="s-1")
VIEWER = Actor(name="victor", session="s-2", can_act=False)
TENANT_A = Actor(name="portal:app-a", session="portal:l-1", app_scope="app-a")


@pytest.fixture
def two_apps(quiet_redis):
    AppRegistry().add("app-a", name="Acme Shop")
    AppRegistry().add("app-b")
    registry = EndpointRegistry()
    registry.add("ep-a", "http://127.0.0.1:9/a/hook", app="app-a")
    registry.add("ep-b", "http://127.0.0.1:9/b/hook", app="app-b", event_types=["order.*"])
    return registry


def test_a_disable_records_why_when_and_who_and_an_enable_clears_it(two_apps):
    before = time.time()
    endpoint_actions.disable(TENANT_A, "ep-a", "disabled in the portal")
    stored = two_apps.require("ep-a")
    assert (stored.enabled, stored.disabled_reason, stored.disabled_by) == (
        False, "disabled in the portal", "portal:app-a")
    assert stored.disabled_at is not None and before <= stored.disabled_at <= time.time()
    assert endpoint_actions.enable(TENANT_A, "ep-a").disabled_at is None
    stored = two_apps.require("ep-a")
    assert (stored.enabled, stored.disabled_reason, stored.disabled_at, stored.disabled_by) == (
        True, "", None, "")


def test_a_receivers_410_records_the_reason_and_the_time_on_the_endpoint(quiet_redis):
    registry = EndpointRegistry()
    with Receiver() as receiver:
        registry.add("ep-gone", receiver.route("/gone", always(Reply(410))))
        before = time.time()
        request = DeliveryRequest(endpoint_id="ep-gone", event_type="order.created",
                                  payload={"n": 1}, event_id=f"evt-{uuid.uuid4().hex[:8]}")
        outcome = DeliveryEngine().attempt(request, token=uuid.uuid4().hex)
    assert outcome.status == 410
    stored = registry.require("ep-gone")
    assert (stored.enabled, stored.disabled_reason, stored.disabled_by) == (
        False, GONE_REASON, "")
    assert stored.disabled_at is not None and before - 1 <= stored.disabled_at <= time.time() + 1


def test_a_new_url_is_checked_like_the_clis_and_a_refused_one_changes_nothing(two_apps):
    for bad, words in (("ftp://127.0.0.1/hook", "http"),
                       ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
                       ("http://localhost./hook", "localhost"),
                       ("not a url", "url")):
        with pytest.raises(HooklineError) as refused:
            endpoint_setup.change_url(TENANT_A, "ep-a", bad)
        message = str(refused.value)
        assert "\n" not in message and words.lower() in message.lower(), message
        assert two_apps.require("ep-a").url == "http://127.0.0.1:9/a/hook"
    with pytest.raises(InvalidField, match="new URL"):
        endpoint_setup.change_url(TENANT_A, "ep-a", "  ")
    changed = endpoint_setup.change_url(TENANT_A, "ep-a", "http://127.0.0.1:9/fixed")
    assert changed.url == two_apps.require("ep-a").url == "http://127.0.0.1:9/fixed"
    entry = audit.recent(OPERATOR).items[0]
    assert (entry.action, entry.target, entry.detail) == ("endpoint.update", "ep-a", "url")


def test_subscriptions_are_limited_to_the_catalogs_types_or_every_type(two_apps):
    catalog = EventCatalog()
    catalog.add("order.created")
    catalog.add("order.paid")
    assert endpoint_setup.subscription_choices(TENANT_A).types == ("order.created",
                                                                   "order.paid")
    endpoint_setup.set_subscriptions(TENANT_A, "ep-a", ["order.paid"])
    assert two_apps.require("ep-a").event_types == ("order.paid",)
    with pytest.raises(InvalidField, match="not in the event catalog") as refused:
        endpoint_setup.set_subscriptions(TENANT_A, "ep-a", ["order.paid", "invoice.sent"])
    assert "\n" not in str(refused.value)
    with pytest.raises(InvalidField, match="pick at least one"):
        endpoint_setup.set_subscriptions(TENANT_A, "ep-a", [])
    assert two_apps.require("ep-a").event_types == ("order.paid",)
    endpoint_setup.set_subscriptions(TENANT_A, "ep-a", ["*", "order.paid"])
    assert two_apps.require("ep-a").event_types == ()
    # A pattern the endpoint has (set by the CLI) stays when the form keeps it ticked.
    endpoint_setup.set_subscriptions(OPERATOR, "ep-b", ["order.*", "order.created"])
    assert two_apps.require("ep-b").event_types == ("order.*", "order.created")
    assert endpoint_setup.subscription_choices(OPERATOR).offered(("order.*",)) == [
        "order.created", "order.paid", "order.*"]


def test_with_an_empty_catalog_typed_subscriptions_follow_the_registrys_rules(two_apps):
    endpoint_setup.set_subscriptions(TENANT_A, "ep-a", ["invoice.sent", "order.*"])
    assert two_apps.require("ep-a").event_types == ("invoice.sent", "order.*")
    with pytest.raises(InvalidField, match="not a type name"):
        endpoint_setup.set_subscriptions(TENANT_A, "ep-a", ["<b>bad</b>"])


def test_a_test_event_is_enqueued_for_the_endpoint_and_audited(two_apps, published):
    event_id = endpoint_setup.send_test_event(TENANT_A, "ep-a")
    assert event_id.startswith("test_")
    assert [event[1:] for event in published.events] == [("ep-a", event_id)]
    assert endpoint_setup.test_event_outcome(TENANT_A, "ep-a", event_id).state == "pending"
    entry = audit.recent(TENANT_A).items[0]
    assert (entry.action, entry.target, entry.actor) == ("endpoint.test_event", "ep-a",
                                                          "portal:app-a")
    assert ":" in endpoint_setup.TEST_EVENT_TYPE  # never a catalog type or a filter pattern
    with pytest.raises(InvalidField):
        EventCatalog().add(endpoint_setup.TEST_EVENT_TYPE)


@pytest.mark.parametrize("action", [
    lambda actor, ep: endpoint_setup.change_url(actor, ep, "http://127.0.0.1:9/stolen"),
    lambda actor, ep: endpoint_setup.set_subscriptions(actor, ep, ["*"]),
    lambda actor, ep: endpoint_setup.send_test_event(actor, ep),
    lambda actor, ep: endpoint_setup.test_event_outcome(actor, ep, "test_x"),
    lambda actor, ep: endpoint_actions.disable(actor, ep, "no"),
    lambda actor, ep: endpoint_actions.enable(actor, ep),
    lambda actor, ep: endpoint_actions.rotate_secret(actor, ep),
])
def test_another_applications_endpoint_is_unknown_to_a_tenant_and_unchanged(two_apps, action):
    before = two_apps.get_replacing_secrets("ep-b")[0]
    with pytest.raises(NotFound) as refused:
        action(TENANT_A, "ep-b")
    with pytest.raises(NotFound) as unknown:
        action(TENANT_A, "ep-zz")
    assert str(refused.value).replace("ep-b", "X") == str(unknown.value).replace("ep-zz", "X")
    assert two_apps.get_replacing_secrets("ep-b")[0] == before


@pytest.mark.parametrize("action", [
    lambda actor: endpoint_setup.change_url(actor, "ep-a", "http://127.0.0.1:9/x"),
    lambda actor: endpoint_setup.set_subscriptions(actor, "ep-a", ["*"]),
    lambda actor: endpoint_setup.send_test_event(actor, "ep-a"),
])
def test_a_read_only_actor_changes_nothing(two_apps, action):
    with pytest.raises(ReadOnly):
        action(VIEWER)
    assert two_apps.require("ep-a").url == "http://127.0.0.1:9/a/hook"


def test_the_portal_names_the_application_by_its_name_or_its_id(two_apps):
    assert endpoint_setup.app_name(TENANT_A) == "Acme Shop"
    assert endpoint_setup.app_name(Actor(name="portal:app-b", session="x",
                                         app_scope="app-b")) == "app-b"
