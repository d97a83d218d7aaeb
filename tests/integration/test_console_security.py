"""The standalone console's defences, in-process against a real Redis: no page without
credentials (401 and a sign-in challenge), no state change without the page's CSRF token (403),
a read-only viewer refused by the service whatever it posts, the security headers on every
response, stored strings escaped, and settings refused in one line that never shows a
password."""

from __future__ import annotations

import re

import pytest

from hookline.console.standalone import console_settings
from hookline.core.env import ConfigError
from hookline.service import audit
from hookline.service.actor import Actor
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.support.console import OPERATOR, VIEWER, Browser, basic, console

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


@pytest.fixture
def app():
    return console()


@pytest.fixture
def endpoint():
    AppRegistry().add("shop")
    return EndpointRegistry().add("shop-1", "http://127.0.0.1:9/hook", app="shop")


def test_a_request_without_credentials_gets_401_and_a_basic_challenge(app):
    browser = Browser(app)
    for headers in ({}, basic("alice", "wrong"), basic("mallory", "alice-password")):
        answer = browser.client.get("/endpoints", headers=headers)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"].startswith("Basic realm=")
        assert "endpoint" not in answer.get_data(as_text=True).lower()


def test_a_post_without_its_csrf_token_is_refused_before_anything_happens(app, endpoint):
    browser = Browser(app)
    for form in ({}, {"csrf_token": "0" * 64}):
        answer = browser.client.post("/endpoints/shop-1/pause", data=form,
                                     headers=browser.headers)
        assert answer.status_code == 403
        assert "CSRF" in answer.get_data(as_text=True)
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_a_csrf_token_is_bound_to_its_session(app, endpoint):
    """Another browser's token (another session cookie) does not pass."""
    mine, theirs = Browser(app), Browser(app)
    stolen = theirs.token("/endpoints/shop-1")
    answer = mine.client.post("/endpoints/shop-1/pause", data={"csrf_token": stolen},
                              headers=mine.headers)
    assert answer.status_code == 403
    assert mine.post("/endpoints/shop-1/pause").status_code == 303
    assert EndpointRegistry().get("shop-1").paused_at is not None


def test_a_read_only_viewer_sees_pages_but_cannot_act(app, endpoint):
    viewer = Browser(app, VIEWER)
    page = viewer.get("/endpoints/shop-1").get_data(as_text=True)
    assert 'id="read-only"' in page and 'data-can-act="false"' in page
    for path in ("/endpoints/shop-1/pause", "/endpoints/shop-1/disable",
                 "/endpoints/shop-1/rotate-secret", "/endpoints/shop-1/reset-breaker"):
        answer = viewer.post(path, token_from="/endpoints/shop-1")
        assert answer.status_code == 403, path
        assert "read-only: victor cannot" in answer.get_data(as_text=True)
    after = EndpointRegistry().get("shop-1")
    assert after.paused_at is None and after.enabled and after.secrets == endpoint.secrets
    assert audit.recent(Actor("test", "t")).items == []


def test_every_response_carries_the_security_headers(app, endpoint):
    browser = Browser(app)
    answers = [browser.get("/endpoints/shop-1"), browser.client.get("/"),
               browser.get("/static/console.js"), browser.get("/no-such-page"),
               browser.client.post("/endpoints/shop-1/pause", headers=browser.headers)]
    for answer in answers:
        policy = answer.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
        assert "style-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "form-action 'self'" in policy and "unsafe-inline" not in policy
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "same-origin"
        assert answer.headers["Cache-Control"] == "no-store"


def test_frame_ancestors_come_from_the_setting():
    app = console({"HOOKLINE_CONSOLE_FRAME_ANCESTORS": "https://admin.example.com 'self'"})
    policy = Browser(app).get("/audit").headers["Content-Security-Policy"]
    assert "frame-ancestors https://admin.example.com 'self';" in policy


def test_no_page_holds_inline_script_or_style(app, endpoint):
    browser = Browser(app)
    for path in ("/", "/endpoints", "/endpoints/shop-1", "/events", "/dead-letters",
                 "/schedule", "/stats", "/audit"):
        page = browser.get(path).get_data(as_text=True)
        assert re.findall(r"<script(?![^>]*\bsrc=)", page) == [], path
        assert "<style" not in page and " style=" not in page, path
        assert not re.search(r"\son[a-z]+=", page), path


def test_a_stored_script_in_an_event_type_is_shown_escaped(app, endpoint):
    DeadLetterQueue().add(DeadLetter(endpoint_id="shop-1", event_id="evt-xss", event_type=XSS,
                                     payload={"note": XSS}, reason="rejected",
                                     last_error=XSS))
    browser = Browser(app)
    for path in ("/dead-letters", "/dead-letters/entry?id=shop-1/evt-xss",
                 "/events?event_id=evt-xss&endpoint=shop-1"):
        page = browser.get(path).get_data(as_text=True)
        assert "<script>window.__xss" not in page and "<img src=x" not in page, path
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in page, path


def test_an_unknown_endpoint_is_404_and_a_bad_filter_400(app):
    browser = Browser(app)
    assert browser.get("/endpoints/nobody").status_code == 404
    answer = browser.get("/dead-letters?reason=<b>bad</b>")
    assert answer.status_code == 400
    assert "&lt;b&gt;bad&lt;/b&gt;" in answer.get_data(as_text=True)


# -- settings --------------------------------------------------------------------------------


def test_without_credentials_there_is_no_console():
    with pytest.raises(ConfigError, match="HOOKLINE_CONSOLE_BASIC_AUTH=user:password"):
        console_settings({})


@pytest.mark.parametrize("env", [
    {"HOOKLINE_CONSOLE_BASIC_AUTH": "alice"},
    {"HOOKLINE_CONSOLE_BASIC_AUTH": "alice:s3cret,bob:"},
    {"HOOKLINE_CONSOLE_BASIC_AUTH": "alice:s3cret", "HOOKLINE_CONSOLE_VIEWERS": "alice:other"},
    {"HOOKLINE_CONSOLE_BASIC_AUTH": "alice:s3cret", "HOOKLINE_CONSOLE_SECRET_KEY": "short"},
    {"HOOKLINE_CONSOLE_BASIC_AUTH": "alice:s3cret",
     "HOOKLINE_CONSOLE_FRAME_ANCESTORS": "https://a.example; script-src *"},
])
def test_a_bad_console_setting_is_named_without_its_secret(env):
    with pytest.raises(ConfigError) as refused:
        console_settings(env)
    message = str(refused.value)
    assert "HOOKLINE_CONSOLE_" in message
    assert "s3cret" not in message and "other" not in message and "short" not in message


def test_settings_keep_passwords_out_of_their_repr():
    config = console_settings({"HOOKLINE_CONSOLE_BASIC_AUTH": f"{OPERATOR[0]}:{OPERATOR[1]}",
                               "HOOKLINE_CONSOLE_SECRET_KEY": "k" * 40})
    assert OPERATOR[1] not in repr(config) and "k" * 40 not in repr(config)
    assert OPERATOR[1] not in repr(config.credentials[0])
