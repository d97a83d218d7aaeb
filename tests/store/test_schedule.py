"""The durable retry schedule against a real Redis, in a database of its own (no worker's
releaser runs there), and its message format read back by Celery."""

from __future__ import annotations

import json
import random
import threading

import pytest

from hookline.core.envelope import decode_message
from hookline.core.messages import TASK_NAME
from hookline.store import connection as store
from hookline.store.schedule import (
    DUE_KEY,
    WAKE_KEY,
    RetrySchedule,
    ScheduleFull,
)
from hookline.transport.envelope import build_message
from hookline.worker.celery import worker_app
from tests.conftest import emptied, flushed, isolated_url, wait_until

QUEUE = "test.retry"


@pytest.fixture
def client():
    """Database 13: parks and releases here race with no worker."""
    yield from flushed(isolated_url(13))


def message(n: int) -> str:
    return json.dumps({"n": n})


def redis_now(client) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def test_retries_are_released_earliest_due_first_whatever_the_parking_order(client):
    schedule = RetrySchedule(client)
    countdowns = [0.30, 0.05, 0.20, 0.10, 0.25, 0.15]
    for n, countdown in enumerate(countdowns):
        schedule.park(endpoint_id="ep", event_id=f"e{n}", countdown=countdown, message=message(n))
    wait_until(lambda: redis_now(client) * 1000 > client.zrange(DUE_KEY, -1, -1,
                                                                   withscores=True)[0][1])
    released, next_due = schedule.release_due(queue=QUEUE)
    assert (released, next_due) == (6, None)
    order = [json.loads(m)["n"] for m in reversed(client.lrange(QUEUE, 0, -1))]
    assert order == sorted(range(6), key=lambda n: countdowns[n])  # BRPOP takes the oldest


def test_nothing_is_released_before_it_is_due(client):
    schedule = RetrySchedule(client)
    schedule.park(endpoint_id="ep", event_id="later", countdown=30, message=message(1))
    released, next_due = schedule.release_due(queue=QUEUE)
    assert released == 0 and 29 < next_due <= 30
    assert client.llen(QUEUE) == 0


@pytest.mark.slow
def test_two_releasers_racing_release_each_retry_exactly_once(client):
    schedule = RetrySchedule(client)
    pipe_batch = 5000
    for n in range(pipe_batch):
        schedule.park(endpoint_id=f"ep{n % 7}", event_id=f"e{n}", countdown=0, message=message(n))
    counts: list[int] = []

    def release() -> None:
        mine = RetrySchedule(client)
        total = 0
        while True:
            released, _ = mine.release_due(batch=97, queue=QUEUE, queue_limit=10**9)
            if not released:
                break
            total += released
        counts.append(total)

    racers = [threading.Thread(target=release) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    pushed = [json.loads(m)["n"] for m in client.lrange(QUEUE, 0, -1)]
    assert sorted(pushed) == list(range(pipe_batch))  # each once, none lost
    assert sum(counts) == pipe_batch and all(counts), counts
    assert schedule.stats().total == 0 and schedule.stats().by_endpoint == {}


def test_the_retry_queue_limit_holds_due_retries_back(client):
    schedule = RetrySchedule(client)
    for n in range(10):
        schedule.park(endpoint_id="ep", event_id=f"e{n}", countdown=0, message=message(n))
    released, next_due = schedule.release_due(queue=QUEUE, queue_limit=4)
    assert (released, next_due, client.llen(QUEUE)) == (4, 0.0, 4)
    assert schedule.release_due(queue=QUEUE, queue_limit=4)[0] == 0
    client.rpop(QUEUE)
    assert schedule.release_due(queue=QUEUE, queue_limit=4)[0] == 1


def test_caps_in_all_and_per_endpoint(client):
    schedule = RetrySchedule(client, max_total=5, max_per_endpoint=3)
    for n in range(3):
        schedule.park(endpoint_id="a", event_id=f"e{n}", countdown=10, message=message(n))
    with pytest.raises(ScheduleFull) as per_endpoint:
        schedule.park(endpoint_id="a", event_id="e9", countdown=10, message=message(9))
    assert per_endpoint.value.which == "endpoint"
    schedule.park(endpoint_id="a", event_id="e0", countdown=5, message=message(0))  # replaces
    for n in range(2):
        schedule.park(endpoint_id="b", event_id=f"e{n}", countdown=10, message=message(n))
    with pytest.raises(ScheduleFull) as total:
        schedule.park(endpoint_id="c", event_id="e0", countdown=10, message=message(0))
    assert total.value.which == "total"
    assert schedule.stats().by_endpoint == {"a": 3, "b": 2}


def test_parking_a_sooner_retry_wakes_a_sleeping_releaser(client):
    schedule = RetrySchedule(client)
    schedule.park(endpoint_id="ep", event_id="far", countdown=60, message=message(1))
    client.delete(WAKE_KEY)  # that park woke the (absent) releasers already
    woke = threading.Event()

    def sleeper() -> None:
        RetrySchedule(client).wait_for_wake(20)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    schedule.park(endpoint_id="ep", event_id="later", countdown=90, message=message(2))
    assert not woke.wait(0.3)  # a later retry does not wake it
    schedule.park(endpoint_id="ep", event_id="soon", countdown=1, message=message(3))
    assert woke.wait(5)
    thread.join()


def test_stats_report_the_oldest_due_retry_and_the_lag(client):
    schedule = RetrySchedule(client)
    schedule.park(endpoint_id="a", event_id="e1", countdown=0, message=message(1))
    schedule.park(endpoint_id="b", event_id="e2", countdown=60, message=message(2))
    wait_until(lambda: schedule.stats().lag > 0.05)
    stats = schedule.stats()
    assert stats.total == 2 and stats.by_endpoint == {"a": 1, "b": 1}
    assert stats.oldest_due <= redis_now(client) - 0.05


def test_a_parked_message_is_the_task_celery_would_have_published(client):
    text = build_message(worker_app, task_name="hookline.deliver", task_id="task-1",
                         args=["shop", "order.created", {"order": 1}],
                         kwargs={"event_id": "evt-1", "attempts": 2}, retries=2,
                         queue="hookline.retry")
    envelope = json.loads(text)
    assert envelope["headers"]["task"] == "hookline.deliver"
    assert envelope["headers"]["id"] == "task-1" and envelope["headers"]["retries"] == 2
    assert envelope["properties"]["delivery_info"]["routing_key"] == "hookline.retry"
    assert decode_message(text) == (["shop", "order.created", {"order": 1}],
                                    {"event_id": "evt-1", "attempts": 2})


def test_a_built_message_has_the_envelope_celery_publishes(client):
    """Same keys and values as the message Celery's producer pushes for the same task (the
    ids and tags that are fresh each time aside), so a worker cannot tell them apart."""
    queue = "hookline.envelope-test"
    broker = store.client()  # the app's broker
    broker.delete(queue)
    worker_app.send_task("hookline.deliver", args=["shop", "order.created", {"order": 1}],
                         kwargs={"event_id": "evt-1"}, task_id="task-1", queue=queue,
                         routing_key=queue, exchange=queue)
    published = json.loads(broker.rpop(queue))
    built = json.loads(build_message(worker_app, task_name="hookline.deliver", task_id="task-1",
                                     args=["shop", "order.created", {"order": 1}],
                                     kwargs={"event_id": "evt-1"}, retries=0, queue=queue))
    fresh = {"delivery_tag", "correlation_id", "reply_to"}  # per publish / per app
    assert set(built) == set(published)
    assert {k: v for k, v in built["properties"].items() if k not in fresh} == \
        {k: v for k, v in published["properties"].items() if k not in fresh}
    assert built["properties"]["delivery_tag"] != published["properties"]["delivery_tag"]
    # The published body carries the enqueue stamp; the task and its arguments are the same.
    assert decode_message(json.dumps(built))[0] == decode_message(json.dumps(published))[0]
    same_headers = {"task", "id", "retries", "root_id", "parent_id", "lang", "argsrepr"}
    assert {k: built["headers"].get(k) for k in same_headers} == \
        {k: published["headers"].get(k) for k in same_headers}


def test_a_separate_broker_gets_claimed_retries_pushed_and_confirmed(client):
    url = isolated_url(12)
    broker = emptied(url)
    schedule = RetrySchedule(client)
    for n in random.sample(range(20), 20):
        schedule.park(endpoint_id="ep", event_id=f"e{n}", countdown=0, message=message(n))
    released, _ = schedule.release_due(queue=QUEUE, broker=broker)
    assert released == 20 and broker.llen(QUEUE) == 20
    assert schedule.stats().total == 0 and client.zcard("hookline:{schedule}:releasing") == 0
    emptied(url).close()
    broker.close()


@pytest.mark.slow
def test_a_park_on_a_demoted_master_fails_as_a_passing_error_not_a_refusal(tmp_path):
    """A Sentinel failover leaves writers on a master that became a replica for a while: the
    park fails with READONLY, which the worker treats like an unreachable Redis (the message
    is requeued or restored and the park tried again), not as a refusal to dead-letter."""
    import redis

    from hookline.worker.parking import TRANSIENT
    from tests.conftest import PrivateRedis

    (tmp_path / "m").mkdir()
    (tmp_path / "r").mkdir()
    master, replica = PrivateRedis(tmp_path / "m"), PrivateRedis(tmp_path / "r")
    try:
        master.start()
        replica_client = replica.start()
        replica_client.replicaof("127.0.0.1", master.port)
        wait_until(lambda: replica_client.info("replication")["master_link_status"] == "up")
        schedule = RetrySchedule(redis.Redis(port=replica.port))
        message = build_message(worker_app, task_name=TASK_NAME, task_id="t-ro",
                                args=["ep", "t", {}], kwargs={"event_id": "e-ro"},
                                retries=1, queue="q")
        with pytest.raises(redis.RedisError) as refused:
            schedule.park(endpoint_id="ep", event_id="e-ro", countdown=1, message=message)
        assert isinstance(refused.value, redis.exceptions.ReadOnlyError)
        assert isinstance(refused.value, TRANSIENT)
    finally:
        for server in (replica, master):  # throwaway servers: no graceful shutdown needed
            if server.process is not None:
                server.process.kill()
                server.process.wait(10)
