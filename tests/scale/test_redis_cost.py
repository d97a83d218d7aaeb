"""What a delivery costs Redis on the Redis broker (issue 13, items 4 and 5), counted with
``INFO commandstats`` (which counts the commands Lua scripts run too) on a Redis server of the
test's own, with real worker processes and a real receiver.

- A plain successful delivery with every gate on (idempotency, breaker, rate limit, attempt
  history), one at a time so each also pays for waking its idle worker: at most 34 commands
  (it was 56 with the stream doorbell, LINDEX per queue, INCR + EXPIRE, MULTI/EXEC acks...;
  ``python -m bench.redis_cost`` measures the same and more).
- Six idle workers: a message wakes one of them, which takes it and waits again, so the
  consume script runs about once per message, not once per idle worker.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
import redis

from examples.receiver import Reply, always
from hookline import deliver
from hookline.core.config import configure
from hookline.store.delivery import delivered
from hookline.store.endpoints import EndpointRegistry
from hookline.transport.records import held_count
from tests.conftest import PrivateRedis, wait_until

pytestmark = pytest.mark.scale

#: Commands per delivery, one event at a time (measured 31.8 to 31.9 on 2026-12-01; 33.2 with the
#: event log on 2026-12-04, whose write costs 6 commands, its upkeep amortized: piece_log.lua).
MOST_COMMANDS = 34


@pytest.fixture
def own_redis(tmp_path) -> Iterator[tuple[str, redis.Redis]]:
    """A redis-server for this test alone (its command counts are the test's), which this
    process publishes to as well."""
    server = PrivateRedis(tmp_path)
    client = server.start()
    configure({"REDIS_URL": server.url})
    try:
        yield server.url, client
    finally:
        configure()
        client.close()
        server.stop()


def calls(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in client.info("commandstats").items()}


def idle(client: redis.Redis, workers: int) -> bool:
    """Every worker's consumer (BLMPOP) and releaser (BLPOP) blocked, nothing queued or
    unacked."""
    blocked = sum(c["cmd"] in ("blmpop", "blpop") for c in client.client_list())
    return (blocked >= 2 * workers and not client.llen("hookline")
            and not held_count(client))


def deliver_one_at_a_time(client: redis.Redis, endpoint_id: str, prefix: str, count: int,
                          workers: int) -> None:
    for n in range(count):
        event_id = f"{prefix}-{n}"
        deliver.delay(endpoint_id, "order.paid", {"n": n}, event_id=event_id)
        wait_until(lambda e=event_id: delivered(client, [(endpoint_id, e)])[0]
                   and idle(client, workers), timeout=20)


def test_a_delivery_with_every_gate_on_costs_at_most_34_redis_commands(
        own_redis, receiver, start_worker):
    url, client = own_redis
    endpoint = EndpointRegistry(client).add("cost", receiver.url("/cost"), rate="1000/s",
                                            burst=1000)
    start_worker("cost", concurrency=4, extra_env={"REDIS_URL": url})
    deliver_one_at_a_time(client, endpoint.id, "warm", 5, 1)  # scripts loaded, pools open
    client.config_resetstat()
    events = 60
    deliver_one_at_a_time(client, endpoint.id, "evt", events, 1)
    counted = calls(client)
    for own in ("info", "config|resetstat", "client|list", "llen", "hlen", "exists"):
        counted.pop(own, None)  # this test's polling
    per_delivery = sum(counted.values()) / events
    assert len(receiver.requests_to("/cost")) == events + 5
    assert per_delivery <= MOST_COMMANDS, f"{per_delivery:.1f} commands per delivery: {counted}"
    assert counted.get("evalsha", 0) / events <= 3.5, counted  # consume, admit, settle


def test_a_message_wakes_one_of_six_idle_workers(own_redis, receiver, start_worker):
    url, client = own_redis
    if int(client.info("server")["redis_version"].split(".")[0]) < 7:
        pytest.skip("counts consume calls by LMPOP, which consume.lua uses from Redis 7.0")
    endpoint = EndpointRegistry(client).add("wake", receiver.url("/wake"))
    for number in range(6):
        start_worker(f"wake{number}", concurrency=2, extra_env={"REDIS_URL": url})
    deliver_one_at_a_time(client, endpoint.id, "warm", 6, 6)
    client.config_resetstat()
    events = 30
    deliver_one_at_a_time(client, endpoint.id, "evt", events, 6)
    # LMPOP runs once in each consume call that takes a message or finds none: one per
    # message, and one per blocking timeout (1 s) of a worker no message woke meanwhile (none
    # when events come quicker than every 1/6 s; a slow machine may see some). Waking every
    # idle worker would make six or more per message.
    consumes = calls(client).get("lmpop", 0)
    assert len(receiver.requests_to("/wake")) == events + 6
    assert events <= consumes <= 3 * events, f"{consumes} consume calls for {events} messages"


def test_a_delivered_event_is_acknowledged_in_its_settle(own_redis, receiver, start_worker):
    """The settle that marks the event done removes the message's unacked record in the same
    script: no ZREM of the worker's own goes to Redis for a delivered event (MONITOR tells a
    script's commands from a client's), and nothing is left unacknowledged. A failed attempt
    is not acknowledged there: its message is parked for the retry first."""
    url, client = own_redis
    endpoint = EndpointRegistry(client).add("acked", receiver.url("/acked"))
    failing = EndpointRegistry(client).add(
        "failing", receiver.route("/failing", always(Reply(status=500))))
    start_worker("acked", concurrency=4, extra_env={"REDIS_URL": url})
    deliver_one_at_a_time(client, endpoint.id, "warm", 3, 1)
    seen: list[tuple[str, str]] = []
    # The watcher reads until it meets this ECHO: everything sent before it is read.
    token = f"end-of-watch-{os.getpid()}"

    def watch() -> None:
        with client.monitor() as monitor:
            ready.set()
            while (entry := monitor.next_command())["command"] != f"ECHO {token}":
                seen.append((entry["command"].split(" ")[0].upper(), entry["client_type"]))

    ready = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert ready.wait(5)
    events = 10
    deliver_one_at_a_time(client, endpoint.id, "evt", events, 1)
    deliver.delay(failing.id, "order.paid", {"n": 0}, event_id="fails")
    wait_until(lambda: client.zcard("hookline:{schedule}:due") == 1 and idle(client, 1),
               timeout=20)
    client.echo(token)
    watcher.join(10)
    assert not watcher.is_alive()
    own_zrems = [entry for entry in seen if entry == ("ZREM", "tcp")]
    script_zrems = [entry for entry in seen if entry == ("ZREM", "lua")]
    assert len(receiver.requests_to("/acked")) == events + 3
    assert held_count(client) == 0
    # The failed attempt's message: parked (a script), then acknowledged by its own ZREM.
    assert len(own_zrems) == 1, seen
    assert len(script_zrems) >= events, seen
