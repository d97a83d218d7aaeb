"""A Redis restart from its AOF in the middle of a run strands no delivery.

One worker (threads, 16 slots) on a private Redis with AOF on, 500 events to two endpoints,
one of them flaky (503 on each event's first attempt, so retries are scheduled), and Redis
shut down and started again from its AOF mid-run. Every event must end delivered or
dead-lettered, and once Redis is back the counts Redis keeps for the worker (an endpoint's
attempts in flight, its waiting list, its wake flag) must agree with what the worker holds:
nothing, once the run is over. The same with a capped endpoint and an ordered one.
"""

from __future__ import annotations

import shutil

import pytest

from examples.receiver import Reply, always, fail_first
from hookline.store import delivery, keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import PrivateRedis, wait_until
from tests.support.queue import enqueue

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")

FAST_RETRIES = {"initial_backoff": 1, "max_backoff": 2, "jitter": 0.5}


def settled(client, pairs: list[tuple[str, str]]) -> int:
    """How many (endpoint, event) pairs ended delivered or dead-lettered."""
    done = delivery.delivered(client, pairs)
    dead = DeadLetterQueue(client).get_many(f"{endpoint}/{event}" for endpoint, event in pairs)
    return sum(1 for (endpoint, event), ok in zip(pairs, done, strict=True)
               if ok or f"{endpoint}/{event}" in dead)


def counts(client, endpoint_id: str) -> dict[str, object]:
    """What Redis counts for the workers at one endpoint."""
    fields = client.hmget(keys.endpoint_key(endpoint_id), "inflight", "waiting", "wake",
                          "order_waiting")
    return {"inflight": int(fields[0] or 0), "leases": client.zcard(keys.leases_key(endpoint_id)),
            "waiting_flag": fields[1], "wake": fields[2],
            "waiting_list": client.llen(keys.fair_waiting_key(endpoint_id)),
            "order_waiting": int(fields[3] or 0),
            "order_heads": client.hlen(keys.order_heads_key(endpoint_id))}


def nothing_held(client, endpoint_id: str) -> bool:
    """Every count at the endpoint says nothing is held: the run is over."""
    found = counts(client, endpoint_id)
    return (found["inflight"] == found["leases"] == found["waiting_list"] == 0
            and found["order_waiting"] == found["order_heads"] == 0)


def run_restart(tmp_path, receiver, start_worker, *, ordering_keys: int = 0,
                **flaky_options) -> None:
    server = PrivateRedis(tmp_path)
    client = server.start()
    try:
        registry = EndpointRegistry(client)
        steady = registry.add("steady", receiver.route(
            "/steady", always(Reply(204, delay=0.05))))
        flaky = registry.add("flaky", receiver.route(
            "/flaky", fail_first(1, Reply(503, delay=0.05))),
            retry_policy=FAST_RETRIES, **flaky_options)
        worker = start_worker("restart", concurrency=16, extra_env={
            "REDIS_URL": server.url, "HOOKLINE_BREAKER_THRESHOLD": "1000",
            "CELERY_VISIBILITY_TIMEOUT": "60"})
        pairs = [(steady.id, e) for e in enqueue(client, steady.id, 250, prefix="s")]
        pairs += [(flaky.id, e) for e in enqueue(client, flaky.id, 250, prefix="f",
                                                 ordering_keys=ordering_keys)]
        assert receiver.wait_for(lambda got: len(got) >= 120, timeout=30)
        server.shutdown()  # mid-run: attempts in flight, retries scheduled
        # Away for a few seconds, as a restart in production is: the worker's settles and
        # heartbeats fail meanwhile.
        wait_until(lambda: worker.output().count("worker.heartbeat_failed") >= 3, timeout=30)
        client = server.start()
        wait_until(lambda: settled(client, pairs) == len(pairs), timeout=120,
                   what=lambda: (f"{settled(client, pairs)} of {len(pairs)} settled; "
                                 f"steady {counts(client, steady.id)}, "
                                 f"flaky {counts(client, flaky.id)}"))
        # Once Redis is back the counts agree with what the worker holds: nothing, now.
        for endpoint in (steady, flaky):
            wait_until(lambda e=endpoint: nothing_held(client, e.id), timeout=30,
                       what=lambda e=endpoint: counts(client, e.id))
    finally:
        server.stop()


def test_a_redis_restart_mid_run_strands_no_delivery(tmp_path, receiver, start_worker):
    run_restart(tmp_path, receiver, start_worker)


def test_a_redis_restart_strands_nothing_at_a_capped_endpoint(tmp_path, receiver, start_worker):
    run_restart(tmp_path, receiver, start_worker, max_in_flight=4)


def test_a_redis_restart_strands_nothing_at_an_ordered_endpoint(tmp_path, receiver,
                                                                start_worker):
    # 25 keys of 10 events each: one at a time per key, each retried once.
    run_restart(tmp_path, receiver, start_worker, ordered=True, ordering_keys=25)
