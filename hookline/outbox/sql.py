"""The relay's SQL, per dialect: ``postgresql``, ``mysql`` (MySQL 8, MariaDB 10.6) and
``sqlite``. Parameters are written ``%s`` (``hookline.outbox.database`` turns them into the
driver's style).

- **The claim** takes due rows by due time, oldest first, on the index ``(due_at, id)``: the
  scan stops at now and at the batch's size, so its cost does not grow with the backlog.
  PostgreSQL and MySQL lock the rows (``FOR UPDATE SKIP LOCKED``) in a transaction that lasts
  until they are removed: a relay that dies lets go of them with its connection, and another
  relay skips them meanwhile. SQLite has no row locks and one writer at a time, so a claim is a
  lease, written and committed at once (``claim``, ``claimed_until``): a relay that dies holds
  its rows until the lease runs out.
- **The line check** keeps a line's rows in the order they were written: a row leaves only when
  no earlier row of its line is still in the table outside this claim.
- **The removal** deletes the rows published, by id.
"""

from __future__ import annotations

from hookline.outbox.rows import TABLE

#: The dialects the relay knows.
DIALECTS = ("postgresql", "mysql", "sqlite")
#: What a claim reads of a row, in this order (``hookline.outbox.relay.Claimed``).
SELECTED = ("id", "event_id", "event_type", "payload", "digest", "endpoint_id", "app_id",
            "channels", "deadline", "ordering_key", "line", "traceparent")
_COLUMNS = ", ".join(SELECTED)


def claim(dialect: str) -> str:
    """Take up to ``limit`` due rows. Parameters: PostgreSQL and MySQL ``(now, limit)``;
    SQLite ``(claim, lease end, now, now, limit)``."""
    if dialect == "sqlite":
        return (f"UPDATE {TABLE} SET claim = %s, claimed_until = %s WHERE id IN ("
                f"SELECT id FROM {TABLE} WHERE due_at <= %s AND (claimed_until IS NULL OR "
                f"claimed_until < %s) ORDER BY due_at, id LIMIT %s) RETURNING {_COLUMNS}")
    return (f"SELECT {_COLUMNS} FROM {TABLE} WHERE due_at <= %s ORDER BY due_at, id "
            f"LIMIT %s FOR UPDATE SKIP LOCKED")


def earlier_in_lines(count: int) -> str:
    """The ids and lines of rows of ``count`` lines below an id. Parameters: the lines, then
    the id."""
    marks = ", ".join(["%s"] * count)
    return f"SELECT id, line FROM {TABLE} WHERE line IN ({marks}) AND id < %s"


def remove(count: int) -> str:
    """Delete ``count`` rows by id."""
    return f"DELETE FROM {TABLE} WHERE id IN ({', '.join(['%s'] * count)})"


def release(count: int) -> str:
    """SQLite: give back a claim's rows that did not leave (parameters: the claim, the ids)."""
    return (f"UPDATE {TABLE} SET claim = NULL, claimed_until = NULL WHERE claim = %s AND id IN "
            f"({', '.join(['%s'] * count)})")


def depth() -> str:
    """The rows waiting, and the oldest one's due time."""
    return f"SELECT COUNT(*), MIN(due_at) FROM {TABLE}"

