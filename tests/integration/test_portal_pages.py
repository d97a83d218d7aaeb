"""The tenant portal in-process (werkzeug's test client) on a real Redis: a link opens a
session for its application only; nothing of another application is reachable by any URL,
parameter or id; tampered, expired and revoked tokens are refused; a read-only link cannot act;
every POST needs its CSRF token; the token never reaches a log, a page or a Location."""

from __future__ import annotations

import logging
import re
import threading
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server
from werkzeug.test import Client
from werkzeug.wrappers import Response

from hookline.console.portal import SESSION_COOKIE, PortalRequestHandler, portal_app
from hookline.core.config import settings
from hookline.service import portal, replay_jobs
from hookline.service.actor import Actor
from hookline.service.dead_letters import DeadLetterQuery
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate

KEY = "k" * 40
OPERATOR = Actor(name="alice", session="s-1")
TOKEN = re.compile(r'data-csrf-token="([0-9a-f]{64})"')


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", "http://localhost")
    return {"HOOKLINE_CONSOLE_SECRET_KEY": KEY}


@pytest.fixture
def tenants(quiet_redis, env):
    """app-a (a-1, a-2) and app-b (b-1), a dead letter at a-1 and at b-1, a bulk replay job
    of b's."""
    registry = EndpointRegistry()
    for app_id, endpoint_ids in (("app-a", ("a-1", "a-2")), ("app-b", ("b-1",))):
        AppRegistry().add(app_id)
        for endpoint_id in endpoint_ids:
            registry.add(endpoint_id, f"http://127.0.0.1:9/{endpoint_id}", app=app_id)
    queue = DeadLetterQueue()
    for endpoint_id, event_id in (("a-1", "evt-a"), ("b-1", "evt-b")):
        queue.add(DeadLetter(endpoint_id=endpoint_id, event_id=event_id,
                             event_type="order.created", payload={"secret": event_id},
                             reason="rejected", last_status=400, attempts=1))
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint="b-1"))
    return {"job_id": job_id}


class Tenant:
    """One browser that opened a portal link."""

    def __init__(self, app, url: str | None = None) -> None:
        self.client = Client(app)
        self.entered = self.client.get(urlsplit(url).path + "?" + urlsplit(url).query) \
            if url else None

    def get(self, path: str):
        return self.client.get(path)

    def text(self, path: str) -> str:
        return self.get(path).get_data(as_text=True)

    def token(self) -> str:
        found = TOKEN.search(self.text("/"))
        assert found
        return found[1]

    def post(self, path: str, data: dict[str, str] | None = None, *, csrf: bool = True):
        form = dict(data or {})
        if csrf:
            form["csrf_token"] = self.token()
        return self.client.post(path, data=form)


def link(app_id: str = "app-a", **options) -> str:
    return portal.portal_link(app_id, **options)


def test_a_link_opens_a_session_and_leaves_a_clean_url(tenants, env):
    url = link()
    token = parse_qs(urlsplit(url).query)["token"][0]
    tenant = Tenant(portal_app(env), url)
    entered = tenant.entered
    assert entered.status_code == 303
    assert entered.headers["Location"] == "/"
    assert entered.headers["Referrer-Policy"] == "no-referrer"
    cookie = entered.headers["Set-Cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    home = tenant.get("/")
    assert home.status_code == 200
    page = home.get_data(as_text=True)
    assert token not in page
    assert set(re.findall(r'<tr data-endpoint-id="([^"]+)"', page)) == {"a-1", "a-2"}
    assert "b-1" not in page
    assert "frame-ancestors 'none'" in home.headers["Content-Security-Policy"]


def open_breaker(endpoint_id: str) -> None:
    """Open the breaker of ``endpoint_id`` as a worker would: threshold failed attempts."""
    gate = Gate()
    for n in range(settings().breaker_threshold):
        assert gate.admit(endpoint_id, f"e{n}", f"t{n}").verdict == "admitted"
        gate.settle(endpoint_id, f"e{n}", f"t{n}", "failed")


def breaker_shown(page: str, endpoint_id: str) -> str:
    """The breaker state the endpoint list shows in ``endpoint_id``'s row."""
    row = re.search(rf'<tr data-endpoint-id="{endpoint_id}">(.*?)</tr>', page, re.S)
    assert row, endpoint_id
    cell = re.search(r'<td class="state-(\w+)" data-breaker-state="\1">\1</td>', row[1])
    assert cell, row[1]
    return cell[1]


def test_the_endpoint_list_shows_an_open_breaker_as_open(tenants, env):
    open_breaker("a-1")
    page = Tenant(portal_app(env), link()).text("/")
    assert breaker_shown(page, "a-1") == "open"
    assert breaker_shown(page, "a-2") == "closed"


def test_a_tenant_sees_its_events_and_dead_letters(tenants, env):
    tenant = Tenant(portal_app(env), link())
    letters = tenant.text("/dead-letters")
    assert re.findall(r'<tr data-entry-id="([^"]+)"', letters) == ["a-1/evt-a"]
    assert "evt-b" not in letters
    assert "evt-a" in tenant.text("/dead-letters/entry?id=a-1/evt-a")
    report = tenant.text("/events?event_id=evt-a")
    assert 'data-found="true"' in report and 'data-endpoint-id="a-1"' in report


def test_a_tenant_is_not_shown_what_only_an_operator_sees(tenants, env):
    DeadLetterQueue().add(DeadLetter(endpoint_id="a-2", event_id="evt-d", event_type="t.x",
                                     payload={}, reason="refused", detail="detail-for-ops",
                                     last_status=None, attempts=1, last_error="error-for-ops"))
    tenant = Tenant(portal_app(env), link())
    for path in ("/events?event_id=evt-d", "/dead-letters", "/dead-letters/entry?id=a-2/evt-d"):
        page = tenant.text(path)
        assert "evt-d" in page and "detail-for-ops" not in page, path
    for path in ("/events?event_id=evt-d", "/dead-letters"):
        assert "error-for-ops" not in tenant.text(path), path
    assert 'id="bulk-replay-link"' not in tenant.text("/dead-letters")
    assert 'id="trace-context"' not in tenant.text("/endpoints/a-1")


#: Every portal route with another application's endpoint, event, dead letter or job id.
FOREIGN_GETS = ["/endpoints/b-1", "/events?event_id=evt-b&endpoint=b-1",
                "/dead-letters/entry?id=b-1/evt-b", "/dead-letters?endpoint=b-1"]
FOREIGN_POSTS = [("/endpoints/b-1/pause", {}), ("/endpoints/b-1/resume", {}),
                 ("/endpoints/b-1/rotate-secret", {}),
                 ("/endpoints/b-1/subscriptions", {"event_types": "x.y"}),
                 ("/events/replay", {"endpoint_id": "b-1", "event_id": "evt-b"}),
                 ("/dead-letters/replay", {"entry_id": "b-1/evt-b"}),
                 ("/endpoints", {"endpoint_id": "b-2", "url": "http://127.0.0.1:9/x",
                                 "app": "app-b"})]


def test_nothing_of_another_application_is_reachable(tenants, env):
    tenant = Tenant(portal_app(env), link())
    before = EndpointRegistry().require("b-1")
    for path in FOREIGN_GETS:
        answer = tenant.get(path)
        assert answer.status_code == 404, path
        # The very answer an endpoint that does not exist gets: nothing tells B's apart.
        unknown = tenant.get(path.replace("b-1", "zz-9"))
        assert answer.get_data(as_text=True) == unknown.get_data(as_text=True).replace(
            "zz-9", "b-1"), path
    assert tenant.get("/events?event_id=evt-b").get_data(as_text=True).count(
        'data-found="false"') == 1
    job_id = tenants["job_id"]
    for path in (f"/dead-letters/jobs/{job_id}", f"/?job={job_id}",
                 f"/dead-letters?job={job_id}&app=app-b", "/?app=app-b"):
        page = tenant.text(path)
        assert "b-1" not in page, path
    for path, data in FOREIGN_POSTS:
        answer = tenant.post(path, data)
        assert answer.status_code == (200 if path == "/endpoints" else 404), path
    added = EndpointRegistry().get("b-2")
    assert added is not None and added.app == "app-a"  # the link names the application
    assert EndpointRegistry().require("b-1") == before
    assert DeadLetterQueue().get("b-1/evt-b") is not None


def test_tampered_expired_and_revoked_tokens_are_refused(tenants, env, monkeypatch):
    app = portal_app(env)
    good = link()
    query = urlsplit(good).query
    token = parse_qs(query)["token"][0]
    for bad in (token[:-3] + "AAA", token.replace("hlp1.", "hlp1.e"), "x", ""):
        answer = Client(app).get("/enter", query_string={"token": bad})
        assert answer.status_code == 403 and "Set-Cookie" not in answer.headers
        assert "not valid" in answer.get_data(as_text=True)
    forged_cookie = Client(app)
    forged_cookie.set_cookie(SESSION_COOKIE, token[:-3] + "AAA")
    assert forged_cookie.get("/").status_code == 403
    assert Client(app).get("/").status_code == 401
    # Revoked: the open session stops working too.
    tenant = Tenant(app, good)
    assert tenant.get("/").status_code == 200
    portal.revoke(portal.verify(token).link_id)
    refused = tenant.get("/")
    assert refused.status_code == 403 and "revoked" in refused.get_data(as_text=True)
    assert Tenant(app, good).entered.status_code == 403
    # Expired.
    short = link(ttl=60)
    tenant = Tenant(app, short)
    real = portal.time.time
    monkeypatch.setattr(portal.time, "time", lambda: real() + 61)
    expired = tenant.get("/")
    assert expired.status_code == 403 and "expired" in expired.get_data(as_text=True)


def test_a_read_only_link_cannot_act(tenants, env):
    tenant = Tenant(portal_app(env), link(read_only=True))
    page = tenant.text("/endpoints/a-1")
    assert 'id="endpoint-actions"' not in page and 'id="read-only"' in page
    for path, data in [("/endpoints/a-1/pause", {}), ("/endpoints/a-1/rotate-secret", {}),
                       ("/endpoints/a-1/subscriptions", {"event_types": "x.y"}),
                       ("/dead-letters/replay", {"entry_id": "a-1/evt-a"}),
                       ("/events/replay", {"endpoint_id": "a-1", "event_id": "evt-a"}),
                       ("/endpoints", {"endpoint_id": "a-3", "url": "http://127.0.0.1:9/"})]:
        answer = tenant.post(path, data)
        assert answer.status_code == 403, path
        assert "read-only" in answer.get_data(as_text=True)
    endpoint = EndpointRegistry().require("a-1")
    assert endpoint.paused_at is None and endpoint.event_types == ()
    assert EndpointRegistry().get("a-3") is None
    assert DeadLetterQueue().get("a-1/evt-a") is not None


POSTS = ["/endpoints", "/endpoints/a-1/pause", "/endpoints/a-1/resume",
         "/endpoints/a-1/rotate-secret", "/endpoints/a-1/subscriptions", "/events/replay",
         "/dead-letters/replay"]


def test_every_post_needs_its_csrf_token(tenants, env):
    app = portal_app(env)
    tenant = Tenant(app, link())
    for path in POSTS:
        assert tenant.post(path, {"entry_id": "a-1/evt-a", "endpoint_id": "a-9",
                                  "url": "http://127.0.0.1:9/"}, csrf=False).status_code == 403
        wrong = tenant.client.post(path, data={"csrf_token": "0" * 64})
        assert wrong.status_code == 403, path
    # Another link's token (another session) is not this one's.
    other = Tenant(app, link()).token()
    assert tenant.client.post("/endpoints/a-1/pause",
                              data={"csrf_token": other}).status_code == 403
    assert EndpointRegistry().require("a-1").paused_at is None
    assert EndpointRegistry().get("a-9") is None
    assert DeadLetterQueue().get("a-1/evt-a") is not None


def test_a_tenant_manages_its_endpoints(tenants, env):
    tenant = Tenant(portal_app(env), link())
    refused = tenant.post("/endpoints", {"endpoint_id": "a-3", "url": "http://10.0.0.5/hook"})
    assert refused.status_code == 400 and "url" in refused.get_data(as_text=True)
    assert EndpointRegistry().get("a-3") is None
    added = tenant.post("/endpoints", {"endpoint_id": "a-3", "url": "http://127.0.0.1:9/a3",
                                       "event_types": "order.created, order.paid"})
    assert added.status_code == 200
    secret = re.search(r'id="new-secret">([^<]+)<', added.get_data(as_text=True))[1]
    endpoint = EndpointRegistry().require("a-3")
    assert endpoint.app == "app-a" and endpoint.secrets == (secret,)
    assert endpoint.event_types == ("order.created", "order.paid")
    assert secret not in tenant.text("/endpoints/a-3")
    assert tenant.post("/endpoints/a-3/subscriptions", {"event_types": ""}).status_code == 303
    assert EndpointRegistry().require("a-3").event_types == ()
    assert tenant.post("/endpoints/a-1/pause").status_code == 303
    assert EndpointRegistry().require("a-1").paused_at is not None
    assert "Endpoint paused" in tenant.text("/endpoints/a-1?notice=paused")
    assert tenant.post("/endpoints/a-1/resume").status_code == 303
    assert EndpointRegistry().require("a-1").paused_at is None
    rotated = tenant.post("/endpoints/a-1/rotate-secret").get_data(as_text=True)
    new = re.search(r'id="new-secret">([^<]+)<', rotated)[1]
    assert EndpointRegistry().require("a-1").secrets[0] == new
    replayed = tenant.post("/dead-letters/replay", {"entry_id": "a-1/evt-a"})
    assert replayed.status_code == 303
    assert DeadLetterQueue().get("a-1/evt-a") is None
    signed = tenant.post("/endpoints", {"endpoint_id": "a-4", "url": "http://127.0.0.1:9/a4",
                                        "signature": "ed25519"}).get_data(as_text=True)
    public_key = re.search(r'id="new-public-key">([^<]+)<', signed)[1]
    assert 'id="new-secret"' not in signed
    assert EndpointRegistry().require("a-4").secrets[0].startswith("whsk_")
    assert public_key in tenant.text("/endpoints/a-4")


def test_the_token_is_never_logged(tenants, env, caplog):
    caplog.set_level(logging.DEBUG)
    app = portal_app(env)
    url = link()
    token = parse_qs(urlsplit(url).query)["token"][0]
    tenant = Tenant(app, url)
    for path in ("/", "/endpoints/a-1", "/events?event_id=evt-a", "/dead-letters",
                 "/endpoints/b-1", "/nowhere"):
        tenant.get(path)
    tenant.post("/endpoints/a-1/pause")
    tenant.post("/endpoints/a-1/pause", csrf=False)
    Client(app).get("/enter", query_string={"token": token[:-2] + "xx"})
    portal.revoke(portal.verify(token).link_id)
    tenant.get("/")
    assert token not in caplog.text and token[:-2] not in caplog.text
    signature = token.rsplit(".", 1)[1]
    assert signature not in caplog.text


def test_framing_is_allowed_to_the_configured_ancestors_only(tenants, env):
    app = portal_app({**env, "HOOKLINE_PORTAL_FRAME_ANCESTORS": "https://app.example.com"})
    tenant = Tenant(app, link())
    assert "SameSite=None" in tenant.entered.headers["Set-Cookie"]
    assert "Secure" in tenant.entered.headers["Set-Cookie"]
    home = tenant.client.get("/", base_url="https://localhost/")
    policy = home.headers["Content-Security-Policy"]
    assert "frame-ancestors https://app.example.com;" in policy
    assert "X-Frame-Options" not in home.headers
    with pytest.raises(Exception, match="HOOKLINE_PORTAL_FRAME_ANCESTORS"):
        portal_app({**env, "HOOKLINE_PORTAL_FRAME_ANCESTORS": "javascript:alert(1) <x>"})


def test_no_portal_without_the_key():
    with pytest.raises(Exception, match="HOOKLINE_CONSOLE_SECRET_KEY"):
        portal_app({})


def test_served_by_werkzeug_the_access_log_hides_the_token(tenants, env, caplog):
    caplog.set_level(logging.INFO, logger="werkzeug")
    server = make_server("127.0.0.1", 0, portal_app(env), request_handler=PortalRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = link(base_url=f"http://127.0.0.1:{server.port}")
        token = parse_qs(urlsplit(url).query)["token"][0]
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with browser.open(url) as answer:  # follows the redirect to /, with the cookie
            assert answer.status == 200 and answer.url.endswith(f"{server.port}/")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url.replace("token=", "token=x"))
    finally:
        server.shutdown()
        thread.join(5)
    assert "GET /enter?token=[hidden]" in caplog.text
    assert token not in caplog.text and token[5:30] not in caplog.text


def test_stored_strings_are_escaped(tenants, env):
    xss = "<script>window.__xss=1</script>"
    DeadLetterQueue().add(DeadLetter(endpoint_id="a-2", event_id="evt-x", event_type=xss,
                                     payload={"html": xss}, reason="rejected",
                                     last_status=400, attempts=1, last_error=xss))
    tenant = Tenant(portal_app(env), link())
    for path in ("/dead-letters", "/dead-letters/entry?id=a-2/evt-x"):
        page = tenant.text(path)
        assert xss not in page and "&lt;script&gt;" in page, path


def test_under_a_mount_point_the_session_and_links_carry_it(tenants, env):
    host = DispatcherMiddleware(Response("host"), {"/portal": portal_app(env)})
    url = link(base_url="http://localhost/portal")
    tenant = Tenant(host, url)
    assert tenant.entered.headers["Location"] == "/portal/"
    assert "Path=/portal/" in tenant.entered.headers["Set-Cookie"]
    page = tenant.text("/portal/")
    assert 'href="/portal/endpoints/a-1"' in page and 'href="/portal/static/console.css"' in page
