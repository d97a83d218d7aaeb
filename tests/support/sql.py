"""SQL databases of a test's own, on the machine's real servers: a PostgreSQL database and a
MariaDB database created for the test and dropped after it, or a SQLite file under its
temporary directory. Each comes with the outbox's table (``hookline.contrib.sqlalchemy``).

The servers: ``HOOKLINE_TEST_POSTGRES`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432``)
and ``HOOKLINE_TEST_MYSQL`` (default ``mysql+pymysql://root@127.0.0.1:3306``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from hookline.contrib.sqlalchemy import outbox_table

POSTGRES = os.environ.get("HOOKLINE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432")
MYSQL = os.environ.get("HOOKLINE_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306")
DIALECTS = ("postgresql", "mysql", "sqlite")


@dataclass
class TestDatabase:
    """One test's database: its URL (``HOOKLINE_OUTBOX_URL``), an engine on it, its dialect."""

    __test__ = False  # not a test class
    dialect: str
    url: str
    engine: Engine

    def rows(self) -> list[Any]:
        with self.engine.connect() as connection:
            return list(connection.execute(text("SELECT id, event_id, line FROM hookline_outbox "
                                                "ORDER BY id")))

    def count(self) -> int:
        with self.engine.connect() as connection:
            return int(connection.execute(text("SELECT COUNT(*) FROM hookline_outbox")).scalar())


@contextmanager
def database(dialect: str, tmp_path: Path, *, table: bool = True) -> Iterator[TestDatabase]:
    """A fresh database of ``dialect`` with the outbox's table (unless ``table`` is false:
    Django's migration makes it), removed afterwards."""
    name = f"hookline_test_{uuid.uuid4().hex[:12]}"
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / (name + '.sqlite3')}"
        server = None
    else:
        base = POSTGRES if dialect == "postgresql" else MYSQL
        server = create_engine(f"{base}/{'postgres' if dialect == 'postgresql' else ''}",
                               isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with server.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
        url = f"{base}/{name}"
    engine = create_engine(url, poolclass=NullPool)
    if table:
        metadata = MetaData()
        outbox_table(metadata)
        metadata.create_all(engine)
    try:
        yield TestDatabase(dialect, url, engine)
    finally:
        engine.dispose()
        if server is not None:
            with server.connect() as connection:
                if dialect == "postgresql":
                    connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                else:
                    connection.execute(text(f"DROP DATABASE IF EXISTS {name}"))
            server.dispose()
