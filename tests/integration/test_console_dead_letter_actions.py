"""The dead-letter actions of the console and the portal in-process (werkzeug's test client) on
a real Redis: rows selected, confirmed and deleted, the purge's dry run and purge, each POST
refused without its CSRF token (403) and to a read-only operator, a tenant's selection of
another application's ids answered as unknown ones with nothing deleted, the warning before a
replay to an endpoint that cannot receive, and a receiver's answer in the list escaped."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from werkzeug.datastructures import MultiDict

from hookline.console.portal import portal_app
from hookline.service import audit, portal
from hookline.service.actor import Actor
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.support.console import VIEWER, Browser, console

KEY = "k" * 40
XSS = '<img id="xss" src=x onerror="window.__xss=1">'
#: The state-changing dead-letter pages, and a form each would take.
POSTS = ("/dead-letters/selection", "/dead-letters/delete", "/dead-letters/replay-selected",
         "/dead-letters/purge")
VERSION = re.compile(r'name="entry" value="([^"]+)"')


@pytest.fixture
def letters(quiet_redis):
    """app-a's a-1 and a-2, app-b's b-1; three dead letters at a-1, one at b-1."""
    registry = EndpointRegistry()
    for app_id, endpoint_ids in (("app-a", ("a-1", "a-2")), ("app-b", ("b-1",))):
        AppRegistry().add(app_id)
        for endpoint_id in endpoint_ids:
            registry.add(endpoint_id, f"http://127.0.0.1:9/{endpoint_id}", app=app_id)
    queue = DeadLetterQueue()
    for endpoint_id, event_id in (("a-1", "evt-1"), ("a-1", "evt-2"), ("a-1", "evt-3"),
                                  ("b-1", "evt-b")):
        queue.add(DeadLetter(endpoint_id=endpoint_id, event_id=event_id,
                             event_type="order.created", payload={}, reason="rejected",
                             last_status=400, attempts=1, last_response=XSS))
    return queue


def ids(queue: DeadLetterQueue) -> list[str]:
    return sorted(entry.id for entry in queue.find())


def selected_form(action: str, *entry_ids: str) -> MultiDict:
    return MultiDict([("action", action), *(("entry_id", entry_id) for entry_id in entry_ids)])


def test_rows_selected_are_confirmed_then_exactly_they_are_deleted(letters):
    browser = Browser(console())
    listed = browser.get("/dead-letters").get_data(as_text=True)
    assert 'id="dlq-selection"' in listed and listed.count('form="dlq-selection"') == 4
    form = selected_form("delete", "a-1/evt-1", "b-1/evt-b")
    form["csrf_token"] = browser.token("/dead-letters")
    confirm = browser.client.post("/dead-letters/selection", data=form, headers=browser.headers)
    page = confirm.get_data(as_text=True)
    assert confirm.status_code == 200 and 'data-count="2"' in page
    assert ids(letters) == ["a-1/evt-1", "a-1/evt-2", "a-1/evt-3", "b-1/evt-b"]  # not yet
    versions = VERSION.findall(page)
    assert [version.split(" ", 1)[1] for version in versions] == ["a-1/evt-1", "b-1/evt-b"]
    done = browser.client.post("/dead-letters/delete", headers=browser.headers, data=MultiDict(
        [("csrf_token", browser.token("/dead-letters")), *(("entry", v) for v in versions)]))
    assert done.status_code == 303
    assert parse_qs(urlsplit(done.headers["Location"]).query) == {"done": ["deleted"],
                                                                  "count": ["2"]}
    assert ids(letters) == ["a-1/evt-2", "a-1/evt-3"]
    shown = browser.get(done.headers["Location"]).get_data(as_text=True)
    assert 'id="letters-done" class="notice" role="status" data-done="deleted" ' \
           'data-count="2"' in shown


def test_each_new_action_needs_its_csrf_token(letters):
    browser = Browser(console())
    for path in POSTS:
        for form in ({"entry_id": "a-1/evt-1", "action": "delete", "endpoint": "a-1",
                      "as_of": "now"}, {"csrf_token": "0" * 64, "entry_id": "a-1/evt-1"}):
            answer = browser.client.post(path, data=form, headers=browser.headers)
            assert answer.status_code == 403, path
            assert "CSRF" in answer.get_data(as_text=True)
    assert len(ids(letters)) == 4


def test_a_read_only_operator_can_neither_delete_nor_purge(letters):
    viewer = Browser(console(), VIEWER)
    listed = viewer.get("/dead-letters").get_data(as_text=True)
    assert re.search(r'id="delete-selected" class="danger" disabled', listed)
    dry_run = viewer.get("/dead-letters/purge?endpoint=a-1").get_data(as_text=True)
    assert 'data-count="3"' in dry_run and re.search(r'id="confirm-purge" class="danger" '
                                                     r'disabled', dry_run)
    as_of = re.search(r'name="as_of" value="([^"]+)"', dry_run)[1]
    token = viewer.token("/dead-letters")
    version = f"{letters.get('a-1/evt-1').dead_lettered_at!r} a-1/evt-1"
    for path, form in (("/dead-letters/delete", {"entry": version}),
                       ("/dead-letters/replay-selected", {"entry": version}),
                       ("/dead-letters/purge", {"endpoint": "a-1", "as_of": as_of})):
        answer = viewer.client.post(path, data={**form, "csrf_token": token},
                                    headers=viewer.headers)
        assert answer.status_code == 403, path
        assert "read-only: victor cannot" in answer.get_data(as_text=True)
    assert len(ids(letters)) == 4
    assert audit.recent(Actor("test", "t")).items == []


def test_a_purge_counts_then_deletes_exactly_the_filtered_set(letters):
    browser = Browser(console())
    dry_run = browser.get("/dead-letters/purge?endpoint=a-1").get_data(as_text=True)
    assert 'data-count="3"' in dry_run
    as_of = re.search(r'name="as_of" value="([^"]+)"', dry_run)[1]
    refused = browser.post("/dead-letters/purge", {"as_of": as_of}, token_from="/dead-letters")
    assert refused.status_code == 400  # every dead letter: only when the form says so
    assert "refusing to act on every dead letter" in refused.get_data(as_text=True)
    bad = browser.post("/dead-letters/purge", {"endpoint": "a-1", "as_of": "soon"},
                       token_from="/dead-letters")
    assert bad.status_code == 400 and "as_of" in bad.get_data(as_text=True)
    letters.add(DeadLetter(endpoint_id="a-1", event_id="evt-late", event_type="order.created",
                           payload={}, reason="rejected"))  # after the dry run: it stays
    done = browser.post("/dead-letters/purge", {"endpoint": "a-1", "as_of": as_of},
                        token_from="/dead-letters")
    assert done.status_code == 303 and "count=3" in done.headers["Location"]
    assert ids(letters) == ["a-1/evt-late", "b-1/evt-b"]
    entry = audit.recent(Actor("test", "t"), limit=1).items[0]
    assert (entry.actor, entry.action, entry.target) == ("alice", "dead_letter.purge",
                                                         "3 dead letter(s)")
    assert entry.detail.startswith("matching endpoint=a-1, dead-lettered by ")


def test_a_replay_to_a_disabled_endpoint_is_confirmed_first_with_what_becomes_of_it(letters):
    EndpointRegistry().disable("a-1", "maintenance")
    browser = Browser(console())
    warned = browser.post("/dead-letters/replay", {"entry_id": "a-1/evt-1"},
                          token_from="/dead-letters")
    page = warned.get_data(as_text=True)
    assert warned.status_code == 200 and 'id="replay-warning"' in page
    assert 'data-endpoint-id="a-1" data-state="disabled"' in page
    assert "dead-lettered again at once" in page and "(maintenance)" in page
    assert letters.get("a-1/evt-1") is not None  # nothing replayed yet
    of_one = browser.get("/dead-letters/bulk-replay?endpoint=a-1").get_data(as_text=True)
    assert 'data-endpoint-id="a-1" data-state="disabled" data-count="3"' in of_one
    assert 'name="confirmed" value="1"' in of_one  # checked: the replay needs no second look
    # Without an endpoint filter the dry run leaves every endpoint's state to the replay.
    bulk = browser.get("/dead-letters/bulk-replay?reason=rejected").get_data(as_text=True)
    assert 'id="replay-warning"' not in bulk and 'name="confirmed"' not in bulk
    asked = browser.post("/dead-letters/bulk-replay", {"reason": "rejected"},
                         token_from="/dead-letters")
    page = asked.get_data(as_text=True)
    assert asked.status_code == 200 and 'data-count="4"' in page  # nothing started yet
    assert 'data-endpoint-id="a-1" data-state="disabled" data-count="3"' in page
    assert 'name="confirmed" value="1"' in page
    assert len(ids(letters)) == 4
    form = selected_form("replay", "a-1/evt-2", "b-1/evt-b")
    form["csrf_token"] = browser.token("/dead-letters")
    chosen = browser.client.post("/dead-letters/selection", data=form,
                                 headers=browser.headers).get_data(as_text=True)
    assert 'data-endpoint-id="a-1" data-state="disabled" data-count="1"' in chosen
    assert 'data-endpoint-id="b-1"' not in chosen


# -- the portal ------------------------------------------------------------------------------


@pytest.fixture
def tenant(letters, monkeypatch):
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", "http://localhost")
    from tests.integration.test_portal_pages import Tenant

    return Tenant(portal_app({"HOOKLINE_CONSOLE_SECRET_KEY": KEY}),
                  portal.portal_link("app-a"))


def test_a_tenant_selecting_or_deleting_another_applications_ids_is_answered_as_unknown(
        tenant, letters):
    token = tenant.token()
    answers = {}
    for foreign in ("b-1", "zz-9"):
        entry_id, version = f"{foreign}/evt-b", f"1700000000.0 {foreign}/evt-b"
        for path, form in (("/dead-letters/selection", [("action", "delete"),
                                                         ("entry_id", "a-1/evt-1"),
                                                         ("entry_id", entry_id)]),
                           ("/dead-letters/delete", [("entry", version)]),
                           ("/dead-letters/replay-selected", [("entry", version)])):
            answer = tenant.client.post(path, data=MultiDict([("csrf_token", token), *form]))
            answers[(foreign, path)] = (answer.status_code,
                                        answer.get_data(as_text=True).replace(foreign, "X"))
    for path in POSTS[:3]:
        assert answers[("b-1", path)] == answers[("zz-9", path)], path
        assert answers[("b-1", path)][0] == 404, path
    assert ids(letters) == ["a-1/evt-1", "a-1/evt-2", "a-1/evt-3", "b-1/evt-b"]


def test_a_tenant_deletes_and_purges_only_its_own_dead_letters(tenant, letters):
    listed = tenant.text("/dead-letters")
    assert XSS not in listed and "&lt;img id=&#34;xss&#34;" in listed  # its receiver's answer
    assert 'class="last-status">HTTP 400' in listed
    for path in POSTS:
        assert tenant.post(path, {"entry_id": "a-1/evt-1"}, csrf=False).status_code == 403
    version = f"{letters.get('a-1/evt-1').dead_lettered_at!r} a-1/evt-1"
    done = tenant.client.post("/dead-letters/delete", data={"csrf_token": tenant.token(),
                                                            "entry": version})
    assert done.status_code == 303 and ids(letters) == ["a-1/evt-2", "a-1/evt-3", "b-1/evt-b"]
    dry_run = tenant.text("/dead-letters/purge")
    assert 'data-count="2"' in dry_run and 'name="all" value="1"' in dry_run
    as_of = re.search(r'name="as_of" value="([^"]+)"', dry_run)[1]
    purged = tenant.post("/dead-letters/purge", {"all": "1", "as_of": as_of})
    assert purged.status_code == 303 and "count=2" in purged.headers["Location"]
    assert ids(letters) == ["b-1/evt-b"]
    assert tenant.post("/dead-letters/purge", {"endpoint": "b-1", "as_of": as_of}
                       ).status_code == 404
    assert ids(letters) == ["b-1/evt-b"]


def test_a_dead_letters_page_and_its_events_page_warn_before_a_replay_to_a_disabled_endpoint(
        letters):
    browser = Browser(console())
    entry = browser.get("/dead-letters/entry?id=a-1/evt-1").get_data(as_text=True)
    event = browser.get("/events?event_id=evt-1&endpoint=a-1").get_data(as_text=True)
    assert "replay-warning" not in entry and "replay-warning" not in event  # enabled: none
    EndpointRegistry().disable("a-1", "maintenance <b>")
    entry = browser.get("/dead-letters/entry?id=a-1/evt-1").get_data(as_text=True)
    assert 'id="replay-warning"' in entry and 'data-state="disabled"' in entry
    assert "(maintenance &lt;b&gt;)" in entry and "<b>" not in entry  # escaped
    assert re.search(r'data-confirm="[^"]*Warning: the endpoint is disabled, so the replay '
                     r'will be dead-lettered again at once', entry)
    event = browser.get("/events?event_id=evt-1&endpoint=a-1").get_data(as_text=True)
    assert 'class="warning replay-warning"' in event and 'data-state="disabled"' in event
    assert "Warning: the endpoint is disabled" in event
