"""The service's endpoint pages, actions and audit log on a real Redis with no worker: pages
walk the index with a cursor (every endpoint once, whatever the page size, never the whole
index at once), views carry no secret or header value, every action leaves one audit entry
naming who acted and from which session, and a replay sends the dead letter again."""

from __future__ import annotations

import pytest

from hookline.core.errors import InvalidField
from hookline.service import audit, endpoint_actions, endpoints, events
from hookline.service.actor import Actor, NotFound
from hookline.service.pages import MAX_LIMIT
from hookline.store import keys
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry

ALICE = Actor(name="alice", session="sess-42")


def walked(actor: Actor, **options) -> list[str]:
    return [endpoint_id for page in walk(actor, **options) for endpoint_id in page]


def walk(actor: Actor, **options) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = endpoints.list_endpoints(actor, cursor=cursor, **options)
        pages.append([item.id for item in page.items])
        cursor = page.next_cursor
        if cursor is None:
            return pages


@pytest.mark.parametrize("limit", [1, 7, 50, 500])
def test_pages_give_every_endpoint_once(quiet_redis, limit):
    registry = EndpointRegistry()
    ids = [f"ep-{n:03}" for n in range(130)]  # past a listpack set: SSCAN pages for real
    for endpoint_id in ids:
        registry.add(endpoint_id, "http://127.0.0.1:9/hook")
    pages = walk(ALICE, limit=limit)
    seen = [endpoint_id for page in pages for endpoint_id in page]
    assert sorted(seen) == ids
    assert all(len(page) <= limit for page in pages)
    assert all(page == sorted(page) for page in pages)


def test_pages_of_a_small_index_cut_inside_one_scan_batch(quiet_redis):
    registry = EndpointRegistry()
    for n in range(5):
        registry.add(f"s-{n}", "http://127.0.0.1:9/hook")
    assert walk(ALICE, limit=2) == [["s-0", "s-1"], ["s-2", "s-3"], ["s-4"]]


def test_pages_filter_by_application_and_search(quiet_redis):
    AppRegistry().add("shop")
    registry = EndpointRegistry()
    registry.add("shop-orders", "http://127.0.0.1:9/o/hook", app="shop")
    registry.add("shop-refunds", "http://127.0.0.1:9/r/hook", app="shop")
    registry.add("crm-orders", "http://127.0.0.1:9/c/hook")
    assert walked(ALICE, app="shop", limit=1) == ["shop-orders", "shop-refunds"]
    assert sorted(walked(ALICE, search="orders")) == ["crm-orders", "shop-orders"]
    assert walked(ALICE, search="*") == []  # a glob character is a character
    with pytest.raises(InvalidField, match="cursor"):
        endpoints.list_endpoints(ALICE, cursor="9:0:0")
    with pytest.raises(InvalidField, match="cursor"):
        endpoints.list_endpoints(ALICE, cursor="nonsense")
    assert len(endpoints.list_endpoints(ALICE, limit=10**9).items) <= MAX_LIMIT


def test_views_carry_no_secret_or_header_value(quiet_redis):
    added = endpoint_actions.add_endpoint(
        ALICE, "shop", "http://127.0.0.1:9/shop/hook?token=t0ps3cret",
        headers={"Authorization": "Bearer very-secret"})
    assert added.secret and added.secret.startswith("whsec_")
    health = endpoints.endpoint_health(ALICE, "shop")
    page = endpoints.list_endpoints(ALICE)
    for view in (repr(health), repr(page), repr(health.summary.public), repr(added.summary)):
        assert added.secret not in view and "very-secret" not in view
        assert "t0ps3cret" not in view
    assert health.summary.header_names == ("Authorization",)
    rotated = endpoint_actions.rotate_secret(ALICE, "shop", overlap=60)
    assert rotated.secret != added.secret and len(rotated.previous_until) == 1
    assert rotated.secret not in repr(endpoints.endpoint_health(ALICE, "shop"))
    assert all(rotated.secret not in entry.detail and added.secret not in entry.detail
               for entry in audit.recent(ALICE).items)


def test_every_action_is_audited_with_who_and_which_session(quiet_redis):
    endpoint_actions.add_endpoint(ALICE, "shop", "http://127.0.0.1:9/shop/hook")
    endpoint_actions.pause(ALICE, "shop")
    endpoint_actions.resume(ALICE, "shop")
    endpoint_actions.disable(ALICE, "shop", "receiver down")
    endpoint_actions.enable(ALICE, "shop")
    endpoint_actions.reset_breaker(ALICE, "shop")
    endpoint_actions.update_endpoint(ALICE, "shop", timeout=2.0, secret=None)
    endpoint_actions.rotate_secret(ALICE, "shop")
    endpoint_actions.remove_endpoint(ALICE, "shop")
    entries = audit.recent(ALICE).items
    assert [entry.action for entry in entries] == [
        "endpoint.remove", "endpoint.rotate_secret", "endpoint.update", "breaker.reset",
        "endpoint.enable", "endpoint.disable", "endpoint.resume", "endpoint.pause",
        "endpoint.add"]
    assert {(entry.actor, entry.session, entry.target) for entry in entries} == {
        ("alice", "sess-42", "shop")}
    assert entries[2].detail == "timeout" and entries[5].detail == "receiver down"
    assert entries[0].at >= entries[-1].at > 0


def test_the_audit_log_pages_back_from_the_newest(quiet_redis):
    for n in range(7):
        audit.record(ALICE, "endpoint.pause", f"ep-{n}")
    first = audit.recent(ALICE, limit=3)
    second = audit.recent(ALICE, limit=3, before=first.next_cursor)
    third = audit.recent(ALICE, limit=3, before=second.next_cursor)
    targets = [entry.target for page in (first, second, third) for entry in page.items]
    assert targets == [f"ep-{n}" for n in range(6, -1, -1)]
    assert third.next_cursor is None
    with pytest.raises(InvalidField):
        audit.recent(ALICE, before="drop table")
    assert quiet_redis.type(keys.AUDIT_KEY) == "stream"


def test_a_tenant_reads_only_its_own_audit_entries(quiet_redis):
    audit.record(ALICE, "endpoint.pause", "a", app="app-a")
    audit.record(ALICE, "endpoint.pause", "b", app="app-b")
    audit.record(ALICE, "app.add", "c")
    tenant = Actor(name="portal:app-a", session="t", app_scope="app-a")
    assert [entry.target for entry in audit.recent(tenant).items] == ["a"]


def test_replay_sends_the_dead_letter_again_and_audits_it(quiet_redis, monkeypatch):
    EndpointRegistry().add("shop", "http://127.0.0.1:9/shop/hook")
    DeadLetterQueue().add(DeadLetter(endpoint_id="shop", event_id="evt-1",
                                     event_type="order.created", payload={"n": 1},
                                     reason="exhausted", attempts=3))
    sent = []
    monkeypatch.setattr("hookline.delivery.replay._enqueue", sent.append)
    outcome = events.replay_event(ALICE, "shop", "evt-1")
    assert [entry.event_id for entry in outcome.replayed] == ["evt-1"]
    assert [entry.event_id for entry in sent] == ["evt-1"]
    assert DeadLetterQueue().get("shop/evt-1") is None
    [entry] = audit.recent(ALICE).items
    assert (entry.action, entry.target) == ("event.replay", "shop/evt-1")
    with pytest.raises(NotFound, match="no dead letter 'shop/evt-1'"):
        events.replay_event(ALICE, "shop", "evt-1")


def test_find_event_reports_each_endpoints_outcome(quiet_redis):
    registry = EndpointRegistry()
    registry.add("shop", "http://127.0.0.1:9/shop/hook")
    DeadLetterQueue().add(DeadLetter(endpoint_id="shop", event_id="evt-9",
                                     event_type="order.created", payload={"n": 1},
                                     reason="rejected", attempts=1, last_status=400))
    report = events.find_event(ALICE, "evt-9")
    assert report.found
    [delivery] = report.deliveries
    assert delivery.state == "dead_lettered" and delivery.dead_letter is not None
    assert delivery.dead_letter.reason == "rejected"
    assert not events.find_event(ALICE, "evt-unknown").found
