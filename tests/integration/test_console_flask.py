"""The console mounted in Flask (hookline.contrib.flask_console.console_blueprint), in-process
with Flask's test client against a real Redis: the host's ``authorize`` hook (view, act), the
console's own CSRF tokens (or the host's), links under the mount prefix, the console's headers,
and the example app (examples/flask_app) behind its basic sign-in."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from flask import Flask

from examples.flask_app.app import create_app
from hookline.console.security import HostCsrf
from hookline.contrib.flask_console import console_blueprint
from hookline.service import audit
from hookline.service.actor import Actor
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry

TOKEN = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')
#: Who the test host knows, by the X-User header: what each may do.
ROLES = {"olga": {"view", "act"}, "vera": {"view"}, "nina": set()}


def authorize(request: Any, action: str) -> bool:
    return action in ROLES.get(request.headers.get("X-User", ""), set())


def host(**options: Any) -> Flask:
    app = Flask("host")
    app.secret_key = "host-secret-key-for-tests-only-0123456789"
    app.register_blueprint(
        console_blueprint(authorize, user=lambda request: request.headers["X-User"],
                          **options),
        url_prefix="/ops/hookline")
    return app


@pytest.fixture
def endpoint() -> str:
    AppRegistry().add("shop")
    EndpointRegistry().add("shop-1", "http://127.0.0.1:9/hook", app="shop")
    return "shop-1"


def _token(client: Any, who: str) -> str:
    page = client.get("/ops/hookline/endpoints/shop-1", headers={"X-User": who})
    found = TOKEN.search(page.get_data(as_text=True))
    assert found, "no console CSRF token on the page"
    return found[1]


def test_authorize_false_for_view_is_403(endpoint):
    client = host().test_client()
    for headers in ({}, {"X-User": "nina"}):
        assert client.get("/ops/hookline/endpoints", headers=headers).status_code == 403
        answer = client.post("/ops/hookline/endpoints/shop-1/pause", headers=headers)
        assert answer.status_code == 403
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_view_only_cannot_act_whatever_it_posts(endpoint):
    client = host().test_client()
    token = _token(client, "vera")
    for action in ("pause", "disable", "rotate-secret", "reset-breaker"):
        answer = client.post(f"/ops/hookline/endpoints/shop-1/{action}",
                             data={"csrf_token": token}, headers={"X-User": "vera"})
        assert answer.status_code == 403, action
        assert "read-only: flask:vera cannot" in answer.get_data(as_text=True)
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_with_act_a_user_pauses_an_endpoint_and_the_audit_log_names_them(endpoint):
    client = host().test_client()
    answer = client.post("/ops/hookline/endpoints/shop-1/pause",
                         data={"csrf_token": _token(client, "olga")},
                         headers={"X-User": "olga"})
    assert answer.status_code == 303
    assert answer.headers["Location"].startswith("/ops/hookline/endpoints/shop-1")
    assert EndpointRegistry().get("shop-1").paused_at is not None
    [entry] = audit.recent(Actor("test", "t")).items
    assert entry.actor == "flask:olga" and entry.session.startswith("flask-")


def test_a_post_without_the_consoles_token_is_refused(endpoint):
    mine, theirs = host().test_client(), host().test_client()
    stolen = _token(theirs, "olga")  # another browser's session: its token does not pass
    mine.get("/ops/hookline/endpoints", headers={"X-User": "olga"})
    for form in ({}, {"csrf_token": "0" * 64}, {"csrf_token": stolen}):
        answer = mine.post("/ops/hookline/endpoints/shop-1/pause", data=form,
                           headers={"X-User": "olga"})
        assert answer.status_code == 403
        assert "CSRF" in answer.get_data(as_text=True)
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_a_host_that_checks_csrf_itself_puts_its_token_in_the_forms(endpoint):
    client = host(host_csrf=HostCsrf("host_token", lambda request: "host-made")).test_client()
    page = client.get("/ops/hookline/endpoints/shop-1", headers={"X-User": "olga"})
    assert 'name="host_token" value="host-made"' in page.get_data(as_text=True)
    answer = client.post("/ops/hookline/endpoints/shop-1/pause", headers={"X-User": "olga"})
    assert answer.status_code == 303  # the host's own check stands in (it passed this one)


def test_links_carry_the_mount_prefix_and_responses_the_console_headers(endpoint):
    client = host(frame_ancestors="https://admin.example.com").test_client()
    answer = client.get("/ops/hookline/endpoints", headers={"X-User": "vera"})
    links = re.findall(r'(?:href|action|src)="(/[^"]*)"', answer.get_data(as_text=True))
    assert links and all(link.startswith("/ops/hookline/") for link in links), links
    assert "/ops/hookline/endpoints/shop-1" in links
    policy = answer.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors https://admin.example.com" in policy
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.headers["Referrer-Policy"] == "same-origin"
    cookie = answer.headers["Set-Cookie"]
    assert "Path=/ops/hookline" in cookie and "HttpOnly" in cookie


def test_without_frame_ancestors_the_consoles_setting_names_who_may_frame_it(endpoint,
                                                                             monkeypatch):
    monkeypatch.setenv("HOOKLINE_CONSOLE_FRAME_ANCESTORS", "https://admin.example.com")
    answer = host().test_client().get("/ops/hookline/endpoints", headers={"X-User": "vera"})
    assert "frame-ancestors https://admin.example.com;" in answer.headers["Content-Security-Policy"]
    assert "X-Frame-Options" not in answer.headers
    monkeypatch.delenv("HOOKLINE_CONSOLE_FRAME_ANCESTORS")
    answer = host().test_client().get("/ops/hookline/endpoints", headers={"X-User": "vera"})
    assert "frame-ancestors 'none';" in answer.headers["Content-Security-Policy"]
    assert answer.headers["X-Frame-Options"] == "DENY"


def _basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


def test_the_example_app_mounts_the_console_behind_its_sign_in(endpoint):
    app = create_app({"CONSOLE_OPERATOR": "olga:op-pass", "CONSOLE_VIEWER": "vera:view-pass"})
    client = app.test_client()
    for headers in ({}, _basic("olga", "wrong")):
        answer = client.get("/hookline/endpoints", headers=headers)
        assert answer.status_code == 401 and "WWW-Authenticate" in answer.headers
    viewer = client.get("/hookline/endpoints/shop-1", headers=_basic("vera", "view-pass"))
    assert viewer.status_code == 200
    token = TOKEN.search(viewer.get_data(as_text=True))
    assert token
    refused = client.post("/hookline/endpoints/shop-1/pause", data={"csrf_token": token[1]},
                          headers=_basic("vera", "view-pass"))
    assert refused.status_code == 403
    operator = app.test_client()
    page = operator.get("/hookline/endpoints/shop-1", headers=_basic("olga", "op-pass"))
    token = TOKEN.search(page.get_data(as_text=True))
    assert token
    done = operator.post("/hookline/endpoints/shop-1/pause", data={"csrf_token": token[1]},
                         headers=_basic("olga", "op-pass"))
    assert done.status_code == 303
    assert EndpointRegistry().get("shop-1").paused_at is not None
