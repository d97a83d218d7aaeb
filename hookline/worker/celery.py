"""Hookline's Celery application for the worker: ``celery -A hookline.worker worker``.

It is never the process's current app (``set_as_current=False``): a host project's own Celery
app and its ``@shared_task`` tasks stay where they were. Its settings come from
``hookline.celeryconfig`` by that full name, never from a module a host may own
(``celeryconfig``, ``tasks``, ``app``). The task module and the worker's signal handlers
(``hookline.worker.boot``) are loaded by the worker only, by name.
"""

from celery import Celery

from hookline.core.messages import TASK_NAME
from hookline.transport.amqp import AMQP_CLASS
from hookline.worker.task_events import EVENTS_CLASS

# fixups=[]: Celery would otherwise set up a Django project named by DJANGO_SETTINGS_MODULE in
# the environment, which is the host's business, not Hookline's worker's. amqp: the payload's
# size, not its content, in task events; the broker's URL as redis:// for Flower. events: a
# task-event dispatcher that loses no event under the threads pool (hookline.worker.task_events).
worker_app = Celery("hookline", set_as_current=False, include=["hookline.worker.tasks"], fixups=[],
                    amqp=AMQP_CLASS, events=EVENTS_CLASS)
worker_app.config_from_object("hookline.celeryconfig")
# The worker's start-up glue: version check, releaser, metrics server, JSON logs.
worker_app.conf.imports = ("hookline.worker.boot",)

__all__ = ["TASK_NAME", "worker_app"]
