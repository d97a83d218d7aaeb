"""The worker's Celery settings, as the design card names them. They live in
``hookline/celeryconfig.py`` (shipped with the distribution, read by that full name, so a host
project's own ``celeryconfig.py`` never takes their place); this file only points there."""

from hookline.celeryconfig import *  # noqa: F403
