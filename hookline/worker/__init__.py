"""The worker: ``celery -A hookline.worker worker`` (or ``celery -A app worker`` in a checkout).

Importing this builds Hookline's Celery application (never the process's current app); the
task module, the consumer and the signal handlers are loaded by the worker by name.
"""

from hookline.worker.celery import app

__all__ = ["app"]
