"""Releasing to a broker apart from Hookline's Redis (release.lua 'claim', then confirm.lua):
a retry parked again while its released copy was being published stays scheduled, and a
publisher that fails part-way confirms only what it published."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hookline.delivery.rabbitmq import BrokerUnavailable
from hookline.store.schedule import DUE_KEY, RELEASING_KEY, RetrySchedule
from tests.conftest import flushed, isolated_url


@pytest.fixture
def client():
    """Database 11: parks and releases here race with no worker."""
    yield from flushed(isolated_url(11))


class Publisher:
    """A broker that publishes through a callback (as ``RabbitBroker.publish_released``)."""

    def __init__(self, on_publish: Any = None, fail_after: int | None = None) -> None:
        self.published: list[str] = []
        self.on_publish = on_publish
        self.fail_after = fail_after

    def publish_released(self, queue: str, messages: list[str]) -> int:
        for message in messages:
            if self.fail_after is not None and len(self.published) >= self.fail_after:
                raise BrokerUnavailable("broker went away", published=len(self.published))
            self.published.append(message)
            if self.on_publish:
                self.on_publish(message)
        return len(messages)


def park(schedule: RetrySchedule, n: int, countdown: float = 0) -> None:
    schedule.park(endpoint_id="ep", event_id=f"e{n}", countdown=countdown,
                  message=json.dumps({"n": n, "countdown": countdown}))


def test_a_retry_parked_again_before_the_confirm_stays_scheduled(client):
    schedule = RetrySchedule(client)
    park(schedule, 1)
    # The released copy runs at once and is deferred again before the releaser confirms.
    broker = Publisher(on_publish=lambda message: park(schedule, 1, countdown=60))
    released, _ = schedule.release_due(queue="q", broker=broker)
    assert released == 1 and len(broker.published) == 1
    assert client.zscore(DUE_KEY, "ep/e1") is not None  # due again, in about a minute
    assert client.zcard(RELEASING_KEY) == 0
    assert schedule.stats().by_endpoint == {"ep": 1}


def test_a_publisher_failing_part_way_confirms_only_what_it_published(client):
    schedule = RetrySchedule(client)
    for n in range(5):
        park(schedule, n)
    broker = Publisher(fail_after=2)
    with pytest.raises(BrokerUnavailable):
        schedule.release_due(queue="q", broker=broker)
    assert len(broker.published) == 2
    # The other three stay claimed (scheduled, not due, not lost) until the claim's lease ends.
    assert schedule.stats().by_endpoint == {"ep": 3}
    assert client.zcard(RELEASING_KEY) == 3
