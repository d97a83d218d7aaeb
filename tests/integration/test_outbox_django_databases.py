"""Django's side of the outbox on the three databases (PostgreSQL, MariaDB through PyMySQL,
SQLite): the migration makes the table and leaves no change for ``makemigrations``; rows
written by ``send_webhook_on_commit`` in a committed transaction are moved by a relay on
Django's own connection (``DjangoDatabase``) to the broker, in order; a rolled-back one
never is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from hookline.store.endpoints import EndpointRegistry
from tests.conftest import ROOT
from tests.store.test_event_ids import queued
from tests.support.sql import DIALECTS, database

SETTINGS = """
{preamble}
SECRET_KEY = "outbox-test"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "hookline.contrib.django"]
DATABASES = {{"default": {database!r}}}
"""
#: Django asks for mysqlclient; a project on PyMySQL says so in its settings, as this one does.
PYMYSQL = ("import pymysql\npymysql.version_info = (2, 2, 1, 'final', 0)\n"
           "pymysql.install_as_MySQLdb()")

SCRIPT = """
import json, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
call_command("makemigrations", "hookline", "--check", "--dry-run", verbosity=0)
from django.db import transaction
from hookline.contrib.django import send_webhook_on_commit
for n in range(5):
    with transaction.atomic():
        send_webhook_on_commit("shop", "order.created", {"n": n}, f"e-{n}")
try:
    with transaction.atomic():
        send_webhook_on_commit("shop", "order.created", {"n": 9}, "rolled-back")
        raise RuntimeError
except RuntimeError:
    pass
from hookline.outbox.database import DjangoDatabase
from hookline.outbox.relay import Relay
relay = Relay(DjangoDatabase("default"))
waiting = relay.depth()[0]
print(json.dumps({"dialect": relay.database.dialect, "waiting": waiting,
                  "moved": relay.drain(), "left": relay.depth()[0]}))
"""


def django_database(dialect: str, url: str) -> dict[str, Any]:
    parsed = make_url(url)
    if dialect == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database}
    engine = "postgresql" if dialect == "postgresql" else "mysql"
    return {"ENGINE": f"django.db.backends.{engine}", "NAME": parsed.database,
            "USER": parsed.username, "HOST": parsed.host, "PORT": str(parsed.port)}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_migration_and_a_relay_on_djangos_connection(dialect, tmp_path: Path,
                                                         quiet_redis) -> None:
    EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")
    with database(dialect, tmp_path, table=False) as db:
        (tmp_path / "outbox_settings.py").write_text(SETTINGS.format(
            preamble=PYMYSQL if dialect == "mysql" else "",
            database=django_database(dialect, db.url)))
        kwargs = quiet_redis.connection_pool.connection_kwargs
        url = f"redis://127.0.0.1:{kwargs['port']}/{kwargs['db']}"
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "outbox_settings", "HOOKLINE_OUTBOX": "on",
               "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "REDIS_URL": url,
               "HOOKLINE_BROKER_URL": url}
        ran = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=180)
        assert ran.returncode == 0, ran.stderr[-3000:]
        found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found == {"dialect": dialect, "waiting": 5, "moved": 5, "left": 0}
    assert [kwargs["event_id"] for _, kwargs in queued(quiet_redis)] == [
        f"e-{n}" for n in range(5)]
