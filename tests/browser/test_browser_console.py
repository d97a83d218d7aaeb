"""The console in a real Chromium: signing in, acting on an endpoint and a dead letter, and the
server refusing what a page does not offer (a POST without its CSRF token, a read-only user's
forged POST)."""

from __future__ import annotations

import time
from typing import Any

import redis

from examples.receiver import Receiver, Reply, always
from tests.conftest import wait_until
from tests.support.browser import (
    ADMIN,
    VIEWER,
    Browser,
    ConsoleServer,
    console_path,
    forge_post,
    unique,
)


def new_endpoint(receiver: Receiver, **options: Any) -> str:
    """An endpoint on a receiver route answering 204, in the console's Redis; its id."""
    from hookline.store.endpoints import EndpointRegistry

    endpoint_id = unique("ep")
    EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", always(Reply(204))),
                           **options)
    return endpoint_id


def paused(endpoint_id: str) -> bool:
    from hookline.store.endpoints import EndpointRegistry

    return bool(EndpointRegistry().require(endpoint_id).paused)


def test_sign_in_answers_401_without_credentials_and_the_pages_with_them(
        browser: Browser, console_server: ConsoleServer) -> None:
    browser.sign_in(None).open("/")
    assert browser.status() == 401
    assert not browser.css("#signed-in")

    wrong = (ADMIN[0], ADMIN[1] + "x")
    browser.sign_in(wrong).open("/")
    assert browser.status() == 401

    browser.sign_in(ADMIN).open("/")
    assert browser.status() == 200
    assert browser.by_id("signed-in").text == ADMIN[0]
    assert browser.css("#console-nav a")

    # Credentials in the URL, as an operator may bookmark it: Chromium sends them as basic auth.
    browser.sign_in(None)
    host = console_server.url.removeprefix("http://")
    browser.driver.get("about:blank")
    browser.driver.get(f"http://{VIEWER[0]}:{VIEWER[1]}@{host}/endpoints")
    assert browser.status() == 200
    assert browser.by_id("read-only").text == "read-only"


def test_the_console_script_loads_under_its_own_content_security_policy(
        browser: Browser) -> None:
    browser.open("/endpoints")
    browser.driver.get_log("browser")  # only this page's messages from here
    browser.open("/endpoints")
    assert browser.js("return document.scripts.length") >= 1
    assert not [message for message in browser.console_errors()
                if "Content Security Policy" in message or "console.js" in message]


def test_pause_and_resume_from_the_endpoint_page_are_done_and_audited(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    endpoint_id = new_endpoint(receiver)
    browser.open(f"/endpoints/{endpoint_id}")
    health = browser.by_id("endpoint-health")
    assert health.get_attribute("data-paused") == "false"

    browser.click("form[data-action='pause'] button")
    browser.wait(lambda page: "paused" in page.by_id("notice").text)
    browser.wait(lambda page: page.by_id("endpoint-health").get_attribute("data-paused")
                 == "true")
    assert paused(endpoint_id)

    browser.click("form[data-action='resume'] button")
    browser.wait(lambda page: page.by_id("endpoint-health").get_attribute("data-paused")
                 == "false")
    assert not paused(endpoint_id)

    browser.open(console_path("overview.audit_log"))
    rows = browser.css(f"#audit-log tr[data-actor='{ADMIN[0]}']")
    assert [row for row in rows if endpoint_id in row.text and "pause" in
            (row.get_attribute("data-action") or "")]


def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    endpoint_id = new_endpoint(receiver)
    browser.open(f"/endpoints/{endpoint_id}")
    forge_post(browser, f"/endpoints/{endpoint_id}/pause", {})
    assert browser.status() == 403
    assert "CSRF" in browser.text
    assert not paused(endpoint_id)

    browser.open(f"/endpoints/{endpoint_id}")
    forge_post(browser, f"/endpoints/{endpoint_id}/pause", {"csrf_token": "0" * 64})
    assert browser.status() == 403
    assert not paused(endpoint_id)


def test_a_read_only_user_sees_no_effect_of_a_forged_post(
        chromium: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    """The viewer's buttons are disabled, but the refusal is the server's: a POST carrying the
    viewer's own valid CSRF token is still refused, and nothing changes."""
    endpoint_id = new_endpoint(receiver)
    browser = chromium.sign_in(VIEWER).open(f"/endpoints/{endpoint_id}")
    try:
        assert all(button.get_attribute("disabled") is not None
                   for button in browser.css("#endpoint-actions button"))
        token = browser.csrf()
        assert all(token.values())
        for action in ("pause", "disable"):
            browser.open(f"/endpoints/{endpoint_id}")
            forge_post(browser, f"/endpoints/{endpoint_id}/{action}", token)
            assert browser.status() == 403
            assert "read-only" in browser.text
        from hookline.store.endpoints import EndpointRegistry

        endpoint = EndpointRegistry().require(endpoint_id)
        assert not endpoint.paused and endpoint.enabled
        browser.open(console_path("overview.audit_log"))
        assert endpoint_id not in browser.text
    finally:
        chromium.sign_in(ADMIN)


def test_replay_of_a_dead_letter_delivers_it_again_with_its_webhook_id(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue

    endpoint_id = new_endpoint(receiver)
    event_id = unique("evt")
    DeadLetterQueue().add(DeadLetter(
        endpoint_id=endpoint_id, event_id=event_id, event_type="order.paid",
        payload={"order": 7}, reason="exhausted", attempts=4, last_status=503,
        last_error="503 Service Unavailable", enqueued_at=time.time() - 60))

    browser.open(console_path("dead_letters.letter_list", {"endpoint": endpoint_id}))
    rows = browser.css("#dead-letter-list [data-entry-id]")
    assert [row.get_attribute("data-entry-id") for row in rows] == [f"{endpoint_id}/{event_id}"]
    browser.js("window.confirm = () => true;")
    browser.click("form[data-action='replay-dead-letter'] button")
    browser.wait(lambda page: page.css("#notice"))

    assert receiver.wait_for(lambda received: any(
        request.path == f"/{endpoint_id}" for request in received), timeout=20)
    [request] = receiver.requests_to(f"/{endpoint_id}")
    assert request.webhook_id == event_id
    assert request.json()["data"] == {"order": 7}
    wait_until(lambda: DeadLetterQueue().get(f"{endpoint_id}/{event_id}") is None, timeout=10)


#: Dead letters the bulk replay test replays, and the endpoint's rate limit: about 5 s of
#: replay, long enough for the page to show progress between start and end.
BULK = 500
BULK_RATE, BULK_PER_SECOND = "100/s", 100


def busiest_second(times: list[float]) -> int:
    """The most arrivals within any one second."""
    times = sorted(times)
    start, most = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_bulk_replay_of_500_keeps_the_rate_limit_shows_progress_and_delivers_each_once(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
    from hookline.store.endpoints import EndpointRegistry

    endpoint_id = new_endpoint(receiver, rate=BULK_RATE)
    burst = EndpointRegistry().require(endpoint_id).effective_burst()
    event_ids = [f"{unique('bulk')}-{n}" for n in range(BULK)]
    queue = DeadLetterQueue()
    for n, event_id in enumerate(event_ids):
        queue.add(DeadLetter(endpoint_id=endpoint_id, event_id=event_id,
                             event_type="order.paid", payload={"n": n}, reason="exhausted",
                             attempts=4, enqueued_at=time.time() - 60))

    browser.open(console_path("dead_letters.bulk_confirm", {"endpoint": endpoint_id}))
    assert browser.by_id("bulk-count").text == str(BULK)  # the dry run: affects N
    browser.js("window.confirm = () => true;")
    browser.click("form[data-action='start-bulk-replay'] button")
    browser.wait(lambda page: page.by_id("bulk-job").get_attribute("data-total") == str(BULK))
    browser.js("window.__same_page = 1;")  # gone if the page reloaded instead of refreshing

    seen: list[int] = []

    def all_delivered(page: Browser) -> bool:
        job = page.by_id("bulk-job")
        seen.append(int(job.get_attribute("data-delivered")))
        return job.get_attribute("data-state") == "done" and seen[-1] == BULK

    browser.wait(all_delivered, timeout=60)
    assert browser.js("return window.__same_page;") == 1
    assert browser.by_id("job-replayed").text == str(BULK)
    assert browser.by_id("job-delivered").text == str(BULK)
    shown = sorted(set(seen))
    assert len(shown) >= 3, f"the page showed no progress between start and end: {shown}"

    assert receiver.wait_for(lambda received: len(
        [r for r in received if r.path == f"/{endpoint_id}"]) >= BULK, timeout=60)
    wait_until(lambda: all(queue.get(f"{endpoint_id}/{event_id}") is None
                           for event_id in event_ids), timeout=10)  # replayed, not kept
    requests = receiver.requests_to(f"/{endpoint_id}")
    assert sorted(request.webhook_id for request in requests) == sorted(event_ids)  # each once
    times = [request.at for request in requests]
    most = busiest_second(times)
    print(f"\n{BULK} replayed in {max(times) - min(times):.1f} s, at most {most} in one second "
          f"(limit {BULK_RATE}, burst {burst})")
    # The receiver stamps arrivals, not the limiter's grants: a send's transit time varies by a few
    # ms under load, so one second of arrivals can hold the grants of up to 1.05 s.
    assert most <= BULK_PER_SECOND * 1.05 + burst
    assert max(times) - min(times) >= (BULK - burst) / BULK_PER_SECOND - 0.5
