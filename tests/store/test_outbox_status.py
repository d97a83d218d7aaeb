"""What operators see of the outbox (HOOKLINE_OUTBOX=on), read from a real database: the rows
waiting and the oldest one's age in ``hookline stats``, ``hookline outbox status``, the
console's overview and the ``hookline metrics`` gauges; an unreadable database is said, not
fatal; with the outbox off nothing of it shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from sqlalchemy.orm import Session

from hookline.contrib.sqlalchemy import add_webhook
from hookline.core import config
from hookline.outbox.status import OutboxCollector, outbox_depth
from hookline.service.actor import cli_actor
from hookline.service.stats import overview, stats_snapshot
from hookline.transport.gauges import registry
from tests.support.cli import fails, json_out, succeeds
from tests.support.console import Browser, console
from tests.support.sql import database


@pytest.fixture
def outbox(tmp_path, quiet_redis) -> Iterator[Any]:
    """The outbox on, on a SQLite database with three rows written a while ago."""
    with database("sqlite", tmp_path) as db:
        with Session(db.engine) as session, session.begin():
            for n in range(3):
                add_webhook(session, "shop", "order.created", {"n": n}, f"e-{n}")
        with db.engine.begin() as connection:
            connection.exec_driver_sql("UPDATE hookline_outbox SET due_at = due_at - 90")
        url = quiet_redis.connection_pool.connection_kwargs
        redis_url = f"redis://127.0.0.1:{url['port']}/{url['db']}"
        env = {"REDIS_URL": redis_url, "HOOKLINE_BROKER_URL": redis_url,
               "HOOKLINE_OUTBOX": "on", "HOOKLINE_OUTBOX_URL": db.url}
        config.configure(env)
        yield env


def test_depth_and_age_of_the_oldest_row_in_stats_overview_and_gauges(outbox) -> None:
    found = outbox_depth()
    assert found is not None and found.waiting == 3 and found.error is None
    assert 89 <= found.oldest_age <= 120
    assert "sqlite" in found.database
    assert stats_snapshot(cli_actor()).outbox.waiting == 3
    assert overview(cli_actor()).outbox.waiting == 3
    text = generate_latest(registry(engine=False, collectors=[OutboxCollector()])).decode()
    assert "hookline_outbox_up 1.0" in text and "hookline_outbox_rows 3.0" in text
    age = float(text.split("\nhookline_outbox_oldest_age_seconds ")[1].split()[0])
    assert 89 <= age <= 120


def test_the_console_overview_shows_the_outbox(outbox) -> None:
    page = Browser(console()).get("/overview/fragment").get_data(as_text=True)
    assert 'data-figure="outbox"' in page and 'id="overview-outbox">3<' in page


def test_the_command_line_says_how_many_rows_wait(outbox) -> None:
    assert json_out("outbox", "status")["waiting"] == 3
    assert json_out("stats")["outbox"]["waiting"] == 3
    assert "3 row(s) waiting, the oldest due 1m" in succeeds("stats").stdout
    assert "outbox: 3 row(s) waiting, the oldest" in succeeds("outbox", "status").stdout


def test_an_unreadable_database_is_said_in_one_line_and_the_rest_still_shows(
        outbox, tmp_path) -> None:
    config.configure({**outbox, "HOOKLINE_OUTBOX_URL": f"sqlite:///{tmp_path}/none/x.db"})
    found = outbox_depth()
    assert found is not None and found.waiting is None and "database" in found.error
    assert stats_snapshot(cli_actor()).outbox.waiting is None
    text = generate_latest(registry(engine=False, collectors=[OutboxCollector()])).decode()
    assert "hookline_outbox_up 0.0" in text and "hookline_outbox_rows" not in text
    shown = fails("outbox", "status")
    assert shown.stderr.count("\n") == 1 and "cannot be read" in shown.stderr
    assert "outbox" in succeeds("stats").stdout  # the rest of the screen still shows


def test_with_the_outbox_off_nothing_of_it_shows(quiet_redis) -> None:
    assert outbox_depth() is None
    assert stats_snapshot(cli_actor()).outbox is None
    assert generate_latest(registry(engine=False, collectors=[OutboxCollector()])) == b""
