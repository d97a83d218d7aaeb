"""Hookline's Celery settings, public by this name: ``app.config_from_object(
"hookline.celeryconfig")``.

A host project's Celery app, or Hookline's own worker (``celery -A hookline.worker worker``),
reads its settings from this module by its full name, so a ``celeryconfig.py`` of the host's
never takes its place. Every setting is a module attribute by its Celery name, each explained
where it is defined (``hookline.transport.celery_settings``), and every value can be set from
the environment (``HOOKLINE_*`` and ``CELERY_*``). Read once, at import.
"""

from hookline.transport.celery_settings import *  # noqa: F403
from hookline.transport.celery_settings import __all__ as __all__
