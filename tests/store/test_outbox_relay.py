"""The outbox's relay on the real PostgreSQL, MariaDB and SQLite, and a real Redis: committed
rows reach the broker's queue under their own event ids, in order per line; a rolled-back row
never does; rows refused for good become dead letters without holding up the rest; two relays
never publish one row twice; a broker outage leaves the rows where they are, with one log line;
and the claim reads an index that stops at now."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from hookline.contrib.sqlalchemy import add_publication, add_webhook
from hookline.core import config
from hookline.outbox import sql
from hookline.outbox.database import UrlDatabase
from hookline.outbox.relay import Claimed, Outage, Relay
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import wait_until
from tests.store.test_event_ids import queued
from tests.support.sql import DIALECTS, TestDatabase, database


@pytest.fixture(scope="module", params=DIALECTS)
def shared_db(request, tmp_path_factory) -> Any:
    """One database per dialect for the module (made and dropped once: about half a second
    each on PostgreSQL and MariaDB)."""
    with database(request.param, tmp_path_factory.mktemp("outbox")) as made:
        yield made


@pytest.fixture
def db(shared_db: TestDatabase) -> TestDatabase:
    """The module's database of one dialect, its outbox emptied for this test."""
    with shared_db.engine.begin() as connection:
        connection.execute(text("DELETE FROM hookline_outbox"))
    return shared_db


def write(db: TestDatabase, count: int, endpoint_id: str = "shop", *, prefix: str = "e",
          key: str | None = None) -> list[str]:
    with Session(db.engine) as session, session.begin():
        return [add_webhook(session, endpoint_id, "order.created", {"n": n}, f"{prefix}-{n}",
                            ordering_key=key) for n in range(count)]


def test_committed_rows_reach_the_queue_under_their_own_ids_and_leave_the_table(
        db, quiet_redis) -> None:
    EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
    ids = write(db, 30)
    assert db.count() == 30
    relay = Relay(UrlDatabase(db.url), batch=8)
    assert relay.drain() == 30
    assert db.count() == 0
    messages = queued(quiet_redis)
    assert [kwargs["event_id"] for _, kwargs in messages] == ids  # in the order written
    assert messages[0][0] == ["shop", "order.created", {"n": 0}]
    assert relay.depth() == (0, None)


def test_a_rolled_back_transaction_leaves_no_row_and_sends_nothing(db, quiet_redis) -> None:
    EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
    with Session(db.engine) as session:
        with session.begin():
            add_webhook(session, "shop", "order.created", {"n": 1}, "kept")
        transaction = session.begin()
        add_webhook(session, "shop", "order.created", {"n": 2}, "rolled-back")
        transaction.rollback()
    assert Relay(UrlDatabase(db.url)).drain() == 1
    assert [kwargs["event_id"] for _, kwargs in queued(quiet_redis)] == ["kept"]


def test_rows_refused_for_good_are_dead_lettered_and_the_rows_behind_them_still_go(
        db, quiet_redis) -> None:
    EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
    with Session(db.engine) as session, session.begin():
        add_webhook(session, "nobody", "order.created", {"n": 0}, "to-nobody")
        add_publication(session, "no-app", "order.created", {"n": 1}, "to-no-app")
        add_webhook(session, "shop", "order.created", {"n": 2}, "behind")
    assert Relay(UrlDatabase(db.url)).drain() == 3
    assert db.count() == 0
    assert [kwargs["event_id"] for _, kwargs in queued(quiet_redis)] == ["behind"]
    found = {d.id: (d.reason, d.detail) for d in DeadLetterQueue().find()}
    assert found["nobody/to-nobody"][0] == "endpoint_removed"
    assert "no endpoint 'nobody'" in found["nobody/to-nobody"][1]
    assert found["app:no-app/to-no-app"][0] == "unpublishable"
    assert "no application 'no-app'" in found["app:no-app/to-no-app"][1]


def test_an_id_bound_to_other_content_is_a_conflict_dead_letter(db, quiet_redis) -> None:
    EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
    with Session(db.engine) as session, session.begin():
        add_webhook(session, "shop", "order.created", {"n": 1}, "same-id")
        add_webhook(session, "shop", "order.created", {"n": 2}, "same-id")
    assert Relay(UrlDatabase(db.url)).drain() == 2
    assert len(queued(quiet_redis)) == 1
    assert [d.reason for d in DeadLetterQueue().find()] == ["conflict"]


class Recorder:
    """A publish function that records what it was given (slowly, so relays overlap)."""

    def __init__(self, pause: float = 0.0) -> None:
        self.published: list[Claimed] = []
        self.lock = threading.Lock()
        self.pause = pause

    def __call__(self, rows: list[Claimed]) -> list[None]:
        for row in rows:
            time.sleep(self.pause)
            with self.lock:
                self.published.append(row)
        return [None] * len(rows)


def test_two_relays_side_by_side_publish_each_row_once_and_each_line_in_order(db) -> None:
    for key in ("a", "b", "c", "d"):
        write(db, 40, key=key, prefix=key)
    recorder = Recorder(pause=0.001)
    relays = [Relay(UrlDatabase(db.url), batch=7, publish=recorder) for _ in range(2)]
    threads = [threading.Thread(target=relay.drain) for relay in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    while relays[0].drain():  # a pass that met the other's claimed rows left them for later
        pass
    counts = Counter(row.event_id for row in recorder.published)
    assert len(counts) == 160 and set(counts.values()) == {1}
    for key in ("a", "b", "c", "d"):
        line = [row.event_id for row in recorder.published if row.ordering_key == key]
        assert line == [f"{key}-{n}" for n in range(40)]
    assert db.count() == 0


@pytest.mark.slow  # waits out the relay's backoff (about 4 s a dialect)
def test_a_broker_outage_keeps_the_rows_logs_one_line_and_they_go_when_it_is_back(
        db, quiet_redis, tmp_path, caplog) -> None:
    from tests.conftest import PrivateRedis

    server = PrivateRedis(tmp_path)
    client = server.start()
    config.configure({"REDIS_URL": server.url, "HOOKLINE_BROKER_URL": server.url,
                      "HOOKLINE_REDIS_TIMEOUT": "1"})
    try:
        EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
        server.stop()
        write(db, 5)
        relay = Relay(UrlDatabase(db.url), poll=0.01)
        with pytest.raises(Outage) as outage:
            relay.move()
        assert outage.value.side == "broker" and db.count() == 5
        caplog.set_level(logging.INFO, logger="hookline")
        passes = []
        move = relay.move
        relay.move = lambda: passes.append(time.monotonic()) or move()  # type: ignore[method-assign]
        thread = threading.Thread(target=relay.run)
        thread.start()
        wait_until(lambda: len(passes) >= 5, timeout=20)  # 0.1-0.2 s, then doubling
        unavailable = [r for r in caplog.records if "outbox.unavailable" in r.getMessage()]
        assert len(unavailable) == 1 and db.count() == 5
        gaps = [later - earlier for earlier, later in itertools.pairwise(passes)]
        assert gaps[-1] > 0.5 and gaps[-1] > gaps[0], gaps  # it backs off; it never spins
        client = server.start()
        wait_until(lambda: db.count() == 0, timeout=20)
        relay.stop()
        thread.join(10)
        assert db.count() == 0
        assert any("outbox.resumed" in r.getMessage() for r in caplog.records)
        assert client.llen("hookline") == 5
    finally:
        server.stop()


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_the_claim_reads_the_due_index_whatever_the_backlog(dialect, tmp_path) -> None:
    """The relay's own claim (hookline.outbox.sql), explained with 20,000 rows waiting and the
    statistics of a table that size: an index scan on (due_at, id) under the limit, neither a
    scan of the table nor a sort."""
    with database(dialect, tmp_path) as db, db.engine.begin() as connection:
        numbers = ("generate_series(1, 20000) AS n" if dialect == "postgresql" else
                   "(SELECT seq AS n FROM seq_1_to_20000) AS numbers")
        connection.execute(text(
            "INSERT INTO hookline_outbox (due_at, line, endpoint_id, event_id, event_type, "
            f"payload, digest) SELECT 1000 + n, 'e:shop', 'shop', CONCAT('e-', n), 't', "
            f"'{{}}', 'd' FROM {numbers}"))
        connection.execute(text("ANALYZE " + ("" if dialect == "postgresql" else "TABLE ")
                                + "hookline_outbox"))
        explained = connection.exec_driver_sql("EXPLAIN " + sql.claim(dialect),
                                               (1e12, 500)).fetchall()
    plan = "\n".join(" ".join(str(v) for v in row) for row in explained)
    if dialect == "postgresql":
        assert "Index Scan using hookline_outbox_due" in plan, plan
        assert "Seq Scan" not in plan and "Sort" not in plan, plan
    else:
        assert "hookline_outbox_due" in plan and "filesort" not in plan, plan
        assert " ALL " not in f" {plan} ", plan


def test_a_batch_publishes_the_message_send_webhook_would(db, quiet_redis) -> None:
    """The relay builds its batch's messages itself (one pipeline): the same headers, task id,
    arguments and shown size as ``send_webhook``'s message for the same event."""
    from hookline import send_webhook

    EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
    send_webhook("shop", "order.created", {"n": 1}, "direct", ordering_key="k")
    with Session(db.engine) as session, session.begin():
        add_webhook(session, "shop", "order.created", {"n": 1}, "relayed", ordering_key="k")
    Relay(UrlDatabase(db.url)).drain()
    direct, relayed = (json.loads(text) for text in reversed(quiet_redis.lrange("hookline", 0, -1)))
    assert set(direct["headers"]) == set(relayed["headers"])
    for name in ("task", "argsrepr", "hookline_claim", "hookline_endpoint"):
        assert direct["headers"][name] == relayed["headers"][name], name
    assert (direct["headers"]["id"], relayed["headers"]["id"]) == ("direct", "relayed")
    assert queued(quiet_redis)[1] == (["shop", "order.created", {"n": 1}], {
        **queued(quiet_redis)[0][1], "event_id": "relayed",
        "enqueued_at": queued(quiet_redis)[1][1]["enqueued_at"]})
