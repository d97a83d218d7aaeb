"""The relay's way to the host's database: Django's own connection (the worker is started with
the host's ``DJANGO_SETTINGS_MODULE``), or a SQLAlchemy URL (``HOOKLINE_OUTBOX_URL``).

Either gives a :class:`Database`: its dialect (``hookline.outbox.sql.DIALECTS``) and
transactions whose cursor takes ``%s`` parameters. Every wait is bounded: a URL's connection is
made with a connect timeout (and, on MySQL, read and write timeouts), and SQLite waits for the
writer's lock at most ``LOCK_WAIT`` seconds. On MySQL the relay reads committed rows only
(``READ COMMITTED``, Django's default there too), so its claim takes no gap locks that would
hold up the host's inserts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Protocol

from hookline.core.env import ConfigError
from hookline.outbox.sql import DIALECTS

#: Seconds a connection attempt, or a MySQL read or write, may take.
CONNECT_TIMEOUT = 5
IO_TIMEOUT = 30
#: Seconds SQLite waits for another writer's lock.
LOCK_WAIT = 5.0


class Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


class Database(Protocol):
    """What the relay needs of a database."""

    dialect: str

    def transaction(self) -> Any:
        """A context manager giving a :class:`Cursor`; commits on a clean exit."""

    def reset(self) -> None:
        """Drop the connection after an error (the next transaction connects again)."""

    def describe(self) -> str:
        """Where the rows are, for the logs (no password)."""


def session_setup(dialect: str, hold: float) -> str | None:
    """The statement that bounds how long a session may sit on claimed rows (``hold``
    seconds, HOOKLINE_OUTBOX_HOLD): a relay paused or cut off mid-pass loses its session,
    and with it its locks (SQLite's claims are leases of that length instead)."""
    if dialect == "postgresql":
        return f"SET idle_in_transaction_session_timeout = {int(hold * 1000)}"
    if dialect == "mysql":
        return f"SET SESSION wait_timeout = {max(1, int(hold))}"
    return None


class _Rows:
    """A DB-API cursor that returns the rows of each statement (``%s`` turned to ``?``
    for drivers that take that)."""

    def __init__(self, cursor: Any, *, qmark: bool) -> None:
        self._cursor = cursor
        self._qmark = qmark

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cursor.execute(sql.replace("%s", "?") if self._qmark else sql, tuple(params))
        return list(self._cursor.fetchall()) if self._cursor.description else []


class DjangoDatabase:
    """The host's Django database ``alias``, through Django's connection of this thread."""

    def __init__(self, alias: str = "default", *, hold: float = 60.0) -> None:
        import django
        from django.apps import apps
        from django.db import connections

        if not apps.ready:
            django.setup()
        self.alias = alias
        vendor = connections[alias].vendor
        if vendor not in DIALECTS:
            raise ConfigError(f"the outbox's Django database {alias!r} is {vendor}: the relay "
                              "knows PostgreSQL, MySQL/MariaDB and SQLite")
        self.dialect = vendor
        self._setup = session_setup(vendor, hold)
        self._set_up: Any = None  # the DB-API connection the setup ran on

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        from django.db import connections, transaction

        connection = connections[self.alias]
        with transaction.atomic(using=self.alias), connection.cursor() as cursor:
            if self._setup and connection.connection is not self._set_up:
                cursor.execute(self._setup)
                self._set_up = connection.connection
            yield _Rows(cursor, qmark=False)

    def reset(self) -> None:
        from django.db import connections

        connections[self.alias].close()

    def describe(self) -> str:
        return f"Django database {self.alias!r}"


class UrlDatabase:
    """A database named by a SQLAlchemy URL (``postgresql+psycopg://``, ``mysql+pymysql://``,
    ``sqlite:///path``); one connection, made when first needed."""

    def __init__(self, url: str, *, hold: float = 60.0) -> None:
        try:
            from sqlalchemy import create_engine
            from sqlalchemy.engine import make_url
            from sqlalchemy.pool import NullPool
        except ImportError:
            raise ConfigError("HOOKLINE_OUTBOX_URL needs SQLAlchemy: pip install "
                              "'hookline[sqlalchemy]' and the database's driver") from None
        try:
            parsed = make_url(url)
        except Exception:
            raise ConfigError("HOOKLINE_OUTBOX_URL is not a database URL (e.g. "
                              "postgresql+psycopg://user@host/db, sqlite:///path)") from None
        name = parsed.get_backend_name()
        dialect = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql",
                   "sqlite": "sqlite"}.get(name)
        if dialect is None:
            raise ConfigError(f"HOOKLINE_OUTBOX_URL names a {name} database: the relay knows "
                              "PostgreSQL, MySQL/MariaDB and SQLite")
        self.dialect = dialect
        self._shown = parsed.render_as_string(hide_password=True)
        options: dict[str, Any] = {"poolclass": NullPool}
        if dialect == "postgresql":
            options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT}
        elif dialect == "mysql":
            options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT,
                                       "read_timeout": IO_TIMEOUT,
                                       "write_timeout": IO_TIMEOUT}
            options["isolation_level"] = "READ COMMITTED"
        else:
            options["connect_args"] = {"timeout": LOCK_WAIT}
        try:
            self._engine = create_engine(parsed, **options)
        except ImportError as exc:
            raise ConfigError(f"HOOKLINE_OUTBOX_URL: the driver for {name} is not installed "
                              f"({exc.name})") from None
        self._connection: Any = None
        self._setup = session_setup(dialect, hold)

    def _connect(self) -> Any:
        if self._connection is None:
            connection = self._engine.raw_connection()
            if self._setup:
                cursor = connection.cursor()
                cursor.execute(self._setup)
                cursor.close()
                connection.commit()
            self._connection = connection
        return self._connection

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        connection = self._connect()
        cursor = connection.cursor()
        try:
            yield _Rows(cursor, qmark=self.dialect == "sqlite")
            connection.commit()
        except BaseException:
            try:
                connection.rollback()
            except Exception:
                self.reset()
            raise
        finally:
            try:
                cursor.close()
            except Exception:  # the connection went away: the next transaction reconnects
                self.reset()

    def reset(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with suppress(Exception):
                connection.invalidate()

    def describe(self) -> str:
        return self._shown


def database_from_environment(url: str | None, alias: str, *, hold: float = 60.0
                              ) -> Database | None:
    """The outbox's database: ``url`` (HOOKLINE_OUTBOX_URL) first, else the Django project
    ``DJANGO_SETTINGS_MODULE`` names (its database ``alias``); None when neither is set."""
    if url:
        return UrlDatabase(url, hold=hold)
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        return DjangoDatabase(alias, hold=hold)
    return None
