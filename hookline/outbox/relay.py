"""The relay: committed outbox rows to the broker, each under its own event id.

One pass (:meth:`Relay.move`) claims up to a batch of due rows (``hookline.outbox.sql``), keeps
a line's rows in the order they were written, publishes each as ``send_webhook`` or ``publish``
would (the same event id and content digest, so a row published twice is delivered once), and
removes what it published. A row the broker's side refuses for good (an unknown endpoint or
application, an event id bound to other content, a schema) becomes a dead letter with its
reason and is removed: it never holds up the rows behind it.

While the broker (or the database) is away the rows stay where they are. :meth:`Relay.run`
then backs off, exponentially with jitter up to ``MAX_BACKOFF``, and logs one line when the
outage starts and one when it ends, never one per row. A relay killed between its publish and
its removal publishes those rows again: the event ids make the second copy a duplicate that the
workers deliver once.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from hookline.core import tracing
from hookline.core.config import Settings
from hookline.core.env import ConfigError
from hookline.core.errors import (
    EventIdConflict,
    RedisUnavailable,
    UnregisteredEndpoint,
    WebhookInputError,
)
from hookline.core.logs import log_event
from hookline.delivery.prepared import (
    PreparedEvent,
    enqueue_prepared,
    enqueue_prepared_many,
    raise_refused,
    refusal_of,
)
from hookline.delivery.publisher import claims_on_publish
from hookline.delivery.publishing import publish
from hookline.outbox import sql
from hookline.outbox.database import Database, database_from_environment
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.identity import claims
from hookline.transport.errors import OperationalError

#: Seconds of the first wait after a failed pass, and the longest wait.
FIRST_BACKOFF = 0.2
MAX_BACKOFF = 5.0
#: Seconds a SQLite claim holds its rows (a relay that dies frees them after this), unless
#: HOOKLINE_OUTBOX_HOLD says otherwise.
SQLITE_LEASE = 60.0


class Outage(Exception):
    """The broker or the database did not take a pass's work; ``side`` says which."""

    def __init__(self, side: str, error: BaseException) -> None:
        super().__init__(f"{side}: {type(error).__name__}")
        self.side = side
        self.error = error


@dataclass(frozen=True)
class Claimed:
    """A row as a claim reads it (``sql.SELECTED``)."""

    id: int
    event_id: str
    event_type: str
    payload: str
    digest: str
    endpoint_id: str | None
    app_id: str | None
    channels: str | None
    deadline: float | None
    ordering_key: str | None
    line: str
    #: The trace the row was written in (None: none, or traces off where it was written).
    traceparent: str | None = None


def in_line_order(rows: list[Claimed], earlier: list[tuple[int, str]]) -> list[Claimed]:
    """The claimed rows that may leave now, in id order: a line's rows stop at the first one
    that has an earlier row of its line outside the claim (``earlier``: ids and lines of rows
    below the claim's ids, claimed or not). Pure."""
    mine = {row.id for row in rows}
    first_outside: dict[str, int] = {}
    for row_id, line in earlier:
        if row_id not in mine and row_id < first_outside.get(line, row_id + 1):
            first_outside[line] = row_id
    return [row for row in sorted(rows, key=lambda r: r.id)
            if row.id < first_outside.get(row.line, row.id + 1)]


def publish_rows(rows: list[Claimed]) -> list[WebhookInputError | None]:
    """Publish rows in order, each as ``send_webhook`` (an endpoint's) or ``publish`` (an
    application's) would; returns, per row, the refusal of the broker's side (None:
    published). A run of endpoints' rows goes in one pipeline where the broker is Hookline's
    own Redis (``enqueue_prepared_many``). Raises when the broker is away."""
    found: list[WebhookInputError | None] = []
    run: list[Claimed] = []
    for row in rows:
        if row.app_id:
            found += _publish_run(run)
            run = []
            found.append(refusal_of(partial(_publish_application, row)))
        else:
            run.append(row)
    return found + _publish_run(run)


def _publish_run(rows: list[Claimed]) -> list[WebhookInputError | None]:
    if not rows:
        return []
    if claims_on_publish():
        return enqueue_prepared_many([_prepared(row, unclaimed=True) for row in rows])
    # The broker is not a Redis that claims on publish: claim first, as send_webhook does.
    return [refusal_of(partial(_claim_then_enqueue, row)) for row in rows]


def _prepared(row: Claimed, *, unclaimed: bool) -> PreparedEvent:
    assert row.endpoint_id is not None
    return PreparedEvent(row.endpoint_id, row.event_type, json.loads(row.payload), row.event_id,
                         row.deadline, len(row.payload.encode()), row.digest,
                         unclaimed=unclaimed, ordering_key=row.ordering_key,
                         traceparent=row.traceparent)


def _claim_then_enqueue(row: Claimed) -> None:
    assert row.endpoint_id is not None
    raise_refused(claims().claim(row.endpoint_id, row.event_id, row.digest, bind=True),
                  row.endpoint_id, row.event_id)
    enqueue_prepared(_prepared(row, unclaimed=False))


def _publish_application(row: Claimed) -> None:
    assert row.app_id is not None
    channels = json.loads(row.channels) if row.channels is not None else None
    with tracing.continued(row.traceparent):  # publish's span joins the writer's trace
        publish(row.app_id, row.event_type, json.loads(row.payload), event_id=row.event_id,
                channels=channels, deadline=row.deadline, ordering_key=row.ordering_key)


def dead_letter_for(row: Claimed, error: WebhookInputError) -> DeadLetter:
    """The dead letter of a row the broker's side refused for good."""
    if isinstance(error, EventIdConflict):
        reason = "conflict"
    elif isinstance(error, UnregisteredEndpoint):
        reason = "endpoint_removed"
    else:
        reason = "unpublishable"
    target = row.endpoint_id or f"app:{row.app_id}"
    return DeadLetter(endpoint_id=target, event_id=row.event_id, event_type=row.event_type,
                      payload=json.loads(row.payload), reason=reason,
                      detail=f"from the outbox: {error}", ordering_key=row.ordering_key)


#: Errors that mean the broker's side is away (the rows stay), not that a row is bad.
BROKER_AWAY = (RedisUnavailable, RedisError, OperationalError, OSError)


class Relay:
    """Moves committed rows of one database to the broker (module docstring)."""

    def __init__(self, database: Database, *, batch: int = 500, poll: float = 0.05,
                 lease: float = SQLITE_LEASE,
                 publish: Callable[[list[Claimed]], list[WebhookInputError | None]] = publish_rows,
                 dead_letters: Callable[[], DeadLetterQueue] = DeadLetterQueue) -> None:
        self.database = database
        self.batch = batch
        self.poll = poll
        self.lease = lease
        self._publish = publish
        self._dead_letters = dead_letters
        self._stop = threading.Event()

    # -- one pass ------------------------------------------------------------------------------

    def move(self) -> int:
        """One pass: rows published or dead-lettered and removed (0: none was due). Raises
        :class:`Outage` when the broker or the database is away; what was published before is
        removed first where the database allows."""
        if self.database.dialect == "sqlite":
            return self._move_leased()
        try:
            with self.database.transaction() as cursor:
                rows = [Claimed(*r) for r in cursor.execute(sql.claim(self.database.dialect),
                                                            (time.time(), self.batch))]
                ready = self._in_order(cursor, rows)
                done, outage = self._publish_all(ready)
                if done:
                    cursor.execute(sql.remove(len(done)), done)
        except Outage:
            raise
        except Exception as exc:
            self.database.reset()
            raise Outage("database", exc) from exc
        if outage is not None:
            raise outage
        return len(done)

    def _move_leased(self) -> int:
        """SQLite: the claim is a lease committed at once; the publish runs outside any
        transaction (it never holds the writer's lock), then the removal."""
        token = uuid.uuid4().hex
        now = time.time()
        try:
            with self.database.transaction() as cursor:
                rows = [Claimed(*r) for r in cursor.execute(
                    sql.claim("sqlite"), (token, now + self.lease, now, now, self.batch))]
                ready = self._in_order(cursor, rows)
        except Exception as exc:
            self.database.reset()
            raise Outage("database", exc) from exc
        done, outage = self._publish_all(ready)
        left = [row.id for row in rows if row.id not in set(done)]
        try:
            with self.database.transaction() as cursor:
                if done:
                    cursor.execute(sql.remove(len(done)), done)
                if left:
                    cursor.execute(sql.release(len(left)), [token, *left])
        except Exception as exc:  # the lease runs out: they go again (delivered once)
            self.database.reset()
            raise Outage("database", exc) from exc
        if outage is not None:
            raise outage
        return len(done)

    def _in_order(self, cursor: Any, rows: list[Claimed]) -> list[Claimed]:
        if not rows:
            return rows
        lines = sorted({row.line for row in rows})
        earlier = cursor.execute(sql.earlier_in_lines(len(lines)),
                                 [*lines, max(row.id for row in rows)])
        return in_line_order(rows, [(int(i), line) for i, line in earlier])

    def _publish_all(self, rows: list[Claimed]) -> tuple[list[int], Outage | None]:
        """Publish in order; a row refused for good becomes a dead letter. Returns the ids to
        remove and the outage, if the broker's side was away (the rows from there stay)."""
        try:
            refusals = self._publish(rows)
        except BROKER_AWAY as exc:
            return [], Outage("broker", exc)
        done: list[int] = []
        for row, refusal in zip(rows, refusals, strict=True):
            if refusal is not None:
                try:
                    self._dead_letters().add(dead_letter_for(row, refusal))
                except BROKER_AWAY as away:
                    return done, Outage("broker", away)
                log_event("outbox.dead_lettered", level=logging.WARNING,
                          endpoint_id=row.endpoint_id or f"app:{row.app_id}",
                          event_id=row.event_id, error=type(refusal).__name__)
            done.append(row.id)
        return done, None

    def depth(self) -> tuple[int, float | None]:
        """The rows waiting, and the oldest one's due time (None when there is none)."""
        try:
            with self.database.transaction() as cursor:
                count, oldest = cursor.execute(sql.depth())[0]
        except Exception as exc:
            self.database.reset()
            raise Outage("database", exc) from exc
        return int(count), None if oldest is None else float(oldest)

    def drain(self) -> int:
        """Move every row due now, pass after pass (``hookline outbox relay --once``)."""
        moved = 0
        while True:
            count = self.move()
            moved += count
            if count < self.batch:
                return moved

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """Move rows until :meth:`stop`: at once again after a full batch, after ``poll``
        seconds otherwise, and with backoff while something is away."""
        failures = 0
        away_since = 0.0
        while not self._stop.is_set():
            try:
                moved = self.move()
            except Outage as outage:
                if failures == 0:
                    away_since = time.monotonic()
                    log_event("outbox.unavailable", level=logging.WARNING, side=outage.side,
                              database=self.database.describe(),
                              error=type(outage.error).__name__,
                              detail="the rows stay in the outbox; trying again with backoff")
                failures += 1
                self._stop.wait(backoff(failures))
                continue
            if failures:
                log_event("outbox.resumed", seconds=round(time.monotonic() - away_since, 1),
                          database=self.database.describe())
                failures = 0
            if moved < self.batch:
                self._stop.wait(self.poll)

    def start(self) -> Relay:
        threading.Thread(target=self.run, name="hookline-outbox-relay", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def backoff(failures: int, *, first: float = FIRST_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """Seconds to wait after ``failures`` failed passes in a row: doubling from ``first`` up to
    ``cap``, each drawn between half and all of it (jitter, so relays do not beat together)."""
    ceiling = min(cap, first * 2 ** max(0, failures - 1))
    return ceiling / 2 + random.random() * ceiling / 2


def relay_from_settings(config: Settings) -> Relay:
    """The relay the settings describe (``HOOKLINE_OUTBOX_*``); ``ConfigError`` when no
    database is named."""
    database = database_from_environment(config.outbox_url, config.outbox_database,
                                         hold=config.outbox_hold)
    if database is None:
        raise ConfigError("HOOKLINE_OUTBOX is on but the relay has no database: set "
                          "HOOKLINE_OUTBOX_URL, or DJANGO_SETTINGS_MODULE to the host's Django "
                          "settings")
    return Relay(database, batch=config.outbox_batch, poll=config.outbox_poll,
                 lease=config.outbox_hold)
