"""The worker: ``celery -A hookline.worker worker`` (or ``celery -A app worker`` in a checkout).

Importing this builds Hookline's Celery application (never the process's current app); the
task module, the consumer and the signal handlers are loaded by the worker by name.
"""

from hookline.worker.celery import worker_app

#: The worker's Celery app by the name ``celery -A hookline.worker`` looks for (Celery's
#: convention); :mod:`hookline.worker.celery` calls it ``worker_app``.
app = worker_app

__all__ = ["app", "worker_app"]
