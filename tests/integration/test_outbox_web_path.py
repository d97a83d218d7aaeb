"""The web process's side of the outbox (HOOKLINE_OUTBOX=on), in a process of its own as a
Django project runs: ``send_webhook_on_commit`` and ``publish_on_commit`` write rows in the
view's transaction with Hookline's Redis unreachable, load neither Celery, kombu nor redis-py,
and a rolled-back transaction leaves no row."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.support.servers import free_port

SCRIPT = """
import json, sys, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
before = set(sys.modules)
from django.db import transaction
from hookline.contrib.django import publish_on_commit, send_webhook_on_commit
from hookline.contrib.django.models import OutboxRow
with transaction.atomic():
    kept = send_webhook_on_commit("orders", "order.created", {"order": 1}, "kept-1")
    publish_on_commit("shop", "order.created", {"order": 1}, "kept-2", channels=["eu"])
try:
    with transaction.atomic():
        send_webhook_on_commit("orders", "order.created", {"order": 2}, "rolled-back")
        raise RuntimeError("payment declined")
except RuntimeError:
    pass
print(json.dumps({
    "rows": list(OutboxRow.objects.order_by("id").values_list("event_id", "line", "channels")),
    "loaded": sorted({m.split(".")[0] for m in set(sys.modules) - before}),
    "heavy": sorted({m.split(".")[0] for m in sys.modules} & {"celery", "kombu", "redis",
                                                              "billiard", "urllib3"}),
    "modules": len(sys.modules)}))
"""


def test_the_outbox_write_path_needs_no_redis_and_loads_no_celery(tmp_path) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "examples.django_project.settings",
           "ORDERS_DB_PATH": str(tmp_path / "orders.sqlite3"), "HOOKLINE_OUTBOX": "on",
           # Nothing listens there: a call that reached for Redis would fail.
           "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "HOOKLINE_REDIS_TIMEOUT": "1"}
    env.pop("HOOKLINE_BROKER_URL", None)
    ran = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["rows"] == [["kept-1", "e:orders\n", None], ["kept-2", "a:shop\n", '["eu"]']]
    assert found["heavy"] == [], found["heavy"]
    # The calls load nothing setup had not but Hookline's own row writing (imported where
    # first used: tests/integration/test_web_path_imports.py).
    assert set(found["loaded"]) <= {"hookline"}, found["loaded"]
