"""The worker's entry point in a checkout and in the compose image: ``celery -A app worker``
(and ``celery -A app flower``) find Hookline's Celery application here as ``app.app``.

This package is not part of the installed distribution (hosts have packages named ``app`` too):
installed into a project, start the worker with ``celery -A hookline.worker worker``. Web
processes import ``hookline`` (``hookline.send_webhook``, ``hookline.deliver``), never this.
"""

from hookline.worker import app

__all__ = ["app"]
