"""The event log's held rows with a real worker and a real receiver: a paused endpoint's
deliveries, parked by the broker's consume script before a worker takes them, are logged
held with their type; resumed, they are logged delivered. An endpoint whose breaker is open
holds its retries the same way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.core import config
from hookline.service import endpoint_actions
from hookline.service.actor import Actor
from hookline.store.endpoints import EndpointRegistry
from hookline.store.event_log_pages import EventLogPages, LogFilter
from tests.conftest import emptied, isolated_url, wait_until

#: A database of its own: only this test's worker sees it.
URL = isolated_url(2)
OPERATOR = Actor(name="alice", session="s-1")


@pytest.fixture
def private() -> Iterator[redis.Redis]:
    client = emptied(URL)
    config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL})
    yield client
    config.configure()
    emptied(URL).close()


def statuses(endpoint_id: str, event_ids: list[str]) -> list[str | None]:
    pages = EventLogPages()
    return [(row.status if (row := pages.get(endpoint_id, event_id)) else None)
            for event_id in event_ids]


def test_a_paused_endpoints_deliveries_are_logged_held_then_delivered(
        receiver, start_worker, private):
    start_worker("log-held", concurrency=2, extra_env={"REDIS_URL": URL})
    endpoint = EndpointRegistry().add("held-ep", receiver.route("/held", always(Reply(204))))
    endpoint_actions.pause(OPERATOR, endpoint.id)
    event_ids = [send_webhook(endpoint.id, "invoice.sent", {"n": n}, f"h-{n}")
                 for n in range(3)]
    wait_until(lambda: statuses(endpoint.id, event_ids) == ["held"] * 3, timeout=20,
               what=lambda: statuses(endpoint.id, event_ids))
    held = EventLogPages().page(LogFilter(status="held", type_prefix="invoice."), limit=10)
    assert sorted(row.event_id for row in held.rows) == event_ids
    assert all(row.attempts == 0 for row in held.rows)
    assert receiver.requests_to("/held") == []

    endpoint_actions.resume(OPERATOR, endpoint.id)
    wait_until(lambda: statuses(endpoint.id, event_ids) == ["delivered"] * 3, timeout=30,
               what=lambda: statuses(endpoint.id, event_ids))
    assert EventLogPages().page(LogFilter(status="held"), limit=10).rows == []
