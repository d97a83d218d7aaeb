"""Endpoint health end to end: a real worker delivers to a real receiver that answers some
events 500 first and 200 on the retry; the health the worker wrote to Redis (attempts per
minute, the latest attempts) and the console's and the portal's endpoint page agree with what
the receiver saw: counts, statuses, event ids; the receiver's echo of the URL's secret path
is redacted everywhere."""

from __future__ import annotations

import re
import time
from collections import Counter

from examples.receiver import Reply, fail_first
from hookline.service import portal
from hookline.service.actor import Actor
from hookline.service.endpoint_health import last_hour
from hookline.store import connection as store
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from hookline.store.health import HealthReader
from tests.conftest import wait_until
from tests.support.console import Browser, console
from tests.support.endpoints import wait_delivered
from tests.support.queue import enqueue

#: A path segment a receiver's URL carries as a credential (redacted as ``***``).
SECRET_SEGMENT = "tok_9f8e7d6c5b4a3210"
KEY = "k" * 40


def test_health_on_redis_and_on_the_pages_matches_what_the_receiver_saw(
        receiver, start_worker, monkeypatch):
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", "http://localhost")
    client = store.client()
    AppRegistry().add("shop")
    path = f"/in/{SECRET_SEGMENT}"
    failure = Reply(500, body=f"no route for {path}; try again".encode())
    endpoint = EndpointRegistry().add("ep-health", receiver.route(
        path, fail_first(1, failure, then=Reply(200, body=b"ok"))),
                                      app="shop")
    start_worker("health", extra_env={"HOOKLINE_HEALTH_INTERVAL": "0.3",
                                      "HOOKLINE_BREAKER_THRESHOLD": "1000"})
    event_ids = [f"h-{n:05d}" for n in range(12)]
    for event_id in event_ids[::3]:  # 4 of the 12 answered 200 at once
        receiver.answer_event(event_id, Reply(200, body=b"ok"))
    assert enqueue(client, endpoint.id, 12, prefix="h") == event_ids
    for event_id in event_ids:
        wait_delivered(endpoint.id, event_id, timeout=30)
    seen = receiver.requests_to(path)
    statuses = Counter(request.status for request in seen)
    assert statuses == {200: 12, 500: 8}

    reader = HealthReader(client)
    now_minute = int(time.time() // 60)

    def written() -> tuple[int, int]:
        minutes = reader.minutes(endpoint.id, now_minute - 5, now_minute + 1)
        return (sum(m.delivered for m in minutes), sum(m.failed for m in minutes))

    wait_until(lambda: written() == (12, 8), timeout=30, what=written)
    attempts = reader.attempts(endpoint.id)
    assert Counter(a.status for a in attempts) == statuses
    assert Counter(a.event_id for a in attempts) == Counter(r.webhook_id for r in seen)
    assert {a.attempt for a in attempts if a.status == 500} == {1}
    assert all(SECRET_SEGMENT not in a.response for a in attempts)
    assert {a.response for a in attempts if a.status == 500} == {
        "no route for /in/***; try again"}
    assert [a.at for a in attempts] == sorted((a.at for a in attempts), reverse=True)
    assert last_hour(Actor(name="alice", session="s")) is not None

    operator = Browser(console()).get(f"/endpoints/{endpoint.id}")
    assert operator.status_code == 200
    for page in (operator.get_data(as_text=True), _portal_page(endpoint.id)):
        assert 'data-delivered="12" data-failed="8"' in page
        rows = re.findall(r'<tr data-event-id="([^"]+)" data-status="(\d+)"', page)
        assert Counter(status for _, status in rows) == {"200": 12, "500": 8}
        assert {event_id for event_id, _ in rows} == set(event_ids)
        assert 'id="health-rate-chart"' in page and 'id="health-latency-chart"' in page
        assert SECRET_SEGMENT not in page
        assert "no route for /in/***; try again" in page
        assert 'id="endpoint-status"' in page and "last delivered" in page


def _portal_page(endpoint_id: str) -> str:
    from urllib.parse import urlsplit

    from werkzeug.test import Client

    from hookline.console.portal import portal_app

    browser = Client(portal_app({"HOOKLINE_CONSOLE_SECRET_KEY": KEY}))
    url = urlsplit(portal.portal_link("shop"))
    browser.get(f"{url.path}?{url.query}")
    answer = browser.get(f"/endpoints/{endpoint_id}")
    assert answer.status_code == 200
    return answer.get_data(as_text=True)
