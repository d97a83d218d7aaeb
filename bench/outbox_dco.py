"""The Django project of ``bench.outbox``'s other contender, django-celery-outbox 0.4.3: its
settings module (``DJANGO_SETTINGS_MODULE=bench.outbox_dco``) and its Celery app
(``CELERY_OUTBOX_APP = "bench.outbox_dco.celery_app"``), for ``manage.py migrate`` and
``manage.py celery_outbox_relay`` run as ``python -m django ...`` subprocesses.

Configured from the environment the benchmark gives those subprocesses: ``OUTBOX_BENCH_DB``
(the PostgreSQL database the benchmark created, on ``OUTBOX_BENCH_PG_HOST``/``_PORT`` as user
``postgres``) and ``OUTBOX_BENCH_BROKER`` (the benchmark's private Redis).

Set up as a deployment would run its relay, and in its favour where there is a choice:
persistent database connections (``CONN_MAX_AGE = None``; Django's default, 0, would make
its ``close_old_connections()`` reconnect twice per batch) and its per-message DogStatsd
metrics off (no statsd agent runs here). Its relay logs one structlog line per batch.
"""

from __future__ import annotations

import os

from django_celery_outbox import OutboxCelery

SECRET_KEY = "bench-outbox-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_celery_outbox"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("OUTBOX_BENCH_DB", "postgres"),
        "USER": os.environ.get("OUTBOX_BENCH_PG_USER", "postgres"),
        "HOST": os.environ.get("OUTBOX_BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("OUTBOX_BENCH_PG_PORT", "5432"),
        "CONN_MAX_AGE": None,
    }
}
CELERY_OUTBOX_APP = "bench.outbox_dco.celery_app"
MONITORING_METRICS_ENABLED = False
LOGGING_CONFIG = None

#: The application's Celery app: ``send_task`` writes a row; the relay publishes it to this
#: broker with ``Celery.send_task``.
celery_app = OutboxCelery("bench_outbox_dco", set_as_current=False,
                          broker=os.environ.get("OUTBOX_BENCH_BROKER", "redis://127.0.0.1:6379/0"))
celery_app.conf.broker_connection_retry_on_startup = True
