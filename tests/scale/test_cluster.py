"""Hookline's state on a Redis Cluster of three masters (``REDIS_URL=redis+cluster://...``),
the broker on a Redis of its own: the foundation flows, and the global structures spread over
the masters.

The cluster is started from ``redis-server`` (``cluster-enabled yes``) and joined with
``redis-cli --cluster create``; one worker subprocess delivers to a real receiver on loopback.
Skipped, saying why, where redis-server or redis-cli cannot be found.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

# Imported now, under the suite's settings: its module-level broker settings are what the
# worker's Celery app (hookline.worker.celery) reads, for the rest of the session.
import hookline.celeryconfig  # noqa: F401
from examples.receiver import Receiver, Reply, always, fail_first, in_order
from hookline.api.enqueue import send_webhook
from hookline.core import config
from hookline.core.endpoint import Endpoint
from hookline.delivery.publisher import publishing_app
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from hookline.store.schedule import RetrySchedule
from hookline.transport.envelope import build_message
from tests.conftest import PrivateRedis, WorkerProcess, wait_until
from tests.support.cli import fails, json_out, succeeds
from tests.support.servers import LocalCluster

pytestmark = pytest.mark.scale


class ClusterSetup:
    def __init__(self, cluster: LocalCluster, broker_url: str, receiver: Receiver,
                 worker: WorkerProcess) -> None:
        self.cluster = cluster
        self.broker_url = broker_url
        self.receiver = receiver
        self.worker = worker


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSetup]:
    why = LocalCluster.unavailable()
    if why:
        pytest.skip(why)
    directory = tmp_path_factory.mktemp("cluster")
    cluster = LocalCluster(directory / "nodes")
    broker = PrivateRedis(directory)
    worker = None
    try:
        cluster.start()
        broker.start()
        with Receiver() as receiver:
            worker = WorkerProcess("cluster", concurrency=8, extra_env={
                "REDIS_URL": cluster.url, "HOOKLINE_BROKER_URL": broker.url,
                "HOOKLINE_METRICS_PORT": "0"})
            yield ClusterSetup(cluster, broker.url, receiver, worker.wait_ready())
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
        cluster.stop()


@pytest.fixture
def on_cluster(setup: ClusterSetup) -> Iterator[ClusterSetup]:
    """This process's Hookline (registry, CLI, publishing) on the cluster and the broker."""
    config.configure({"REDIS_URL": setup.cluster.url, "HOOKLINE_BROKER_URL": setup.broker_url})
    try:
        yield setup
    finally:
        config.configure()


def endpoint(setup: ClusterSetup, behaviour: Any, endpoint_id: str | None = None,
             **options: Any) -> Endpoint:
    endpoint_id = endpoint_id or f"ep-{uuid.uuid4().hex[:10]}"
    url = setup.receiver.route(f"/{endpoint_id}", behaviour)
    return EndpointRegistry().add(endpoint_id, url, **options)


def delivered(endpoint_id: str, *event_ids: str, timeout: float = 20.0) -> None:
    gate = Gate()
    wait_until(lambda: all(gate.is_delivered(endpoint_id, event) for event in event_ids),
               timeout, what=lambda: [event for event in event_ids
                                      if not gate.is_delivered(endpoint_id, event)])


def dead_lettered(endpoint_id: str, *event_ids: str, timeout: float = 20.0) -> dict[str, str]:
    """{event id: reason} once every event is dead-lettered."""
    queue = DeadLetterQueue()

    def reasons() -> dict[str, str] | None:
        found = {event: queue.get(f"{endpoint_id}/{event}") for event in event_ids}
        if all(found.values()):
            return {event: entry.reason for event, entry in found.items() if entry}
        return None

    return wait_until(reasons, timeout, what=lambda: "not all dead-lettered")


def test_a_cluster_redis_url_without_a_broker_of_its_own_is_refused(setup: ClusterSetup):
    with pytest.raises(config.ConfigError, match="HOOKLINE_BROKER_URL is not set"):
        config.load_settings({"REDIS_URL": setup.cluster.url})
    with pytest.raises(config.ConfigError, match="cannot be Celery's broker"):
        config.load_settings({"REDIS_URL": setup.cluster.url,
                              "HOOKLINE_BROKER_URL": setup.cluster.url})
    assert config.load_settings({"REDIS_URL": setup.cluster.url,
                                 "HOOKLINE_BROKER_URL": setup.broker_url}).state_shards == 16


def test_delivery_retries_and_retry_after_on_the_cluster(on_cluster: ClusterSetup):
    steady = endpoint(on_cluster, always(Reply(204)))
    flaky = endpoint(on_cluster, fail_first(2, Reply(503)))
    throttled = endpoint(on_cluster, fail_first(1, Reply(429, headers={"Retry-After": "2"})))
    first = send_webhook(steady.id, "order.created", {"n": 1})
    retried = send_webhook(flaky.id, "order.created", {"n": 2})
    later = send_webhook(throttled.id, "order.created", {"n": 3})
    delivered(steady.id, first)
    delivered(flaky.id, retried)
    delivered(throttled.id, later)
    assert [r.attempt for r in on_cluster.receiver.requests_to(f"/{flaky.id}")] == [1, 2, 3]
    shown = json_out("event", "show", retried)  # the keys scanned on every master
    assert [(found["endpoint_id"], found["state"], len(found["attempts"]))
            for found in shown["deliveries"]] == [(flaky.id, "delivered", 3)]
    answered, sent_again = on_cluster.receiver.requests_to(f"/{throttled.id}")
    assert sent_again.at - answered.at >= 2.0  # Retry-After honoured (the cap is 3 s)


def test_breaker_opens_then_a_probe_closes_it(on_cluster: ClusterSetup):
    failing = endpoint(on_cluster, in_order(*[Reply(503)] * 5))
    events = [send_webhook(failing.id, "order.created", {"n": n}) for n in range(5)]
    gate = Gate()
    wait_until(lambda: gate.breaker_status(failing.id).state == "open", 20)
    status = json_out("breaker", "status", failing.id)
    assert status["state"] in ("open", "half_open")
    delivered(failing.id, *events, timeout=30)
    assert gate.breaker_status(failing.id).state == "closed"


def test_410_dead_letters_the_scheduled_retries_and_they_stop(on_cluster: ClusterSetup):
    gone = endpoint(on_cluster, in_order(*[Reply(503)] * 3, then=Reply(410)),
                    retry_policy={"initial_backoff": 30, "max_backoff": 60})
    parked = [send_webhook(gone.id, "order.created", {"n": n}) for n in range(3)]
    schedule = RetrySchedule()
    wait_until(lambda: schedule.stats().by_endpoint.get(gone.id) == 3, 20)
    stats = json_out("stats")
    assert stats["schedule"]["by_endpoint"][gone.id] == 3
    assert set(stats["queues"]) == {"hookline", "hookline.retry"}  # read from the broker
    listed = json_out("schedule", "list", "--endpoint", gone.id)
    assert sorted(retry["event_id"] for retry in listed) == sorted(parked)
    shown = json_out("event", "show", parked[0], "--endpoint", gone.id)
    assert shown["deliveries"][0]["state"] == "scheduled"
    last = send_webhook(gone.id, "order.created", {"n": 3})
    reasons = dead_lettered(gone.id, *parked, last)
    assert set(reasons.values()) == {"endpoint_gone"}
    # The dead letters are written before the retries leave the schedule.
    wait_until(lambda: schedule.stats().by_endpoint.get(gone.id) is None, 20)
    assert not list(schedule.scheduled(gone.id))
    assert EndpointRegistry().require(gone.id).enabled is False
    # Every event is final (dead-lettered, nothing scheduled): the 4 requests are all.
    assert len(on_cluster.receiver.requests_to(f"/{gone.id}")) == 4


def test_dlq_list_in_time_order_across_shards_and_replay(on_cluster: ClusterSetup):
    queue = DeadLetterQueue()
    ids: dict[Any, str] = {}  # four endpoints whose dead letters sit in four shards
    for n in range(100):
        ids.setdefault(queue.shard_of(f"dlq-{n}/"), f"dlq-{n}")
    rejecting = [endpoint(on_cluster, always(Reply(400)), endpoint_id)
                 for endpoint_id in list(ids.values())[:4]]
    events = {}
    for item in rejecting:
        events[item.id] = send_webhook(item.id, "order.created", {"for": item.id})
        dead_lettered(item.id, events[item.id])  # one at a time: a known time order
    listed = json_out("dlq", "list")
    ours = [entry for entry in listed if entry["endpoint_id"] in events]
    assert [entry["endpoint_id"] for entry in ours] == [item.id for item in rejecting]
    for item in rejecting:
        on_cluster.receiver.route(f"/{item.id}", always(Reply(204)))
    succeeds("dlq", "replay", "--reason", "rejected")
    for item in rejecting:
        delivered(item.id, events[item.id])
    assert not [entry for entry in json_out("dlq", "list") if entry["endpoint_id"] in events]


def test_endpoint_remove_takes_its_keys_and_retries(on_cluster: ClusterSetup):
    doomed = endpoint(on_cluster, always(Reply(503)),
                      retry_policy={"initial_backoff": 30, "max_backoff": 60})
    waiting = send_webhook(doomed.id, "order.created", {})
    schedule = RetrySchedule()
    wait_until(lambda: schedule.stats().by_endpoint.get(doomed.id) == 1, 20)
    succeeds("endpoint", "remove", doomed.id, "--yes")
    assert dead_lettered(doomed.id, waiting) == {waiting: "endpoint_removed"}
    client = on_cluster.cluster.client()
    assert not [key for key in keys.endpoint_owned_keys(doomed.id) if client.exists(key)]
    assert doomed.id not in [item["id"] for item in json_out("endpoint", "list")]
    fails("endpoint", "show", doomed.id)
    assert not list(schedule.scheduled(doomed.id))


def test_the_schedule_and_dlq_spread_over_the_masters(on_cluster: ClusterSetup):
    schedule, queue = RetrySchedule(), DeadLetterQueue()
    client = on_cluster.cluster.client()
    endpoint_ids = [f"spread-{n}" for n in range(24)]
    for endpoint_id in endpoint_ids:
        # The publishing app of the settings now in force: the worker's own app would keep
        # this test's broker for the rest of the session.
        message = build_message(publishing_app(), task_name="hookline.deliver", task_id=endpoint_id,
                                args=[endpoint_id, "t", {}], kwargs={"event_id": "e"},
                                retries=1, queue="hookline.retry")
        schedule.park(endpoint_id=endpoint_id, event_id="e", countdown=3600, message=message)
    due_keys = {shard.due for shard in schedule.shards if client.exists(shard.due)}
    masters = {on_cluster.cluster.master_of(client, key) for key in due_keys}
    assert len(masters) == 3, masters
    # Each key is where the slot map says: on that master's own keyspace.
    for key in due_keys:
        host, port = on_cluster.cluster.master_of(client, key).split(":")
        node = client.get_node(host=host, port=int(port))
        assert node is not None and node.redis_connection.exists(key) == 1
    for shard in schedule.shards:  # one endpoint's retries and its index share a slot
        slots = {client.keyslot(key) for key in (shard.due, shard.meta, shard.counts,
                                                 shard.by_endpoint("any"))}
        assert len(slots) == 1
    stats = schedule.stats()
    assert all(stats.by_endpoint[endpoint_id] == 1 for endpoint_id in endpoint_ids)
    assert schedule.unpark([f"{endpoint_id}/e" for endpoint_id in endpoint_ids]) == 24
    assert len({on_cluster.cluster.master_of(client, shard.entries)
                for shard in queue.shards}) == 3
    assert len({on_cluster.cluster.master_of(client, index)
                for index in keys.endpoint_index_keys(16)}) == 3


def test_stats_and_metrics_read_across_shards(on_cluster: ClusterSetup):
    rejecting = [endpoint(on_cluster, always(Reply(422))) for _ in range(3)]
    events = {item.id: send_webhook(item.id, "order.created", {}) for item in rejecting}
    for endpoint_id, event_id in events.items():
        dead_lettered(endpoint_id, event_id)
    before = DeadLetterQueue().stats().by_reason.get("rejected", 0)
    stats = json_out("stats")
    assert stats["dead_letters"]["by_reason"]["rejected"] == before >= 3
    assert stats["endpoints"]["total"] >= 3
    from hookline.transport.gauges import RedisStateCollector

    samples = {metric.name: metric.samples for metric in RedisStateCollector().collect()}
    assert samples["hookline_redis_up"][0].value == 1
    assert samples["hookline_dead_letters"][0].value == DeadLetterQueue().count()
    started = time.monotonic()
    assert json_out("breaker", "status")  # every endpoint's breaker, TIME read on its own
    assert time.monotonic() - started < 10


def test_the_event_log_on_the_cluster_rows_and_their_shard_indexes(on_cluster: ClusterSetup):
    """The event log on a cluster: the row on the endpoint's slot, its index entry in its
    shard's (a second call), read back merged across the shards on the masters."""
    from hookline.store.event_log_pages import EventLogPages, LogFilter

    ok = endpoint(on_cluster, always(Reply(204)))
    bad = endpoint(on_cluster, always(Reply(400)))
    send_webhook(ok.id, "order.paid", {"n": 1}, event_id="log-ok")
    send_webhook(bad.id, "order.paid", {"n": 2}, event_id="log-bad")
    delivered(ok.id, "log-ok")
    dead_lettered(bad.id, "log-bad")
    pages = EventLogPages()

    def listed(selection: LogFilter) -> set[str]:
        return {row.entry_id for row in pages.page(selection, limit=500).rows
                if row.endpoint_id in (ok.id, bad.id)}

    wait_until(lambda: listed(LogFilter()) == {f"{ok.id}/log-ok", f"{bad.id}/log-bad"},
               timeout=10, what=lambda: listed(LogFilter()))
    assert listed(LogFilter(status="dead")) == {f"{bad.id}/log-bad"}
    assert listed(LogFilter(status="delivered", type_prefix="order.")) == {f"{ok.id}/log-ok"}
    assert listed(LogFilter(endpoint_ids=[bad.id])) == {f"{bad.id}/log-bad"}
    assert listed(LogFilter(status="retrying")) == set()  # the index entry moved on
