"""The transactional outbox with SQLAlchemy 2 (plain, or Flask-SQLAlchemy's ``db.session``).

Add the table to your metadata, so that ``create_all`` or Alembic's autogenerate makes it::

    from hookline.contrib.sqlalchemy import outbox_table
    outbox_table(Base.metadata)          # or db.metadata with Flask-SQLAlchemy

and write events in the session's transaction::

    with Session(engine) as session, session.begin():
        session.add(order)
        add_webhook(session, "shop-42", "order.created", {"order": order.id})

The row commits or rolls back with the order. A worker's relay (``HOOKLINE_OUTBOX=on`` and
``HOOKLINE_OUTBOX_URL`` naming the same database) publishes it once committed. Only what needs
no Redis is checked here (``WebhookInputError``); the relay dead-letters, with its reason, an
event whose endpoint or application is unknown. See docs/guides/outbox.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, Float, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.dialects import mysql

from hookline.core.specs import EventSpec, PublicationSpec
from hookline.outbox.rows import LINE_LENGTH, TABLE, OutboxRow, publication_row, webhook_row

__all__ = ["add_publication", "add_webhook", "outbox_table"]

#: ``TEXT`` is 64 KiB on MySQL; payloads go up to HOOKLINE_MAX_PAYLOAD_BYTES.
_LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
#: SQLite gives an autoincrementing id to an ``INTEGER PRIMARY KEY`` only.
_ID = BigInteger().with_variant(Integer(), "sqlite")


def outbox_table(metadata: MetaData) -> Table:
    """The outbox's table (``hookline_outbox``: the columns and indexes of Django's model) in
    ``metadata``; the one already there if it was added before."""
    if TABLE in metadata.tables:
        return metadata.tables[TABLE]
    return Table(
        TABLE, metadata,
        Column("id", _ID, primary_key=True, autoincrement=True),
        Column("due_at", Float(precision=53), nullable=False),
        Column("line", String(LINE_LENGTH), nullable=False),
        Column("endpoint_id", String(64)),
        Column("app_id", String(64)),
        Column("channels", Text()),
        Column("event_id", String(200), nullable=False),
        Column("event_type", String(200), nullable=False),
        Column("payload", _LONG_TEXT, nullable=False),
        Column("digest", String(64), nullable=False),
        Column("deadline", Float(precision=53)),
        Column("ordering_key", String(200)),
        Column("claim", String(32)),
        Column("claimed_until", Float(precision=53)),
        # The W3C traceparent of the trace the row was written in (0.3; docs/operations/tracing.md).
        Column("traceparent", String(55)),
        Index("hookline_outbox_due", "due_at", "id"),
        Index("hookline_outbox_line", "line", "id"),
    )


#: The table the helpers insert into (the statement needs no one's metadata but its own).
_TABLE = outbox_table(MetaData())


def add_webhook(session: Any, endpoint_id: str, event_type: str, payload: Any,
                event_id: str | None = None, *, deadline: float | datetime | None = None,
                ordering_key: str | None = None) -> str:
    """Write ``send_webhook``'s event as an outbox row in ``session``'s transaction; returns
    its event id."""
    return add_event(session, EventSpec(endpoint_id, event_type, payload, event_id, deadline,
                                        ordering_key))


def add_event(session: Any, spec: EventSpec | PublicationSpec) -> str:
    """:func:`add_webhook` or :func:`add_publication` for an event given as its spec (the
    Flask extension's way)."""
    return _add(session, webhook_row(spec) if isinstance(spec, EventSpec)
                else publication_row(spec))


def add_publication(session: Any, app_id: str, event_type: str, payload: Any,
                    event_id: str | None = None, *, channels: Sequence[str] | None = None,
                    deadline: float | datetime | None = None,
                    ordering_key: str | None = None) -> str:
    """Write ``publish``'s event as an outbox row in ``session``'s transaction; returns its
    event id."""
    return add_event(session, PublicationSpec(app_id, event_type, payload, event_id, channels,
                                              deadline, ordering_key))


def _add(session: Any, row: OutboxRow) -> str:
    session.execute(_TABLE.insert().values(**row.values()))
    return row.event_id
