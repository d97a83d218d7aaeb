"""Releasing to a broker apart from Hookline's Redis (release.lua 'claim', then confirm.lua):
a retry parked again while its released copy was being published stays scheduled, and a
publisher that fails part-way confirms only what it published."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hookline.store.keys import breaker_key
from hookline.store.schedule import DUE_KEY, RELEASING_KEY, RetrySchedule
from hookline.transport.rabbitmq import BrokerUnavailable
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


def redis_ms(client) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_held_endpoints_claimed_retries_stay_in_the_schedule_until_the_hold_ends(client):
    schedule = RetrySchedule(client)
    for n in range(4):
        park(schedule, n)
    schedule.park(endpoint_id="free", event_id="x", countdown=0, message='{"n": "x"}')
    client.hset(breaker_key("ep"), mapping={"state": "open",
                                            "open_until": redis_ms(client) + 60_000})
    broker = Publisher()
    schedule.release_due(queue="q", broker=broker)
    assert broker.published == ['{"n": "x"}']  # only the endpoint that is not held
    assert client.zcard(RELEASING_KEY) == 0
    due = [score for _, score in client.zrange(DUE_KEY, 0, -1, withscores=True)]
    assert len(due) == 4 and min(due) >= redis_ms(client) + 59_000  # due when it may take them
    assert schedule.stats().by_endpoint == {"ep": 4}


def test_when_a_breakers_cool_down_ends_one_retry_goes_out_as_the_probe(client):
    schedule = RetrySchedule(client)
    for n in range(5):
        park(schedule, n)
    client.hset(breaker_key("ep"), mapping={"state": "open",
                                            "open_until": redis_ms(client) - 1})
    broker = Publisher()
    schedule.release_due(queue="q", broker=broker)
    assert len(broker.published) == 1
    assert schedule.stats().by_endpoint == {"ep": 4}  # waiting for the probe's outcome
    assert client.zcard(DUE_KEY) == 4
