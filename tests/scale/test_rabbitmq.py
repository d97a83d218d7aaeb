"""RabbitMQ as the broker: real worker processes on a vhost of each test's own
(``tests/support/rabbitmq.py``), Hookline's state on a redis-server of the module's own, a
real receiver on loopback. Retries, deferrals and replays wait in Redis and are released to
RabbitMQ by the workers' releasers; a worker killed with SIGKILL loses nothing.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import hookline
from examples.receiver import Reply, always, fail_first
from hookline.core import config
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.gates import Gate
from hookline.store.schedule import RetrySchedule
from tests.conftest import ROOT, TEST_ENV, PrivateRedis, free_port, wait_until
from tests.support import rabbitmq
from tests.support.cli import json_out, succeeds
from tests.support.endpoints import new_endpoint
from tests.support.windows import busiest_window

pytestmark = pytest.mark.scale

#: Enough attempts that an event failing while a breaker opens is not exhausted meanwhile.
ATTEMPTS = "20"


@pytest.fixture(scope="module")
def state_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """Hookline's state on a redis-server of this module's own: no other worker releases
    or delivers what these tests park."""
    server = PrivateRedis(tmp_path_factory.mktemp("rabbit-redis"))
    server.start()
    yield server
    server.stop()


class Rabbit:
    """One test's RabbitMQ vhost and the settings pointing at it."""

    def __init__(self, vhost: str, redis_url: str) -> None:
        self.vhost = vhost
        self.broker_url = rabbitmq.url(vhost)
        self.env = {"REDIS_URL": redis_url, "HOOKLINE_BROKER_URL": self.broker_url,
                    "HOOKLINE_MAX_ATTEMPTS": ATTEMPTS, "HOOKLINE_METRICS_PORT": "0"}


@pytest.fixture
def rabbit(state_redis: PrivateRedis) -> Iterator[Rabbit]:
    with rabbitmq.private_vhost() as vhost:
        redis.Redis.from_url(state_redis.url).flushdb()
        setup = Rabbit(vhost, state_redis.url)
        config.configure(setup.env)
        try:
            yield setup
        finally:
            config.configure()


def start(start_worker: Any, rabbit: Rabbit, name: str, **env: str) -> Any:
    """A worker (threads pool, 8 slots) on ``rabbit``'s vhost and Redis."""
    return start_worker(f"rabbit-{name}-{uuid.uuid4().hex[:6]}", concurrency=8,
                        extra_env={**rabbit.env, **env})


def send_all(endpoint_id: str, count: int) -> list[str]:
    return [hookline.send_webhook(endpoint_id, "order.created", {"n": n}) for n in range(count)]


def delivered(endpoint_id: str, event_ids: list[str]) -> int:
    gate = Gate()
    return sum(gate.is_delivered(endpoint_id, event_id) for event_id in event_ids)


def wait_all_delivered(endpoint_id: str, event_ids: list[str], timeout: float) -> None:
    wait_until(lambda: delivered(endpoint_id, event_ids) == len(event_ids), timeout,
               interval=0.2, what=lambda: (f"{delivered(endpoint_id, event_ids)} of "
                                           f"{len(event_ids)} delivered; dead letters: "
                                           f"{DeadLetterQueue().stats().by_reason}; scheduled: "
                                           f"{RetrySchedule().stats().total}"))


def test_flaky_endpoints_retries_are_all_delivered(rabbit, start_worker, receiver):
    endpoint = new_endpoint(receiver, fail_first(2, Reply(503)))
    # Every event fails twice: the breaker would open; here only the retries are tested.
    start(start_worker, rabbit, "flaky", HOOKLINE_BREAKER_THRESHOLD="1000")
    event_ids = send_all(endpoint.id, 40)
    wait_all_delivered(endpoint.id, event_ids, 30)
    by_id = Counter(request.webhook_id for request in receiver.requests_to(f"/{endpoint.id}"))
    assert set(by_id) == set(event_ids)
    assert min(by_id.values()) >= 3  # two 503s, each retried through the schedule
    assert DeadLetterQueue().stats().total == 0
    assert rabbitmq.queue_types(rabbit.vhost).items() >= {("hookline", "quorum"),
                                                          ("hookline.retry", "quorum")}


def test_breaker_held_endpoints_deferrals_are_delivered_after_it_recovers(
        rabbit, start_worker, receiver):
    recovers_at = time.monotonic() + 3.0

    def down_then_up(attempt: int) -> Reply:
        return Reply(503) if time.monotonic() < recovers_at else Reply(204)

    endpoint = new_endpoint(receiver, down_then_up)
    worker = start(start_worker, rabbit, "breaker")
    event_ids = send_all(endpoint.id, 60)
    wait_all_delivered(endpoint.id, event_ids, 40)
    requests = receiver.requests_to(f"/{endpoint.id}")
    failed = [request for request in requests if request.status == 503]
    # The breaker opened after 5 failures: most events were held, not sent, while it was down.
    assert "breaker.opened" in worker.output()
    assert len(failed) < len(event_ids)
    assert {request.webhook_id for request in requests} == set(event_ids)
    assert DeadLetterQueue().stats().total == 0
    # Held cheaply: deliveries for the open breaker parked by the worker's memory of the
    # hold (one round trip each), and held-back retries kept in the schedule by the
    # releaser until the probe's outcome, so few deliveries travel twice (measured: 121
    # task receipts for 60 events; 304 before either).
    log = worker.output()
    assert "by=worker" in log
    assert log.count(" received") <= 2.5 * len(event_ids)


def test_rate_limited_deferrals_are_all_delivered_within_the_rate(
        rabbit, start_worker, receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)), rate="20/s", burst=2)
    start(start_worker, rabbit, "rate")
    event_ids = send_all(endpoint.id, 60)
    wait_all_delivered(endpoint.id, event_ids, 30)
    requests = receiver.requests_to(f"/{endpoint.id}")
    assert sorted(request.webhook_id for request in requests) == sorted(event_ids)
    assert busiest_window([request.at for request in requests]) <= 20 + 2


def test_a_500_entry_replay_is_all_delivered(rabbit, start_worker, receiver):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    queue = DeadLetterQueue()
    event_ids = [f"evt-{n}" for n in range(500)]
    for event_id in event_ids:
        queue.add(DeadLetter(endpoint_id=endpoint.id, event_id=event_id,
                             event_type="order.created", payload={"id": event_id},
                             reason="exhausted", attempts=4, enqueued_at=time.time()))
    start(start_worker, rabbit, "replay")
    out = succeeds("dlq", "replay", "--endpoint", endpoint.id, "--rate", "200/s").output
    assert "500" in out
    wait_all_delivered(endpoint.id, event_ids, 40)
    assert queue.stats().total == 0
    assert len({r.webhook_id for r in receiver.requests_to(f"/{endpoint.id}")}) == 500


def test_kill_9_mid_run_loses_nothing(rabbit, start_worker, receiver):
    """A worker killed mid-run: RabbitMQ hands its unacknowledged messages to the other
    worker at once; those whose attempt was under way meet the dead attempt's lease, wait in
    the schedule until it ends and are released and delivered then, never stranded."""
    endpoint = new_endpoint(receiver, always(Reply(204, delay=0.05)))
    doomed = start(start_worker, rabbit, "doomed")
    survivor = start(start_worker, rabbit, "survivor")
    event_ids = send_all(endpoint.id, 1000)
    wait_until(lambda: len(receiver.requests_to(f"/{endpoint.id}")) >= 300, 30)
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait(10)
    wait_all_delivered(endpoint.id, event_ids, 60)
    seen = Counter(request.webhook_id for request in receiver.requests_to(f"/{endpoint.id}"))
    assert set(seen) == set(event_ids)  # 0 lost, and nothing but these events sent
    assert DeadLetterQueue().stats().total == 0
    assert survivor.process.poll() is None
    # The attempts the kill interrupted came back to the survivor while their lease held.
    assert "reason=in_flight" in survivor.output()


def test_stats_and_metrics_read_the_queue_depths_from_rabbitmq(rabbit, receiver, tmp_path):
    endpoint = new_endpoint(receiver, always(Reply(204)))
    send_all(endpoint.id, 7)  # confirmed by RabbitMQ; no worker: they wait on the queue
    report = json_out("stats")
    assert report["queues"] == {"hookline": 7, "hookline.retry": 0}
    port = free_port()
    env = {**os.environ, **TEST_ENV, **rabbit.env}
    exporter = subprocess.Popen(
        [str(Path(sys.executable).parent / "hookline"), "metrics", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def scrape() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as answer:
                    assert answer.status == 200
                    return str(answer.read().decode())
            except OSError:
                return None

        text = wait_until(scrape, 20)
    finally:
        exporter.terminate()
        exporter.wait(10)
    assert 'hookline_queue_depth{queue="hookline"} 7.0' in text
    assert 'hookline_queue_depth{queue="hookline.retry"} 0.0' in text
    assert "hookline_redis_up 1.0" in text


def test_scheduled_retries_release_to_rabbitmq_without_a_worker(rabbit, receiver):
    """The releaser alone (``hookline releaser``'s loop, in-process) republishes a parked
    retry through Celery's producer: it reaches the retry queue with its task id."""
    from hookline.delivery import retries
    from hookline.delivery.publisher import publishing_app
    from hookline.delivery.releaser import Releaser

    schedule = RetrySchedule()
    retries.park(publishing_app(), schedule, task_id="task-1", args=["ep-x", "t", {"a": 1}],
                 kwargs={"event_id": "evt-1"}, retries=1, countdown=0)
    releaser = Releaser().start()
    try:
        wait_until(lambda: schedule.stats().total == 0, 20)
    finally:
        releaser.stop()
    retry_queue = publishing_app().amqp.queues["hookline.retry"]
    with publishing_app().connection_for_read() as connection:
        message = connection.SimpleQueue(retry_queue, no_ack=True).get(timeout=10)
        assert message.headers["id"] == "task-1"
        assert message.properties["correlation_id"] == "task-1"
        args, kwargs, _ = json.loads(message.body)
        assert args == ["ep-x", "t", {"a": 1}] and kwargs["event_id"] == "evt-1"


def test_a_corrupted_stored_retry_is_dead_lettered_and_does_not_block_the_others(rabbit):
    """A stored message that is no broker envelope (corrupted in Redis) goes to the dead-letter
    queue as malformed; the retries claimed with it are published all the same."""
    from hookline.delivery import retries
    from hookline.delivery.publisher import publishing_app
    from hookline.delivery.releaser import Releaser
    from hookline.store.dead_letter_queue import DeadLetterQueue

    schedule = RetrySchedule()
    for event in ("evt-bad", "evt-good"):
        retries.park(publishing_app(), schedule, task_id=f"task-{event}", args=["ep-x", "t", {}],
                     kwargs={"event_id": event}, retries=1, countdown=0)
    shard = schedule.shard_of("ep-x")
    schedule.redis.hset(shard.messages, "ep-x/evt-bad", "{not a broker envelope")
    releaser = Releaser().start()
    try:
        # The claim empties the schedule at once; the malformed one is dead-lettered after,
        # in the publish.
        wait_until(lambda: schedule.stats().total == 0 and list(DeadLetterQueue().find(limit=1)),
                   20)
    finally:
        releaser.stop()
    kept = list(DeadLetterQueue().find(limit=10))
    assert [(entry.reason, entry.payload) for entry in kept] == [
        ("malformed", "{not a broker envelope")]
    retry_queue = publishing_app().amqp.queues["hookline.retry"]
    with publishing_app().connection_for_read() as connection:
        message = connection.SimpleQueue(retry_queue, no_ack=True).get(timeout=10)
        assert message.headers["id"] == "task-evt-good"


def test_the_releaser_outlives_an_unreachable_broker_and_keeps_the_retries(
        state_redis, caplog):
    """No RabbitMQ answers: the releaser logs it and tries again; nothing leaves the
    schedule, and its thread stays alive."""
    from hookline.delivery import retries
    from hookline.delivery.publisher import publishing_app
    from hookline.delivery.releaser import Releaser

    # An in-process Celery worker earlier in the session leaves the root logger at ERROR.
    caplog.set_level(logging.WARNING, logger="hookline")
    redis.Redis.from_url(state_redis.url).flushdb()
    nowhere = f"pyamqp://guest:guest@127.0.0.1:{free_port()}/none"
    config.configure({"REDIS_URL": state_redis.url, "HOOKLINE_BROKER_URL": nowhere})
    try:
        schedule = RetrySchedule()
        retries.park(publishing_app(), schedule, task_id="task-1", args=["ep-x", "t", {}],
                     kwargs={"event_id": "evt-1"}, retries=1, countdown=0)
        releaser = Releaser().start()
        try:
            wait_until(lambda: "broker.release_failed" in caplog.text, 30,
                       what=lambda: caplog.text[-3000:] or "nothing logged")
            assert releaser._thread is not None and releaser._thread.is_alive()
            assert schedule.stats().by_endpoint == {"ep-x": 1}
        finally:
            releaser.stop()
    finally:
        config.configure()
