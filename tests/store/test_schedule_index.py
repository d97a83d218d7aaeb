"""The retry schedule's per-endpoint index (``keys.schedule_endpoint_key``) and the Lua
scripts' keys: one endpoint's retries are found without a scan of the whole schedule (the
first 410 of an endpoint, a disable, a removal), the index follows every park, release and
unpark, and every key a script touches comes through ``KEYS``.

Hookline's Redis (and broker) switched to a database of these tests (14: no worker of the
session uses it, and no other test cleans it up under them); its Hookline keys are deleted
before and after each test, the database is never flushed."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from hookline.delivery.retries import dead_letter_scheduled
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.schedule import RetrySchedule
from hookline.transport.envelope import build_message
from hookline.worker.celery import worker_app
from tests.conftest import isolated_url, wait_until

LATER = 3600.0
SCRIPTS = ["admit", "consume", "park", "release", "unpark", "settle", "save_endpoint"]


class Counting(redis.Redis):
    """A client that keeps the name of every command it (or a pipeline of it) sends."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list[str] = []

    def execute_command(self, *args, **options):
        self.commands.append(str(args[0]).upper())
        return super().execute_command(*args, **options)

    def pipeline(self, transaction=True, shard_hint=None):
        commands = self.commands

        class CountingPipeline(redis.client.Pipeline):
            def execute_command(self, *args, **options):
                commands.append(str(args[0]).upper())
                return super().execute_command(*args, **options)

        return CountingPipeline(self.connection_pool, self.response_callbacks, transaction,
                                shard_hint)


URL = isolated_url(14)


def _delete_ours(client: redis.Redis) -> None:
    for pattern in ("hookline:*", "test.*", "_kombu.binding*.test.*", "unacked*"):
        found = list(client.scan_iter(pattern, count=1000))
        if found:
            client.delete(*found)


@pytest.fixture(autouse=True)
def own_db() -> Iterator[redis.Redis]:
    from hookline.core import config

    client = redis.Redis.from_url(URL, decode_responses=True)
    _delete_ours(client)
    config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL})
    yield client
    config.configure()
    _delete_ours(client)


@pytest.fixture
def counting() -> Counting:
    return Counting.from_url(URL, decode_responses=True)


def task_message(endpoint_id: str, event_id: str) -> str:
    return build_message(worker_app, task_name="hookline.deliver", task_id=f"task-{event_id}",
                         args=[endpoint_id, "order.created", {"event": event_id}],
                         kwargs={"event_id": event_id, "attempts": 2}, retries=2,
                         queue="hookline.retry")


def park(schedule: RetrySchedule, endpoint_id: str, event_id: str,
         countdown: float = LATER) -> None:
    schedule.park(endpoint_id=endpoint_id, event_id=event_id, countdown=countdown,
                  message=task_message(endpoint_id, event_id), last_status=503,
                  last_error="HTTP 503")


def park_crowd(schedule: RetrySchedule, others: int = 600) -> None:
    for n in range(others):
        park(schedule, f"other-{n % 7}", f"o{n}")


def index(endpoint_id: str) -> set[str]:
    return store.client().smembers(keys.schedule_endpoint_key(endpoint_id))


def assert_counts_match_the_index() -> None:
    client = store.client()
    counts = {ep: int(n) for ep, n in client.hgetall(keys.COUNTS_KEY).items()}
    by_meta: dict[str, int] = {}
    for retry_id in client.hkeys(keys.META_KEY):
        endpoint_id = retry_id.split("/", 1)[0]
        by_meta[endpoint_id] = by_meta.get(endpoint_id, 0) + 1
    indexed = {key.rsplit(":", 1)[1]: client.scard(key)
               for key in client.scan_iter(keys.schedule_endpoint_key("*"))}
    assert counts == by_meta == {ep: n for ep, n in indexed.items() if n}


def test_one_endpoints_retries_come_from_its_index_not_a_scan_of_the_schedule(counting):
    schedule = RetrySchedule(counting, max_total=10_000, max_per_endpoint=10_000)
    park_crowd(schedule)
    mine = {f"mine/e{n}" for n in range(4)}
    for retry_id in sorted(mine):
        park(schedule, "mine", retry_id.split("/")[1])
    assert index("mine") == mine
    assert_counts_match_the_index()

    counting.commands.clear()
    found = list(schedule.scheduled("mine"))
    assert {retry.id for retry in found} == mine
    assert {(r.endpoint_id, r.event_type, r.attempts, r.last_status) for r in found} == \
        {("mine", "order.created", 2, 503)}
    assert "HSCAN" not in counting.commands and "SSCAN" in counting.commands
    assert len(counting.commands) <= 8, counting.commands  # a page, not a command per retry

    # All of them (no endpoint) is still the whole schedule.
    assert sum(1 for _ in schedule.scheduled()) == 604


def test_release_and_unpark_take_retries_out_of_the_index(counting):
    schedule = RetrySchedule(counting)
    queue = "test.index-retry"
    client = store.client()
    client.delete(queue)
    try:
        for n in range(5):
            park(schedule, "due-ep", f"d{n}", countdown=0)
            park(schedule, "other-ep", f"o{n}", countdown=0)
        park(schedule, "later-ep", "l0")
        park(schedule, "later-ep", "l1")
        assert len(index("due-ep")) == 5 and len(index("later-ep")) == 2
        wait_until(lambda: schedule.release_due(queue=queue, queue_limit=10**6)[0] == 0
                   and client.llen(queue) == 10)
        assert index("due-ep") == set() and index("other-ep") == set()
        assert index("later-ep") == {"later-ep/l0", "later-ep/l1"}
        assert_counts_match_the_index()

        # A separate broker: claimed retries stay scheduled (counted, indexed) until pushed
        # and confirmed, then leave the index.
        park(schedule, "claim-ep", "c0", countdown=0)
        released, _ = schedule.release_due(queue=queue, broker=client)
        assert released == 1 and index("claim-ep") == set()

        assert schedule.unpark(["later-ep/l0", "later-ep/l1", "later-ep/gone"]) == 2
        assert index("later-ep") == set()
        assert client.hlen(keys.COUNTS_KEY) == 0 and client.zcard(keys.DUE_KEY) == 0
        assert_counts_match_the_index()
    finally:
        client.delete(queue)


def test_parking_a_retry_again_replaces_it_and_counts_it_once(counting):
    schedule = RetrySchedule(counting, max_per_endpoint=2)
    park(schedule, "ep", "e1")
    park(schedule, "ep", "e1", countdown=LATER / 2)
    park(schedule, "ep", "e2")
    assert index("ep") == {"ep/e1", "ep/e2"} and schedule.stats().by_endpoint == {"ep": 2}
    assert_counts_match_the_index()


def test_a_410_cascade_dead_letters_exactly_that_endpoints_retries(counting):
    schedule = RetrySchedule(counting, max_total=10_000, max_per_endpoint=10_000)
    park_crowd(schedule, others=300)
    for n in range(3):
        park(schedule, "gone-ep", f"g{n}")
    before = schedule.stats().by_endpoint

    assert dead_letter_scheduled("gone-ep", "endpoint_gone") == 3
    dlq = DeadLetterQueue()
    assert dlq.count() == 3 and dlq.counts_by_reason() == {"endpoint_gone": 3}
    letters = dlq.find()
    assert sorted(entry.event_id for entry in letters) == ["g0", "g1", "g2"]
    assert all(entry.endpoint_id == "gone-ep" and entry.last_status == 503 for entry in letters)
    after = schedule.stats().by_endpoint
    assert "gone-ep" not in after and after == {k: v for k, v in before.items()
                                                 if k != "gone-ep"}
    assert index("gone-ep") == set()
    assert_counts_match_the_index()
    assert dead_letter_scheduled("gone-ep", "endpoint_gone") == 0


def test_retries_parked_before_the_index_existed_are_still_found():
    schedule = RetrySchedule()
    park(schedule, "old-ep", "e1")
    park(schedule, "old-ep", "e2")
    store.client().delete(keys.schedule_endpoint_key("old-ep"))  # as parked by an older version
    assert {retry.id for retry in schedule.scheduled("old-ep")} == {"old-ep/e1", "old-ep/e2"}
    assert index("old-ep") == {"old-ep/e1", "old-ep/e2"}
    assert_counts_match_the_index()


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_names_no_key_of_its_own(name):
    """Every key comes through KEYS: no script (pieces included) builds a Hookline key."""
    code = "\n".join(line.split("--", 1)[0] for line in store.load_script(name).splitlines())
    assert "hookline:" not in code
    assert not re.search(r"^--#include", store.load_script(name), re.MULTILINE)
    assert not re.search(r"redis\.call\(\s*'[A-Z]+'\s*,\s*'", code)  # a literal key


def test_admit_and_consume_share_the_held_rule_park_and_consume_the_park_rule():
    held = "local function endpoint_hold("
    parking = "local function park_retry("
    assert held in store.load_script("admit") and held in store.load_script("consume")
    assert parking in store.load_script("park") and parking in store.load_script("consume")


QUEUE = Queue("test.consume-held", Exchange("test.consume-held"),
              routing_key="test.consume-held")


def test_the_consumer_parks_a_held_endpoints_deliveries_through_keys_it_is_given():
    """The broker is Hookline's Redis: consume.lua parks deliveries to an endpoint whose
    circuit is open. The consumer knows no endpoint at first: the script asks for each
    endpoint's keys ('need') and the parked retries land in that endpoint's index."""
    client = store.client()
    client.delete(QUEUE.name)
    seconds, micros = client.time()
    client.hset(keys.breaker_key("held-x"), mapping={
        "state": "open", "open_until": seconds * 1000 + micros // 1000 + 600_000})
    try:
        with Connection(URL, transport="hookline.transport.redis:Transport") as conn:
            producer = Producer(conn.channel(), exchange=QUEUE.exchange,
                                routing_key=QUEUE.routing_key, serializer="json")
            for n in range(3):
                producer.publish({"n": n}, declare=[QUEUE],
                                 headers={"hookline_endpoint": "held-x",
                                          "hookline_event": f"ev{n}"})
            producer.publish({"n": 9}, declare=[QUEUE],
                             headers={"hookline_endpoint": "fine-y", "hookline_event": "ev9"})
            got = []
            with Consumer(conn, [QUEUE], callbacks=[lambda body, m: (got.append(body),
                                                                     m.ack())]):
                deadline = time.monotonic() + 15
                while not got and time.monotonic() < deadline:
                    with contextlib.suppress(TimeoutError):
                        conn.drain_events(timeout=1)
            assert got == [{"n": 9}]
            assert set(conn.default_channel._endpoints) == {"held-x", "fine-y"}
        assert index("held-x") == {"held-x/ev0", "held-x/ev1", "held-x/ev2"}
        assert RetrySchedule().stats().by_endpoint == {"held-x": 3}
        assert client.llen(QUEUE.name) == 0
        assert_counts_match_the_index()
    finally:
        client.delete(QUEUE.name)
