"""Ordered endpoints: one delivery of an ordering key at a time, in the order enqueued, across
retries, two workers, a worker's kill -9, pause and resume; a dead-lettered head blocks its key
(or is skipped), a replay keeps its place; the other keys go on meanwhile.

Each test has its own redis-server (state and broker, as ordered endpoints need) and workers.
"""

from __future__ import annotations

import random
import signal
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.core import config
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.ordering import OrderLines
from tests.conftest import PrivateRedis, wait_until

#: Workers declared dead this soon after a kill (their messages restored to the others).
LIVENESS = {"HOOKLINE_HEARTBEAT_INTERVAL": "0.5", "HOOKLINE_LIVENESS_WINDOW": "2"}


@pytest.fixture
def private(tmp_path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    config.configure({"REDIS_URL": server.url})
    yield server
    config.configure()
    server.stop()


def env(server: PrivateRedis) -> dict[str, str]:
    return {"REDIS_URL": server.url, **LIVENESS}


def flaky(share: float, seed: int = 7, delay: float = 0.005) -> Any:
    """A receiver's behaviour: ``share`` of first attempts answered 503, the rest 204."""
    rng, lock = random.Random(seed), threading.Lock()

    def behaviour(attempt: int) -> Reply:
        with lock:
            fail = attempt == 1 and rng.random() < share
        return Reply(503 if fail else 204, delay=delay)

    return behaviour


def delivered_order(receiver: Any, path: str) -> dict[str, list[str]]:
    """Per ordering key, the webhook-ids answered 204, in arrival order, a repeat of the one
    before left out: a head sent again after a crash (its delivery was not recorded) is the
    same event twice in a row, which a receiver deduplicates; any other repeat stays, and is
    an inversion."""
    found: dict[str, list[str]] = defaultdict(list)
    for request in receiver.requests_to(path):
        line = found[request.headers["hookline-ordering-key"]]
        if request.status == 204 and (not line or line[-1] != request.webhook_id):
            line.append(request.webhook_id)
    return found


def enqueue_keys(endpoint_id: str, keys: int, per_key: int) -> dict[str, list[str]]:
    """``per_key`` events on each of ``keys`` keys, interleaved; the ids per key, in order."""
    sent: dict[str, list[str]] = defaultdict(list)
    for n in range(per_key):
        for k in range(keys):
            key = f"order-{k}"
            sent[key].append(send_webhook(endpoint_id, "order.updated", {"k": k, "n": n},
                                          event_id=f"{key}-{n:04d}", ordering_key=key))
    return sent


def test_each_key_goes_in_order_one_at_a_time_across_retries_two_workers_and_a_kill(
        private, receiver, start_worker):
    EndpointRegistry().add("ordered", receiver.route("/ordered", flaky(0.2)), ordered=True)
    first = start_worker("ordered-1", extra_env=env(private))
    start_worker("ordered-2", extra_env=env(private))
    sent = enqueue_keys("ordered", keys=10, per_key=30)
    wait_until(lambda: sum(map(len, delivered_order(receiver, "/ordered").values())) >= 100)
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    start_worker("ordered-3", extra_env=env(private))
    wait_until(lambda: delivered_order(receiver, "/ordered") == sent, timeout=90,
               what=lambda: {k: len(v) for k, v in delivered_order(receiver, "/ordered").items()})
    assert max(receiver.most_in_flight_by_key.values()) == 1  # never two of a key at once
    again = sum(r.status == 204 for r in receiver.requests_to("/ordered")) - 300
    assert again <= 10, "only a head in flight at the kill (one per key) is sent twice"
    for key, ids in sent.items():
        sequences = [int(r.headers["hookline-sequence"]) for r in receiver.requests_to("/ordered")
                     if r.status == 204 and r.headers["hookline-ordering-key"] == key]
        collapsed = [n for i, n in enumerate(sequences) if i == 0 or sequences[i - 1] != n]
        assert collapsed == list(range(1, len(ids) + 1)), key
    # Every line runs empty: the last head of a key reaches the receiver before its worker
    # records it delivered (and lets the line go), so this is waited for, not read at once.
    wait_until(lambda: OrderLines().counts("ordered") == (0, 0), timeout=10,
               what=lambda: OrderLines().lines("ordered"))


def test_a_blocked_head_holds_back_only_its_key_until_replayed(private, receiver, start_worker):
    from hookline.service import dead_letters
    from hookline.service.actor import cli_actor

    EndpointRegistry().add("blocking", receiver.route("/blocking", always(Reply(204))),
                           ordered=True)
    bad = "order-0-0001"
    receiver.answer_event(bad, Reply(400))  # refused for good: dead-lettered at once
    start_worker("blocking", extra_env=env(private))
    sent = enqueue_keys("blocking", keys=3, per_key=5)
    wait_until(lambda: delivered_order(receiver, "/blocking").get("order-1") == sent["order-1"]
               and delivered_order(receiver, "/blocking").get("order-2") == sent["order-2"])
    wait_until(lambda: DeadLetterQueue().get(f"blocking/{bad}") is not None)
    assert delivered_order(receiver, "/blocking")["order-0"] == ["order-0-0000"]
    [line] = [line for line in OrderLines().lines("blocking") if line.key == "order-0"]
    assert (line.head_event, line.head_sequence, line.waiting) == (bad, 2, 3)

    receiver.answer_event(bad, None)
    dead_letters.replay_one(cli_actor(), f"blocking/{bad}")
    wait_until(lambda: delivered_order(receiver, "/blocking")["order-0"] == sent["order-0"])
    assert [int(r.headers["hookline-sequence"]) for r in receiver.requests_to("/blocking")
            if r.status == 204 and r.headers["hookline-ordering-key"] == "order-0"] == [
        1, 2, 3, 4, 5]


def test_skip_lets_the_next_go_and_the_sequence_shows_the_gap(private, receiver, start_worker):
    EndpointRegistry().add("skipping", receiver.route("/skipping", always(Reply(204))),
                           ordered=True, order_policy="skip")
    receiver.answer_event("order-0-0001", Reply(400))
    start_worker("skipping", extra_env=env(private))
    enqueue_keys("skipping", keys=1, per_key=4)
    wait_until(lambda: len(delivered_order(receiver, "/skipping").get("order-0", [])) == 3)
    assert delivered_order(receiver, "/skipping")["order-0"] == [
        "order-0-0000", "order-0-0002", "order-0-0003"]
    assert [int(r.headers["hookline-sequence"]) for r in receiver.requests_to("/skipping")
            if r.status == 204] == [1, 3, 4]
    assert DeadLetterQueue().get("skipping/order-0-0001").sequence == 2

    # Replayed, the skipped one keeps its number: after the events it fell behind.
    from hookline.service import dead_letters
    from hookline.service.actor import cli_actor

    receiver.answer_event("order-0-0001", None)
    dead_letters.replay_one(cli_actor(), "skipping/order-0-0001")
    wait_until(lambda: len(delivered_order(receiver, "/skipping")["order-0"]) == 4)
    assert [int(r.headers["hookline-sequence"]) for r in receiver.requests_to("/skipping")
            if r.status == 204] == [1, 3, 4, 2]


def test_pause_and_resume_keep_each_keys_order(private, receiver, start_worker):
    registry = EndpointRegistry()
    registry.add("pausing", receiver.route("/pausing", always(Reply(204))),
                 ordered=True)
    start_worker("pausing", extra_env=env(private))
    registry.pause("pausing")
    sent = enqueue_keys("pausing", keys=4, per_key=10)
    client = redis.Redis.from_url(private.url, decode_responses=True)
    wait_until(lambda: int(client.hget("hookline:{pausing}:endpoint", "order_waiting") or 0)
               == 36)  # every key's head parked for the pause, the rest in their lines
    assert receiver.requests_to("/pausing") == []
    from hookline.delivery.retries import resume_endpoint

    resume_endpoint(registry, "pausing")
    wait_until(lambda: delivered_order(receiver, "/pausing") == sent, timeout=30)


def test_published_events_join_each_ordered_endpoints_lines_in_publish_order(
        private, receiver, start_worker):
    from hookline import publish
    from hookline.store.apps import AppRegistry

    AppRegistry().add("shop")
    registry = EndpointRegistry()
    registry.add("shop-ordered", receiver.route("/shop-ordered", flaky(0.3)), app="shop",
                 ordered=True)
    registry.add("shop-plain", receiver.route("/shop-plain", always(Reply(204))), app="shop")
    start_worker("publishing", extra_env=env(private))
    sent: dict[str, list[str]] = defaultdict(list)
    for n in range(40):
        key = f"order-{n % 2}"
        sent[key].append(publish("shop", "order.updated", {"n": n}, event_id=f"pub-{n:03d}",
                                 ordering_key=key))
    wait_until(lambda: delivered_order(receiver, "/shop-ordered") == sent, timeout=60,
               what=lambda: delivered_order(receiver, "/shop-ordered"))
    wait_until(lambda: len({r.webhook_id for r in receiver.requests_to("/shop-plain")}) == 40)
    assert max(receiver.most_in_flight_by_key.values()) == 1


def test_discarding_a_blocked_head_lets_its_key_go_on(private, receiver, start_worker):
    from hookline.service import dead_letters
    from hookline.service.actor import cli_actor

    EndpointRegistry().add("discard", receiver.route("/discard", always(Reply(204))),
                           ordered=True)
    receiver.answer_event("order-0-0000", Reply(400))
    start_worker("discard", extra_env=env(private))
    enqueue_keys("discard", keys=1, per_key=3)
    wait_until(lambda: DeadLetterQueue().get("discard/order-0-0000") is not None)
    assert OrderLines().counts("discard") == (1, 2)  # blocked: its head out, two waiting
    assert dead_letters.purge(cli_actor(), [DeadLetterQueue().get("discard/order-0-0000")]) == 1
    wait_until(lambda: delivered_order(receiver, "/discard").get("order-0") == [
        "order-0-0001", "order-0-0002"])


def test_a_bad_ordering_key_is_refused_where_it_enters_and_dead_lettered_past_it(
        private, receiver, start_worker):
    from hookline import WebhookInputError, deliver

    EndpointRegistry().add("keyed", receiver.route("/keyed", always(Reply(204))), ordered=True)
    with pytest.raises(WebhookInputError, match="ordering key 'two words' is invalid"):
        send_webhook("keyed", "order.paid", {}, ordering_key="two words")
    start_worker("keyed", extra_env=env(private))
    deliver.delay("keyed", "order.paid", {}, event_id="bad-key", ordering_key="x" * 300)
    wait_until(lambda: DeadLetterQueue().get("keyed/bad-key") is not None)
    assert DeadLetterQueue().get("keyed/bad-key").reason == "malformed"
    assert receiver.requests_to("/keyed") == []


def test_a_worker_on_another_broker_refuses_to_start_while_an_endpoint_is_ordered(private):
    from tests.conftest import WorkerProcess

    EndpointRegistry().add("strict", "http://127.0.0.1:9/strict", ordered=True)
    process = WorkerProcess("elsewhere", extra_env={
        **env(private), "HOOKLINE_BROKER_URL": private.url.rsplit("/", 1)[0] + "/1"})
    assert process.process.wait(60) != 0
    output = process.output()
    process.stop()
    assert "endpoint 'strict' is ordered" in output and "HOOKLINE_BROKER_URL" in output
    assert " ready." not in output


def test_retry_after_and_an_open_breaker_hold_the_lines_in_order(private, receiver, start_worker):
    rng, lock = random.Random(3), threading.Lock()

    def behaviour(attempt: int) -> Reply:
        with lock:
            roll = rng.random()
        if attempt == 1 and roll < 0.15:
            return Reply(429, headers={"Retry-After": "1"})
        if attempt == 1 and roll < 0.3:
            return Reply(503)  # five in a row open the breaker (threshold 5 in the tests)
        return Reply(204)

    EndpointRegistry().add("held", receiver.route("/held", behaviour), ordered=True)
    start_worker("held", extra_env=env(private))
    sent = enqueue_keys("held", keys=5, per_key=12)
    wait_until(lambda: delivered_order(receiver, "/held") == sent, timeout=90,
               what=lambda: {k: len(v) for k, v in delivered_order(receiver, "/held").items()})
    assert any(r.status == 429 for r in receiver.requests_to("/held"))
    assert max(receiver.most_in_flight_by_key.values()) == 1
