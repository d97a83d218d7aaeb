"""Every console page renders from the service's answers, in-process against a real Redis:
the overview, endpoints (a page at a time) and one endpoint's health, its actions (each
audited, the rotated secret shown once), events with their attempts (a real worker and
receiver: the receiver's HTML body is shown escaped), dead letters with bookmarkable filters,
replay, the bulk replay's dry run and job, the retry schedule, the stats chart and the audit
log; mounted under a prefix, every link carries it."""

from __future__ import annotations

import re
import time

import pytest
from werkzeug.test import Client

import hookline.service.replay_jobs
from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.console import make_app
from hookline.console.security import SignedTokens
from hookline.delivery.replay_job import JobRunner
from hookline.service import audit, replay_jobs
from hookline.service.actor import Actor
from hookline.service.dead_letters import DeadLetterQuery
from hookline.store import keys
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.replay_jobs import CONTINUATIONS
from hookline.store.schedule import RetrySchedule
from tests.conftest import wait_until
from tests.support.console import Browser, console

XSS = "<script>window.__xss=1</script>"
PAGES = ("/", "/overview/fragment", "/apps", "/endpoints", "/endpoints?app=shop&search=shop",
         "/endpoints/shop-1", "/events", "/events?event_id=evt-0&endpoint=shop-1",
         "/dead-letters", "/dead-letters?endpoint=shop-1&reason=rejected&since=1h&order=newest",
         "/dead-letters/entry?id=shop-1/evt-0", "/dead-letters/bulk-replay?endpoint=shop-1",
         "/schedule", "/schedule?endpoint=shop-1", "/schedule/fragment", "/stats",
         "/stats?minutes=1440", "/audit")


@pytest.fixture
def app():
    return console()


@pytest.fixture
def shop():
    AppRegistry().add("shop")
    registry = EndpointRegistry()
    for number in range(1, 4):
        registry.add(f"shop-{number}", f"http://127.0.0.1:9/hook/{number}", app="shop",
                     rate="10/s")
    queue = DeadLetterQueue()
    for number in range(3):
        queue.add(DeadLetter(endpoint_id="shop-1", event_id=f"evt-{number}",
                             event_type="order.created", payload={"n": number},
                             reason="rejected", last_status=400, attempts=1))
    return registry


def test_every_page_renders(app, shop):
    browser = Browser(app)
    for path in PAGES:
        answer = browser.get(path)
        assert answer.status_code == 200, (path, answer.get_data(as_text=True)[:2000])
        assert answer.mimetype == "text/html", path


def test_an_endpoint_page_says_whether_the_trace_context_goes_to_its_receiver(app, shop):
    shop.update("shop-2", trace_context=True)
    browser = Browser(app)
    sent = browser.get("/endpoints/shop-2").get_data(as_text=True)
    assert re.search(r'id="trace-context">sent to the receiver', sent)
    unsent = browser.get("/endpoints/shop-1").get_data(as_text=True)
    assert re.search(r'id="trace-context"><span class="muted">not sent', unsent)


def test_endpoints_come_a_page_at_a_time(app, shop):
    browser = Browser(app)
    seen: list[str] = []
    path = "/endpoints?limit=2"
    while path:
        page = browser.get(path).get_data(as_text=True)
        seen += re.findall(r'<tr data-endpoint-id="([^"]+)"', page)
        following = re.search(r'id="next-page"[^>]*href="([^"]+)"', page)
        path = following[1].replace("&amp;", "&") if following else ""
    assert sorted(seen) == ["shop-1", "shop-2", "shop-3"]


def test_applications_come_a_page_at_a_time(app, quiet_redis):
    names = [f"app-{number:02d}" for number in range(7)]
    for name in names:
        AppRegistry().add(name)
    EndpointRegistry().add("app-03-hook", "http://127.0.0.1:9/hook", app="app-03")
    browser = Browser(app)
    seen: list[str] = []
    path = "/apps?limit=3"
    while path:
        page = browser.get(path).get_data(as_text=True)
        rows = re.findall(r'<tr data-app-id="([^"]+)"', page)
        assert len(rows) <= 3
        seen += rows
        following = re.search(r'id="next-page"[^>]*href="([^"]+)"', page)
        path = following[1].replace("&amp;", "&") if following else ""
    assert seen == names
    assert 'id="first-page"' in page and '<td class="number">1</td>' not in page
    assert '<td class="number">1</td>' in browser.get("/apps?limit=3&cursor=3").get_data(
        as_text=True)  # app-03's endpoint, counted on its page


def test_pause_resume_disable_enable_and_reset_are_done_and_audited(app, shop):
    browser = Browser(app)
    for action, check in (("pause", lambda e: e.paused_at is not None),
                          ("resume", lambda e: e.paused_at is None),
                          ("disable", lambda e: not e.enabled),
                          ("enable", lambda e: e.enabled),
                          ("reset-breaker", lambda e: True)):
        answer = browser.post(f"/endpoints/shop-2/{action}", token_from="/endpoints/shop-2")
        assert answer.status_code == 303, action
        assert check(EndpointRegistry().get("shop-2")), action
        shown = browser.get(answer.headers["Location"]).get_data(as_text=True)
        assert 'id="notice"' in shown
    entries = audit.recent(Actor("test", "t")).items
    assert {entry.actor for entry in entries} == {"alice"}
    assert all(entry.session.startswith("basic-") for entry in entries)
    assert len(entries) == 5
    log = browser.get("/audit").get_data(as_text=True)
    assert log.count('data-audit-id="') == 5


def test_a_rotated_secret_is_shown_once(app, shop):
    browser = Browser(app)
    answer = browser.post("/endpoints/shop-3/rotate-secret", token_from="/endpoints/shop-3")
    assert answer.status_code == 200
    secret = re.search(r'id="new-secret">([^<]+)<', answer.get_data(as_text=True))[1]
    assert EndpointRegistry().get("shop-3").secrets[0] == secret
    for path in ("/endpoints/shop-3", "/endpoints", "/audit"):
        assert secret not in browser.get(path).get_data(as_text=True), path


def test_switching_to_ed25519_shows_the_public_key_and_keeps_the_old_secret_signing(app, shop):
    browser = Browser(app)
    old = EndpointRegistry().require("shop-3").secrets[0]
    answer = browser.post("/endpoints/shop-3/rotate-secret", {"signature": "ed25519"},
                          token_from="/endpoints/shop-3").get_data(as_text=True)
    public_key = re.search(r'id="new-public-key">([^<]+)<', answer)[1]
    assert public_key.startswith("whpk_") and 'id="new-secret"' not in answer
    endpoint = EndpointRegistry().require("shop-3")
    assert endpoint.secrets[0].startswith("whsk_") and endpoint.secrets[1] == old
    page = browser.get("/endpoints/shop-3").get_data(as_text=True)
    assert public_key in page and 'data-kind="ed25519"' in page and 'data-kind="hmac"' in page
    assert endpoint.secrets[0] not in page and old not in page
    refused = browser.post("/endpoints/shop-3/rotate-secret", {"signature": "rsa"},
                           token_from="/endpoints/shop-3")
    assert refused.status_code == 400 and "signature &#39;rsa&#39; must be one of" in \
        refused.get_data(as_text=True)


def test_dead_letter_filters_are_bookmarkable_and_replay_keeps_them(app, shop):
    browser = Browser(app)
    page = browser.get("/dead-letters?endpoint=shop-1&since=1h").get_data(as_text=True)
    bookmark = re.search(r'id="bookmark" href="([^"]+)"', page)[1].replace("&amp;", "&")
    assert "endpoint=shop-1" in bookmark and "since=20" in bookmark  # an ISO time, kept
    assert browser.get(bookmark).get_data(as_text=True).count('data-entry-id="') == 3
    answer = browser.post("/dead-letters/replay", {"entry_id": "shop-1/evt-1",
                                                   "endpoint": "shop-1"},
                          token_from="/dead-letters")
    assert answer.status_code == 303
    assert "endpoint=shop-1" in answer.headers["Location"]
    assert DeadLetterQueue().get("shop-1/evt-1") is None


def test_bulk_replay_counts_first_then_runs_as_a_job(app, quiet_redis):
    AppRegistry().add("shop")
    EndpointRegistry().add("shop-1", "http://127.0.0.1:9/hook/1", app="shop")
    for number in range(4):
        DeadLetterQueue().add(DeadLetter(endpoint_id="shop-1", event_id=f"bulk-{number}",
                                         event_type="t", payload={}, reason="rejected"))
    browser = Browser(app)
    dry_run = browser.get("/dead-letters/bulk-replay?endpoint=shop-1").get_data(as_text=True)
    assert 'data-count="4"' in dry_run
    assert browser.post("/dead-letters/bulk-replay", {},
                        token_from="/dead-letters").status_code == 400  # every one: say so
    started = browser.post("/dead-letters/bulk-replay", {"endpoint": "shop-1"},
                           token_from="/dead-letters/bulk-replay?endpoint=shop-1")
    assert started.status_code == 303
    job_page = browser.get(started.headers["Location"]).get_data(as_text=True)
    assert 'data-total="4"' in job_page and 'data-state="running"' in job_page
    job_id = re.search(r'data-job-id="([0-9a-f]+)"', job_page)[1]
    progress = browser.get(f"/dead-letters/jobs/{job_id}/progress").get_data(as_text=True)
    assert progress.lstrip().startswith('<section id="bulk-job"') and "data-refresh=" in progress
    cancelled = browser.post(f"/dead-letters/jobs/{job_id}/cancel",
                             token_from=f"/dead-letters/jobs/{job_id}")
    assert cancelled.status_code == 303
    after = browser.get(cancelled.headers["Location"]).get_data(as_text=True)
    assert 'data-state="cancelled"' in after and "data-refresh=" not in after


def test_a_receivers_html_body_is_shown_escaped_with_its_attempt(app, worker, receiver):
    endpoint = EndpointRegistry().add(
        "xss-body", receiver.route("/xss", always(Reply(400, body=XSS.encode()))))
    event_id = send_webhook(endpoint.id, "order.created", {"n": 1})
    wait_until(lambda: DeadLetterQueue().get(f"{endpoint.id}/{event_id}") is not None,
               timeout=20)
    page = Browser(app).get(f"/events?event_id={event_id}&endpoint={endpoint.id}")
    text = page.get_data(as_text=True)
    assert 'data-state="dead_lettered"' in text and 'data-status="400"' in text
    assert XSS not in text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in text


def test_the_stats_chart_draws_the_workers_minute_counts(app, redis_client):
    minute = int(time.time() // 60)
    redis_client.hset(keys.stats_key(minute - 1), mapping={"delivered": 40, "dead_lettered": 3})
    redis_client.hset(keys.stats_key(minute), mapping={"delivered": 7})
    page = Browser(app).get("/stats").get_data(as_text=True)
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="stats-chart"' in page
    assert 'data-series="delivered"' in page and 'data-series="dead_lettered"' in page
    assert f'data-minute="{(minute - 1) * 60}"' in page


def test_mounted_under_a_prefix_every_link_carries_it(shop):
    def authorizer(request):
        return Actor("django:bob", "django-session")

    app = make_app(authorizer, csrf=SignedTokens(), mount_prefix="/ops/hookline")
    client = Client(app)
    page = client.get("/ops/hookline/endpoints").get_data(as_text=True)
    links = re.findall(r'(?:href|action|src)="(/[^"]*)"', page)
    assert links and all(link.startswith("/ops/hookline/") for link in links), links
    assert client.get("/ops/hookline/static/console.css").status_code == 200


def test_a_bulk_replay_job_waiting_in_the_schedule_is_shown_as_that_job(app, quiet_redis,
                                                                        monkeypatch):
    """Its next run is parked under a stand-in endpoint: the schedule page counts it under
    no endpoint and lists it as the job, linking to the job's page."""
    monkeypatch.setattr(hookline.service.replay_jobs, "enqueue_replay_job", lambda job: None)
    EndpointRegistry().add("shop-1", "http://127.0.0.1:9/hook/1")
    for number in range(12):
        DeadLetterQueue().add(DeadLetter(endpoint_id="shop-1", event_id=f"wait-{number}",
                                         event_type="t", payload={}, reason="rejected"))
    job_id = replay_jobs.start_bulk_replay(Actor("alice", "s"),
                                           DeadLetterQuery(endpoint="shop-1"), rate="1/s")
    assert JobRunner(job_id, sleep=lambda seconds: None).run() == "waiting"
    parked = len(list(RetrySchedule().scheduled("shop-1")))  # the batch handed over
    assert parked > 0
    page = Browser(app).get("/schedule").get_data(as_text=True)
    assert CONTINUATIONS not in page
    assert f'id="scheduled-total">{parked}<' in page
    assert re.findall(r'<tr data-endpoint-id="([^"]+)"', page) == ["shop-1"]
    waiting = re.search(r'<ul id="waiting-jobs">.*?</ul>', page, re.S)[0]
    assert f'href="/dead-letters/jobs/{job_id}"' in waiting and "next run at" in waiting
    soonest = re.findall(r'<tr data-retry-id="([^"]+)"', page)
    assert len(soonest) == parked and all(ident.startswith("shop-1/") for ident in soonest)


def test_the_audit_log_shows_a_jobs_filters_as_typed(app, shop, monkeypatch):
    monkeypatch.setattr(hookline.service.replay_jobs, "enqueue_replay_job", lambda job: None)
    query = DeadLetterQuery.from_params({"endpoint": "shop-1", "since": "1h"})
    replay_jobs.start_bulk_replay(Actor("alice", "s"), query, rate="1/s")
    [entry] = audit.recent(Actor("test", "t")).items
    since = query.to_params()["since"]
    assert entry.detail == f"3 dead letter(s) matching endpoint=shop-1, since={since}, rate=1/s"
    page = Browser(app).get("/audit").get_data(as_text=True)
    assert f"endpoint=shop-1, since={since}, rate=1/s</td>" in page and "%2F" not in page
