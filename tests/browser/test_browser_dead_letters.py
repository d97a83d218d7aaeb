"""The dead-letter list in a real Chromium, with a real worker and receiver where a delivery
matters: a dead letter's last error shows the receiver's status and answer (in the console and
in the portal), rows ticked are deleted and exactly they, the purge deletes exactly the
filtered set it counted, and a replay to a disabled endpoint is confirmed first with what
becomes of it (it is dead-lettered again, as the warning says)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from examples.receiver import Receiver, Reply, always
from tests.browser.test_browser_console import new_endpoint
from tests.browser.test_browser_portal import enter, portal
from tests.conftest import wait_until
from tests.support.browser import Browser, console_path, unique

#: The receiver's answer to every event in the last-error tests.
ANSWER = '{"error": "signature mismatch", "hint": "check the secret"}'


def dead_letters(endpoint_id: str, count: int, *, reason: str = "exhausted",
                 status: int = 503, ago: float = 60.0) -> list[str]:
    """``count`` dead letters at ``endpoint_id``, a second apart from ``ago`` seconds ago,
    oldest first; their ids."""
    from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue

    queue, now, found = DeadLetterQueue(), time.time(), []
    for n in range(count):
        entry = DeadLetter(endpoint_id=endpoint_id, event_id=f"{unique('evt')}-{n}",
                           event_type="order.paid", payload={"n": n}, reason=reason,
                           attempts=3, last_status=status, dead_lettered_at=now - ago + n)
        queue.add(entry)
        found.append(entry.id)
    return found


def remaining(endpoint_id: str) -> list[str]:
    from hookline.store.dead_letter_queue import DeadLetterFilter, DeadLetterQueue

    return [entry.id for entry in DeadLetterQueue().find(DeadLetterFilter(endpoint_id=endpoint_id))]


def rows(browser: Browser) -> list[str]:
    return [row.get_attribute("data-entry-id")
            for row in browser.css("#dead-letter-list tr[data-entry-id]")]


def tick(browser: Browser, entry_id: str) -> None:
    browser.click(f"#dead-letter-list tr[data-entry-id='{entry_id}'] input[type=checkbox]")


def rejected_by_the_receiver(receiver: Receiver, **options: Any) -> tuple[str, str]:
    """An endpoint whose receiver answers 400 with :data:`ANSWER`, and an event sent to it
    by the worker, dead-lettered; the endpoint and the entry ids."""
    import hookline
    from hookline.store.dead_letter_queue import DeadLetterQueue
    from hookline.store.endpoints import EndpointRegistry

    endpoint_id = unique("ep")
    EndpointRegistry().add(endpoint_id, receiver.route(
        f"/{endpoint_id}", always(Reply(400, headers={"Content-Type": "application/json"},
                                        body=ANSWER.encode()))), **options)
    event_id = unique("evt")
    hookline.send_webhook(endpoint_id, "order.paid", {"order": 1}, event_id=event_id)
    entry_id = f"{endpoint_id}/{event_id}"
    wait_until(lambda: DeadLetterQueue().get(entry_id), timeout=30)
    return endpoint_id, entry_id


def last_error(browser: Browser, entry_id: str) -> Any:
    return browser.css(f"#dead-letter-list tr[data-entry-id='{entry_id}'] td.last-error")[0]


def test_a_dead_letters_last_error_shows_the_receivers_status_and_answer(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    endpoint_id, entry_id = rejected_by_the_receiver(receiver)
    older = dead_letters(endpoint_id, 1)  # before it: the list is newest first

    browser.open(console_path("dead_letters.letter_list", {"endpoint": endpoint_id}))
    assert rows(browser) == [entry_id, *older]
    cell = last_error(browser, entry_id)
    assert cell.get_attribute("data-status") == "400"
    assert "HTTP 400" in cell.text and ANSWER in cell.text
    assert browser.css(f"tr[data-entry-id='{entry_id}'] td[title]")[0].text == "rejected"


def test_a_tenant_sees_the_same_last_error_in_the_portal(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any, portal_link: Callable[..., str]) -> None:
    from hookline.store.apps import AppRegistry

    app_id = unique("app")
    AppRegistry().add(app_id)
    _, entry_id = rejected_by_the_receiver(receiver, app=app_id)
    enter(tenant, portal_link(app_id))
    tenant.open(portal("/dead-letters"))
    assert rows(tenant) == [entry_id]
    cell = last_error(tenant, entry_id)
    assert "HTTP 400" in cell.text and ANSWER in cell.text


def test_the_rows_ticked_are_deleted_and_exactly_they(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    endpoint_id = new_endpoint(receiver)
    letters = dead_letters(endpoint_id, 5)
    browser.open(console_path("dead_letters.letter_list", {"endpoint": endpoint_id}))
    assert rows(browser) == letters[::-1]

    browser.click("#select-all")  # console.js: every row of the page, then none
    boxes = browser.css("#dead-letter-list input[type=checkbox][name=entry_id]")
    assert len(boxes) == 5 and all(box.is_selected() for box in boxes)
    browser.click("#select-all")
    assert not any(box.is_selected() for box in browser.css(
        "#dead-letter-list input[type=checkbox][name=entry_id]"))
    chosen = [letters[1], letters[3]]
    for entry_id in chosen:
        tick(browser, entry_id)
    browser.click("#delete-selected")
    browser.wait(lambda page: page.css("#selection-confirm"))
    confirm = browser.by_id("selection-confirm")
    assert confirm.get_attribute("data-action") == "delete"
    assert sorted(row.get_attribute("data-entry-id")
                  for row in browser.css("#selected-letters tr[data-entry-id]")) == sorted(chosen)
    assert remaining(endpoint_id) == letters  # nothing deleted before the confirmation

    browser.click("#confirm-selection")
    browser.wait(lambda page: page.css("#letters-done"))
    done = browser.by_id("letters-done")
    assert (done.get_attribute("data-done"), done.get_attribute("data-count")) == ("deleted", "2")
    kept = [entry_id for entry_id in letters if entry_id not in chosen]
    assert rows(browser) == kept[::-1]  # back on the same filtered list
    assert remaining(endpoint_id) == kept


def test_the_purge_deletes_exactly_the_filtered_set_it_counted(
        browser: Browser, console_state: redis.Redis, receiver: Receiver) -> None:
    endpoint_id, other = new_endpoint(receiver), new_endpoint(receiver)
    rejected = dead_letters(endpoint_id, 4, reason="rejected", status=400)
    exhausted = dead_letters(endpoint_id, 3)
    elsewhere = dead_letters(other, 2, reason="rejected", status=400)

    browser.open(console_path("dead_letters.letter_list"))
    browser.by_id("dlq-filters").find_element("name", "endpoint").send_keys(endpoint_id)
    browser.by_id("dlq-filters").find_element(
        "css selector", "select[name=reason] option[value=rejected]").click()
    browser.click("#dlq-filters button[type=submit]")
    browser.wait(lambda page: sorted(rows(page)) == sorted(rejected))
    browser.click("#purge-link")
    browser.wait(lambda page: page.css("#purge-confirm"))
    assert browser.by_id("purge-count").text == "4"  # the dry run
    assert sorted(remaining(endpoint_id)) == sorted(rejected + exhausted)
    late = dead_letters(endpoint_id, 1, reason="rejected", ago=0)  # after the count: stays

    browser.click("#confirm-purge")
    browser.wait(lambda page: page.css("#letters-done"))
    assert browser.by_id("letters-done").get_attribute("data-count") == "4"
    assert sorted(remaining(endpoint_id)) == sorted(exhausted + late)
    assert remaining(other) == elsewhere
    browser.open(console_path("overview.audit_log"))
    entry = next(row for row in browser.css("#audit-log tr")
                 if "dead_letter.purge" in (row.get_attribute("data-action") or "")
                 and endpoint_id in row.text)
    assert "4 dead letter(s)" in entry.text and "reason=rejected" in entry.text


def test_a_replay_to_a_disabled_endpoint_warns_first_and_is_dead_lettered_again(
        browser: Browser, console_state: redis.Redis, receiver: Receiver,
        console_worker: Any) -> None:
    from hookline.store.dead_letter_queue import DeadLetterQueue
    from hookline.store.endpoints import EndpointRegistry

    endpoint_id = new_endpoint(receiver)
    [entry_id] = dead_letters(endpoint_id, 1, status=503)
    EndpointRegistry().disable(endpoint_id, "receiver moving")

    browser.open(console_path("dead_letters.bulk_confirm", {"endpoint": endpoint_id}))
    warning = browser.by_id("replay-warning")
    assert endpoint_id in warning.text and "disabled" in warning.text
    assert "dead-lettered again at once" in warning.text

    browser.open(console_path("dead_letters.letter_list", {"endpoint": endpoint_id}))
    browser.js("window.confirm = () => true;")
    browser.click("form[data-action='replay-dead-letter'] button")
    browser.wait(lambda page: page.css("#replay-warning"))
    item = browser.css(f"#replay-warning li[data-endpoint-id='{endpoint_id}']")[0]
    assert item.get_attribute("data-state") == "disabled"
    assert "receiver moving" in item.text and "endpoint_disabled" in item.text
    before = DeadLetterQueue().get(entry_id)
    assert before is not None and before.last_status == 503  # nothing replayed yet

    browser.click("#confirm-selection")
    browser.wait(lambda page: page.css("#letters-done"))
    # What the warning said: the worker dead-letters it again at once, and nothing is sent.
    wait_until(lambda: (DeadLetterQueue().get(entry_id) or before).dead_lettered_at
               > before.dead_lettered_at, timeout=30)
    again = DeadLetterQueue().get(entry_id)
    assert again is not None and again.reason == "endpoint_disabled"
    assert again.last_status is None
    assert receiver.requests_to(f"/{endpoint_id}") == []


def test_a_tenant_deletes_the_rows_it_ticks_then_purges_the_rest_of_its_own(
        tenant: Browser, console_state: redis.Redis, receiver: Receiver,
        portal_link: Callable[..., str]) -> None:
    from tests.browser.test_browser_portal import tenant_data

    a, b = tenant_data(receiver), tenant_data(receiver)
    letters = [a.letter_id, *dead_letters(a.endpoint_id, 3)]
    enter(tenant, portal_link(a.app_id))
    tenant.open(portal("/dead-letters"))
    assert sorted(rows(tenant)) == sorted(letters)
    chosen = letters[1:3]
    for entry_id in chosen:
        tick(tenant, entry_id)
    tenant.click("#delete-selected")
    tenant.wait(lambda page: page.css("#selection-confirm"))
    tenant.click("#confirm-selection")
    tenant.wait(lambda page: page.css("#letters-done"))
    assert tenant.by_id("letters-done").get_attribute("data-count") == "2"
    kept = [entry_id for entry_id in letters if entry_id not in chosen]
    assert sorted(rows(tenant)) == sorted(kept) == sorted(remaining(a.endpoint_id))

    tenant.click("#purge-link")  # no filter: every dead letter of its application
    tenant.wait(lambda page: page.css("#purge-confirm"))
    assert tenant.by_id("purge-count").text == "2"
    tenant.click("#confirm-purge")
    tenant.wait(lambda page: page.css("#letters-done"))
    assert remaining(a.endpoint_id) == [] and rows(tenant) == []
    assert remaining(b.endpoint_id) == [b.letter_id]  # another application's: untouched
