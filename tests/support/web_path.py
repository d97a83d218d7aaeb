"""What a web process imports to send: each scenario runs in a fresh interpreter
(``sys.executable -c``) and reports the modules it loaded and the time it took, measured from
just before its first import. ``tests/integration/test_web_path_imports.py`` asserts on them,
``bench/imports.py`` measures them side by side with a bare Celery app's first ``.delay()``.
Nothing here imports pytest, Celery or Hookline: the scenarios do, in their own process.

The scenarios and what they read from the environment:

- ``celery_delay``: a bare Celery app (``Celery(broker=BARE_BROKER_URL)``) and one task's
  first ``.delay()``, what any Celery web process pays to enqueue;
- ``send_webhook``: ``import hookline`` and a first ``hookline.send_webhook`` to endpoint
  ``WEB_PATH_ENDPOINT`` (registered beforehand in ``REDIS_URL``);
- ``publish``: ``import hookline`` and a first ``hookline.publish`` to application
  ``WEB_PATH_APP``;
- ``django_setup``: ``django.setup()`` of a project with Django's usual apps, and
  ``hookline.contrib.django`` too when ``WEB_PATH_HOOKLINE_APP=1``;
- ``outbox_on_commit``: a Django project with Hookline's app on SQLite (``WEB_PATH_DB``,
  migrated before the measure) and ``HOOKLINE_OUTBOX=on``: ``send_webhook_on_commit`` in
  ``transaction.atomic()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent

#: Modules no web path may load: Celery's worker, Hookline's worker, console and CLI, the
#: metrics, the schema checks, the signing and sealing crypto, HTTP clients and the console's
#: web stack. (redis-py imports the ``cryptography`` package itself to learn whether it is
#: installed, as a bare Celery app's ``.delay()`` does too: only its submodules count.)
HEAVY = ("celery.worker", "celery.apps", "celery.bootsteps", "celery.concurrency",
         "hookline.worker", "hookline.console", "hookline.cli", "prometheus_client",
         "jsonschema", "cryptography.hazmat", "nacl", "urllib3", "requests", "jinja2",
         "werkzeug", "standardwebhooks")
#: What Hookline's tracing imports when traces are on (hookline.core.tracing): never without a
#: tracer provider. (redis-py 8 imports OpenTelemetry's API and SDK metrics itself where the
#: SDK is installed: not Hookline's, so not checked.)
TRACING = ("opentelemetry.propagate", "opentelemetry.propagators",
           "opentelemetry.trace.propagation.tracecontext")
#: With the outbox on, a web process needs no broker client at all.
BROKER = ("celery", "kombu", "billiard", "amqp")

#: The apps of the Django project ``django_setup`` sets up (those of ``django-admin
#: startproject``).
DJANGO_APPS = ["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
               "django.contrib.sessions", "django.contrib.messages"]

_START = """
import json, os, sys, time
before = set(sys.modules)
started, cpu_started = time.perf_counter(), time.process_time()
"""

_END = """
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
print(json.dumps({"ms": round(elapsed * 1000, 1), "cpu_ms": round(cpu * 1000, 1),
                  "loaded": sorted(set(sys.modules) - before), "present": sorted(sys.modules)}))
"""

_DJANGO_CONFIGURE = f"""
import django
from django.conf import settings
apps = {DJANGO_APPS!r}
if os.environ.get("WEB_PATH_HOOKLINE_APP") == "1":
    apps.append("hookline.contrib.django")
settings.configure(INSTALLED_APPS=apps, USE_TZ=True,
                   DATABASES={{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                          "NAME": os.environ.get("WEB_PATH_DB", ":memory:")}}}},
                   DEFAULT_AUTO_FIELD="django.db.models.BigAutoField")
"""

SCENARIOS = {
    "celery_delay": _START + """
from celery import Celery
app = Celery("bare", broker=os.environ["BARE_BROKER_URL"])
@app.task(name="bare.noop")
def noop(*args):
    return None
noop.delay("shop", "order.created", {"order": 1})
""" + _END,
    "send_webhook": _START + """
import hookline
hookline.send_webhook(os.environ["WEB_PATH_ENDPOINT"], "order.created", {"order": 1})
""" + _END,
    "publish": _START + """
import hookline
hookline.publish(os.environ["WEB_PATH_APP"], "order.created", {"order": 1})
""" + _END,
    "django_setup": _START + _DJANGO_CONFIGURE + """
django.setup()
""" + _END,
    # Migrated first (the table exists in any deployed project), without the system checks:
    # a check may load the project's URLconf, which is not what a request's send loads.
    "outbox_on_commit": """
import json, os, sys, time
os.environ["WEB_PATH_HOOKLINE_APP"] = "1"
""" + _DJANGO_CONFIGURE + """
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0, skip_checks=True)
""" + _START.replace("import json, os, sys, time", "") + """
from django.db import transaction
from hookline.contrib.django import send_webhook_on_commit
with transaction.atomic():
    send_webhook_on_commit(os.environ["WEB_PATH_ENDPOINT"], "order.created", {"order": 1})
from hookline.contrib.django.models import OutboxRow
assert OutboxRow.objects.count() == 1, "the row was not written"
""" + _END,
}


def run_scenario(name: str, env: dict[str, str], timeout: float = 120, *,
                 bytecode: Path | None = None) -> dict[str, Any]:
    """Run scenario ``name`` in a fresh interpreter with ``env`` added to a copy of this
    process's environment (``DJANGO_SETTINGS_MODULE`` and ``PYTHONSTARTUP`` removed).
    ``bytecode``: a directory where every module's compiled bytecode is kept
    (``PYTHONPYCACHEPREFIX``, written even where the environment says not to write it), so
    that after a first run no side compiles its sources again, as in any installed package.
    Its report: ``ms`` (wall time of the scenario, from its first import), ``cpu_ms`` (the
    process's CPU time over the same span), ``loaded`` (the
    modules it loaded) and ``present`` (every module in the process at its end)."""
    full = {key: value for key, value in os.environ.items()
            if key not in ("DJANGO_SETTINGS_MODULE", "PYTHONSTARTUP")}
    if bytecode is not None:
        full.pop("PYTHONDONTWRITEBYTECODE", None)
        full["PYTHONPYCACHEPREFIX"] = str(bytecode)
    full.update(env)
    ran = subprocess.run([sys.executable, "-c", SCENARIOS[name]], cwd=ROOT, env=full,
                         capture_output=True, text=True, timeout=timeout)
    if ran.returncode != 0:
        raise RuntimeError(f"scenario {name} failed ({ran.returncode}):\n{ran.stderr}")
    report: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return report


def heavy(modules: list[str], prefixes: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules among ``modules`` that are, or are inside, one of ``prefixes``."""
    return sorted(module for module in modules
                  if any(module == prefix or module.startswith(prefix + ".")
                         for prefix in prefixes))
