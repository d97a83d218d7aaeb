"""The console mounted in Django (hookline.contrib.django.console, as examples/django_project
includes it under /hookline/), in-process with Django's test client against a real Redis:
the project's sign-in and the two permissions, Django's own CSRF check, links under the mount
prefix, and the console's headers."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hookline.core import config
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry

TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture(scope="module")
def django_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The example project set up once, its SQLite database migrated (the permissions too)."""
    saved = config._configured
    os.environ["DJANGO_SETTINGS_MODULE"] = "examples.django_project.settings"
    os.environ["ORDERS_DB_PATH"] = str(tmp_path_factory.mktemp("django") / "orders.sqlite3")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    yield
    config._configured = saved


def _user(*permissions: str, staff: bool = True) -> Any:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(f"u{uuid.uuid4().hex[:8]}", password="pw", is_staff=staff)
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="hookline",
                                                         codename=codename))
    return user


def _client(user: Any = None, *, enforce_csrf: bool = False) -> Any:
    from django.test import Client

    client = Client(enforce_csrf_checks=enforce_csrf)
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def endpoint(django_project: None) -> str:
    AppRegistry().add("shop")
    EndpointRegistry().add("shop-1", "http://127.0.0.1:9/hook", app="shop")
    return "shop-1"


def test_someone_not_signed_in_goes_to_the_staff_sign_in(django_project):
    answer = _client().get("/hookline/endpoints")
    assert answer.status_code == 302
    assert answer["Location"].startswith("/admin/login/?next=/hookline/endpoints")


def test_a_user_without_the_view_permission_gets_403(django_project, endpoint):
    client = _client(_user())
    assert client.get("/hookline/endpoints").status_code == 403
    assert client.post("/hookline/endpoints/shop-1/pause").status_code == 403
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_view_only_sees_the_pages_but_the_service_refuses_its_actions(django_project,
                                                                      endpoint):
    client = _client(_user("view_console"))
    page = client.get("/hookline/endpoints/shop-1")
    assert page.status_code == 200 and "shop-1" in page.content.decode()
    for action in ("pause", "disable", "rotate-secret", "reset-breaker"):
        answer = client.post(f"/hookline/endpoints/shop-1/{action}")
        assert answer.status_code == 403, action
        assert "read-only: django:" in answer.content.decode()
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_with_the_act_permission_a_user_pauses_an_endpoint_with_djangos_token(
        django_project, endpoint):
    client = _client(_user("view_console", "act_console"), enforce_csrf=True)
    page = client.get("/hookline/endpoints/shop-1").content.decode()
    token = TOKEN.search(page)
    assert token, "the console's forms carry Django's csrfmiddlewaretoken"
    answer = client.post("/hookline/endpoints/shop-1/pause",
                         {"csrfmiddlewaretoken": token[1]})
    assert answer.status_code == 303
    assert answer["Location"].startswith("/hookline/endpoints/shop-1")
    assert EndpointRegistry().get("shop-1").paused_at is not None


def test_a_superuser_may_act(django_project, endpoint):
    from django.contrib.auth.models import User

    admin = User.objects.create_superuser(f"a{uuid.uuid4().hex[:8]}", password="pw")
    assert _client(admin).post("/hookline/endpoints/shop-1/pause").status_code == 303
    assert EndpointRegistry().get("shop-1").paused_at is not None


def test_a_post_without_djangos_csrf_token_is_refused_by_django(django_project, endpoint):
    client = _client(_user("view_console", "act_console"), enforce_csrf=True)
    client.get("/hookline/endpoints/shop-1")  # the CSRF cookie, but no token in the form
    for form in ({}, {"csrfmiddlewaretoken": "x" * 32}):
        assert client.post("/hookline/endpoints/shop-1/pause", form).status_code == 403
    assert EndpointRegistry().get("shop-1").paused_at is None


def test_links_carry_the_mount_prefix_and_responses_the_console_headers(django_project,
                                                                        endpoint):
    answer = _client(_user("view_console")).get("/hookline/endpoints")
    page = answer.content.decode()
    links = re.findall(r'(?:href|action|src)="(/[^"]*)"', page)
    assert links and all(link.startswith("/hookline/") for link in links), links
    assert "/hookline/endpoints/shop-1" in links
    policy = answer["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert answer["X-Content-Type-Options"] == "nosniff"
    assert answer["Cache-Control"] == "no-store"
    assert answer["Referrer-Policy"] == "same-origin"
    static = _client(_user("view_console")).get("/hookline/static/console.js")
    assert static.status_code == 200 and static["Content-Type"].startswith("text/javascript")


def test_the_audit_log_names_the_django_user_and_never_the_session_key(django_project,
                                                                       endpoint):
    from hookline.service import audit
    from hookline.service.actor import Actor

    user = _user("view_console", "act_console")
    client = _client(user)
    client.post("/hookline/endpoints/shop-1/pause")
    [entry] = audit.recent(Actor("test", "t")).items
    assert entry.actor == f"django:{user.username}"
    assert client.session.session_key not in entry.session


@pytest.fixture
def framed_by(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Sets HOOKLINE_CONSOLE_FRAME_ANCESTORS for a console built afresh; the next test gets
    one built from its own environment."""
    from hookline.contrib.django.console import console

    def setting(value: str) -> None:
        monkeypatch.setenv("HOOKLINE_CONSOLE_FRAME_ANCESTORS", value)
        console.cache_clear()

    yield setting
    console.cache_clear()


def test_the_pages_that_may_frame_it_come_from_the_consoles_setting(django_project, endpoint,
                                                                    framed_by):
    from hookline.core.env import ConfigError

    framed_by("https://admin.example.com 'self'")
    answer = _client(_user("view_console")).get("/hookline/endpoints")
    assert answer.status_code == 200
    policy = answer["Content-Security-Policy"]
    assert "frame-ancestors https://admin.example.com 'self';" in policy
    assert "X-Frame-Options" not in answer
    framed_by("javascript:alert(1)")
    with pytest.raises(ConfigError, match=r"^HOOKLINE_CONSOLE_FRAME_ANCESTORS: "):
        _client(_user("view_console")).get("/hookline/endpoints")
