"""The outbox under faults, end to end: rows committed in the real PostgreSQL, MariaDB and
SQLite, a worker whose relay moves them to its private Redis, a loopback receiver.

- A web process killed with -9 right after its commit: its event is delivered.
- Redis shut down, and Redis paused (SIGSTOP): rows written meanwhile (no Redis on that path)
  are all delivered once it is back, each under one webhook-id, within 15 s of its return.
- A relay killed with -9 between its publish and its removal: the rows go again and the
  receiver sees each event once (the event id is the idempotency key).
- A relay paused mid-pass (SIGSTOP) holding its claim: its rows go to the worker's relay once
  the hold runs out (HOOKLINE_OUTBOX_HOLD), each delivered once; the paused relay, resumed,
  changes nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session

from examples.receiver import Reply, always
from hookline.contrib.sqlalchemy import add_webhook
from hookline.store import delivery
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import ROOT, PrivateRedis, wait_until
from tests.support.sql import DIALECTS, TestDatabase, database

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")


@pytest.fixture(params=DIALECTS)
def db(request, tmp_path) -> Any:
    with database(request.param, tmp_path) as made:
        yield made


@pytest.fixture
def redis_server(tmp_path) -> Any:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def write(db: TestDatabase, prefix: str, count: int) -> list[str]:
    with Session(db.engine) as session, session.begin():
        return [add_webhook(session, "shop", "order.created", {"n": n}, f"{prefix}-{n}")
                for n in range(count)]


def relay_worker(start_worker, server: PrivateRedis, db: TestDatabase, **env: str) -> Any:
    return start_worker("outbox", concurrency=8, extra_env={
        "REDIS_URL": server.url, "HOOKLINE_OUTBOX": "on", "HOOKLINE_OUTBOX_URL": db.url,
        "HOOKLINE_REDIS_TIMEOUT": "2", **env})


def delivered_once(receiver, client, ids: list[str]) -> None:
    """Every event delivered, nothing left to deliver, and the receiver saw each id once."""
    wait_until(lambda: all(delivery.delivered(client, [("shop", e) for e in ids])), timeout=30,
               what=lambda: f"{sum(delivery.delivered(client, [('shop', e) for e in ids]))} "
                            f"of {len(ids)} delivered")
    wait_until(lambda: client.llen("hookline") == 0, timeout=30)
    seen = Counter(r.webhook_id for r in receiver.received)
    assert {e: seen[e] for e in ids} == dict.fromkeys(ids, 1)


def emptied(db: TestDatabase) -> None:
    """The outbox ends empty. The relay removes a row after publishing it, so a worker may
    have delivered the event before the removal commits: wait for it."""
    wait_until(lambda: db.count() == 0, timeout=30, what=lambda: f"{db.count()} rows left")


def test_rows_written_while_redis_is_down_or_paused_are_delivered_once_when_it_is_back(
        db, redis_server, receiver, start_worker) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    EndpointRegistry(client).add("shop", receiver.route("/shop", always(Reply(204))))
    relay_worker(start_worker, redis_server, db)
    ids = write(db, "before", 10)
    delivered_once(receiver, client, ids)

    redis_server.shutdown()
    started = time.monotonic()
    ids += write(db, "down", 20)  # no Redis on the write path
    assert time.monotonic() - started < 2.0
    client = redis_server.start()
    back = time.monotonic()
    delivered_once(receiver, client, ids)
    assert time.monotonic() - back <= 15.0

    assert redis_server.process is not None
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        ids += write(db, "paused", 20)
    finally:
        time.sleep(3)  # paused for a while, as a stalled host is, with the rows waiting
        redis_server.process.send_signal(signal.SIGCONT)
    back = time.monotonic()
    delivered_once(receiver, client, ids)
    assert time.monotonic() - back <= 15.0
    emptied(db)


def victim(db: TestDatabase, server: PrivateRedis, mode: str, after: int) -> subprocess.Popen:
    env = {**os.environ, "REDIS_URL": server.url, "HOOKLINE_BROKER_URL": server.url,
           "HOOKLINE_OUTBOX_HOLD": "3"}
    return subprocess.Popen([sys.executable, "-m", "tests.support.relay_victim", db.url,
                             str(after), mode], cwd=ROOT, env=env)


def test_a_relay_killed_between_its_publish_and_its_removal_delivers_each_event_once(
        db, redis_server, receiver, start_worker) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    EndpointRegistry(client).add("shop", receiver.route("/shop", always(Reply(204))))
    ids = write(db, "k", 20)
    killed = victim(db, redis_server, "kill", 5)
    assert killed.wait(60) == -signal.SIGKILL
    assert db.count() == 20  # published 5, removed none
    assert client.llen("hookline") == 5
    relay_worker(start_worker, redis_server, db, HOOKLINE_OUTBOX_HOLD="3")
    delivered_once(receiver, client, ids)
    emptied(db)


def test_a_relay_paused_mid_pass_lets_go_of_its_rows_after_the_hold(
        db, redis_server, receiver, start_worker) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    EndpointRegistry(client).add("shop", receiver.route("/shop", always(Reply(204))))
    ids = write(db, "p", 20)
    paused = victim(db, redis_server, "stop", 5)
    try:
        wait_until(lambda: client.llen("hookline") == 5, timeout=30)
        relay_worker(start_worker, redis_server, db, HOOKLINE_OUTBOX_HOLD="3")
        delivered_once(receiver, client, ids)  # the hold ran out: the worker's relay took them
        emptied(db)
        paused.send_signal(signal.SIGCONT)
        paused.wait(30)  # it finds its session gone (or its lease taken), and ends
        wait_until(lambda: client.llen("hookline") == 0, timeout=30)
        seen = Counter(r.webhook_id for r in receiver.received)
        assert {e: seen[e] for e in ids} == dict.fromkeys(ids, 1)
    finally:
        if paused.poll() is None:
            paused.send_signal(signal.SIGCONT)
            paused.kill()


WEB_PROCESS = """
import os, signal, sys
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from hookline.contrib.sqlalchemy import add_webhook
with Session(create_engine(sys.argv[1])) as session, session.begin():
    add_webhook(session, "shop", "order.created", {"n": 1}, "committed-then-killed")
os.kill(os.getpid(), signal.SIGKILL)  # right after the commit: no on-commit step ever runs
"""


def test_a_web_process_killed_right_after_its_commit_loses_no_event(
        db, redis_server, receiver, start_worker) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    EndpointRegistry(client).add("shop", receiver.route("/shop", always(Reply(204))))
    killed = subprocess.run([sys.executable, "-c", WEB_PROCESS, db.url], cwd=ROOT, timeout=60,
                            env={**os.environ, "HOOKLINE_OUTBOX": "on",
                                 "REDIS_URL": redis_server.url})
    assert killed.returncode == -signal.SIGKILL and db.count() == 1
    relay_worker(start_worker, redis_server, db)
    delivered_once(receiver, client, ["committed-then-killed"])
    emptied(db)
