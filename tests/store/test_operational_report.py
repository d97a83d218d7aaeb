"""Reporting operational events (hookline.delivery.reporting) on a real Redis with no worker
behind it: the operational webhook is an ordinary ``hookline.deliver`` message for the operator
endpoint with the occurrence's event id; the same occurrence is reported once; an occurrence
about the operator endpoint itself is never sent to it (no loop), though callbacks hear it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from hookline.core import config
from hookline.core.messages import DELIVERY_QUEUE
from hookline.core.operational_events import REGISTRY, OperationalEvent
from hookline.delivery import reporting


@pytest.fixture
def operator(quiet_redis) -> Iterator[list[OperationalEvent]]:
    """HOOKLINE_OPERATIONAL_ENDPOINT=ops on the quiet database; a callback recording events."""
    config.configure({"REDIS_URL": config.settings().redis_url,
                      "HOOKLINE_BROKER_URL": config.settings().redis_url,
                      "HOOKLINE_OPERATIONAL_ENDPOINT": "ops"})
    heard: list[OperationalEvent] = []
    REGISTRY.connect("*", heard.append)
    yield heard
    REGISTRY.disconnect("*", heard.append)


def queued(client) -> list[tuple[list, dict]]:
    found = []
    for message in client.lrange(DELIVERY_QUEUE, 0, -1):
        body = json.loads(message)
        args, kwargs, _ = json.loads(base64.b64decode(body["body"]))
        found.append((args, kwargs))
    return found


def test_an_occurrence_goes_out_once_as_a_delivery_to_the_operator_endpoint(operator,
                                                                            quiet_redis):
    event = reporting.endpoint_disabled("shop-1", reason="gone", detail="410", since=1.0,
                                          status=410)
    reporting.report(event)
    reporting.report(event)  # a second worker meeting the same 410
    [(args, kwargs)] = queued(quiet_redis)
    assert args == ["ops", "endpoint.disabled", {"endpoint_id": "shop-1", "reason": "gone",
                                                 "detail": "410", "status": 410}]
    assert kwargs["event_id"] == event.event_id
    assert [e.kind for e in operator] == ["endpoint_disabled"]


def test_occurrences_about_the_operator_endpoint_are_not_sent_to_it(operator, quiet_redis):
    for event in (reporting.breaker_changed("ops", opened=True, event_id="e", attempt=5),
                  reporting.dead_lettered("ops", "hookline-op-1", "endpoint.failing",
                                            "exhausted", attempts=4),
                  reporting.endpoint_disabled("ops", reason="gone", detail="410", since=2.0)):
        reporting.report(event)
    assert queued(quiet_redis) == []
    assert [e.kind for e in operator] == ["endpoint_failing", "dead_lettered",
                                          "endpoint_disabled"]


def test_nothing_is_written_when_nobody_listens(quiet_redis):
    config.configure({"REDIS_URL": config.settings().redis_url,
                      "HOOKLINE_BROKER_URL": config.settings().redis_url})
    reporting.report(reporting.dead_lettered("shop-1", "e", "t", "rejected", attempts=1))
    assert quiet_redis.keys("hookline:*") == []
