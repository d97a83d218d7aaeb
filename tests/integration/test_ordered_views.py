"""What operators see of ordered endpoints, through the faces, on a real Redis with no worker:
``hookline endpoint lines`` (a table, JSON, a page and what is left), ``hookline stats``'
ordered endpoints, the console's endpoint page (the lines, escaped) and the tenant portal's
(its own endpoint's lines only)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from werkzeug.test import Client

from hookline.console.portal import portal_app
from hookline.service import portal
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from tests.support.cli import fails, json_out, succeeds
from tests.support.console import Browser, console
from tests.support.ordering import dead_letter_head, line_up

XSS = "<script>window.__xss=1</script>"
KEY = "k" * 40


@pytest.fixture
def ordered(quiet_redis):
    """Ordered endpoint ``ord`` of application ``shop``: key ``k-dead``'s head dead-lettered
    (2 waiting), a key named like a script (1 waiting); ``plain`` is not ordered."""
    AppRegistry().add("shop")
    registry = EndpointRegistry()
    registry.add("ord", "http://127.0.0.1:9/ord", app="shop", ordered=True)
    registry.add("plain", "http://127.0.0.1:9/plain", app="shop")
    line_up(quiet_redis, "ord", "k-dead", ["dead-1", "dead-2", "dead-3"])
    line_up(quiet_redis, "ord", XSS, ["xss-1", "xss-2"])
    dead_letter_head("ord", "dead-1")
    return quiet_redis


def test_endpoint_lines_lists_each_key_with_its_head_and_why(ordered):
    text = succeeds("endpoint", "lines", "ord").stdout
    assert "2 keys with a delivery out, 3 deliveries waiting behind their heads (policy block)" \
        in text
    rows = text.splitlines()[2:]
    assert rows[0].split()[:4] == ["k-dead", "dead-1", "1", "2"]
    assert "blocked: replay or discard the dead letter" in rows[0]
    assert rows[1].split()[:4] == [XSS, "xss-1", "1", "1"]
    assert "on the queue or in flight" in rows[1]


def test_endpoint_lines_json_and_a_page_of_them(ordered):
    found = json_out("endpoint", "lines", "ord", "--limit", "1")
    assert (found["ordered"], found["policy"], found["keys_out"], found["waiting"],
            found["more"]) == (True, "block", 2, 3, 1)
    [line] = found["lines"]
    assert (line["key"], line["head_event"], line["where"], line["reason"]) == (
        "k-dead", "dead-1", "dead_lettered", "rejected")
    assert "(1 more keys: raise --limit)" in succeeds("endpoint", "lines", "ord",
                                                      "--limit", "1").stdout


def test_endpoint_lines_of_an_unordered_or_unknown_endpoint(ordered):
    assert "endpoint plain is not ordered" in succeeds("endpoint", "lines", "plain").stdout
    assert json_out("endpoint", "lines", "plain")["ordered"] is False
    failed = fails("endpoint", "lines", "nowhere")
    assert len(failed.output.strip().splitlines()) == 1 and "nowhere" in failed.output


def test_stats_shows_each_ordered_endpoints_keys_out_and_waiting(ordered):
    text = succeeds("stats").stdout
    assert re.search(r"ordered endpoints: +1: 2 keys with a delivery out, 3 waiting", text)
    assert re.search(r"  ord: +2 keys out, 3 waiting, 1 blocked \(policy block\)", text)
    assert json_out("stats")["ordered"] == [
        {"endpoint_id": "ord", "policy": "block", "keys_out": 2, "waiting": 3, "blocked": 1,
         "blocked_checked": 2}]


def test_the_console_shows_an_ordered_endpoints_lines_escaped(ordered):
    browser = Browser(console())
    page = browser.get("/endpoints/ord").get_data(as_text=True)
    assert 'id="order-lines"' in page
    assert re.findall(r'<tr data-ordering-key="([^"]+)"', page) == [
        "k-dead", "&lt;script&gt;window.__xss=1&lt;/script&gt;"]
    assert XSS not in page
    assert "dead-lettered (rejected): blocked: replay or discard the dead letter" in page
    assert 'id="order-lines"' not in browser.get("/endpoints/plain").get_data(as_text=True)


def test_the_portal_shows_a_tenant_its_own_endpoints_lines(ordered, monkeypatch):
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", "http://localhost")
    AppRegistry().add("other")
    EndpointRegistry().add("theirs", "http://127.0.0.1:9/theirs", app="other", ordered=True)
    line_up(ordered, "theirs", "k-theirs", ["t-1", "t-2"])
    tenant = Client(portal_app({"HOOKLINE_CONSOLE_SECRET_KEY": KEY}))
    link = urlsplit(portal.portal_link("shop"))
    assert tenant.get(f"{link.path}?{link.query}").status_code == 303  # the session opened
    page = tenant.get("/endpoints/ord").get_data(as_text=True)
    assert re.findall(r'<tr data-ordering-key="([^"]+)"', page)[0] == "k-dead"
    assert "hookline endpoint lines" not in page
    assert tenant.get("/endpoints/theirs").status_code == 404
