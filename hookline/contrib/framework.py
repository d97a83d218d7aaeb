"""What the Django and Flask integrations share: one configuration for every process, and an
event validated where it is produced but enqueued later.

Hookline's settings come from the environment only (``REDIS_URL``, ``HOOKLINE_BROKER_URL``,
``HOOKLINE_*``), because the worker must mean the same by them as the web process, and the
worker never reads a Django settings module or a Flask config. A framework config that tries to
set them is refused with the reason, instead of taking effect in one process only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from hookline.core.config import ConfigError, Settings, setting_names, settings
from hookline.core.logs import log_event
from hookline.enqueue import PreparedEvent, enqueue_prepared


def check_environment(framework_keys: Iterable[Any], *, source: str) -> Settings:
    """Validate the environment's Hookline settings now (a bad value fails the web process
    at start-up, naming the variable), and refuse Hookline settings given in ``source``."""
    misplaced = sorted(str(key) for key in framework_keys
                       if str(key) == "HOOKLINE" or str(key).startswith("HOOKLINE_")
                       or str(key) in _OWN_NAMES)
    if misplaced:
        raise ConfigError(
            f"{source} sets {', '.join(misplaced)}: Hookline reads its settings from the "
            "environment only, so that the worker and the web process agree. Set them as "
            "environment variables of both processes (see README, Configuration)"
        )
    try:
        return settings()
    except ConfigError as exc:
        raise ConfigError(f"environment: {exc}") from None


#: Names only Hookline uses (``REDIS_URL`` is common to other libraries' configs, a cache's
#: for one, and is not refused there).
_OWN_NAMES = frozenset(name for name in setting_names() if name.startswith("HOOKLINE_")) | {
    "CELERY_VISIBILITY_TIMEOUT"}


def enqueue_logged(event: PreparedEvent) -> None:
    """Publish a prepared event; after a commit nobody else would notice a failure, so it is
    logged with the event's id before it propagates."""
    try:
        enqueue_prepared(event)
    except Exception as exc:
        log_event("enqueue.failed", level=logging.ERROR, endpoint_id=event.endpoint_id,
                  event_id=event.event_id, event_type=event.event_type,
                  error=type(exc).__name__)
        raise
