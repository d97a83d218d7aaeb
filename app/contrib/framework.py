"""What the Django and Flask integrations share: Hookline's settings from a framework's config,
and an event validated where it is produced but enqueued later.

Hookline's settings are per process (``app.config.configure``): the last framework config
applied wins. Apply it at start-up, before the process first enqueues an event.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from app.config import ConfigError, Settings, configure, load_settings
from app.enqueue import PreparedEvent, enqueue_prepared
from app.logs import log_event


class _NamesRead(dict[str, str]):
    """An empty environment that remembers every variable name asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.names.add(key)
        return default


def _setting_names() -> frozenset[str]:
    names = _NamesRead()
    load_settings(names)
    return frozenset(names.names)


#: Every variable ``app.config.load_settings`` reads (``REDIS_URL``, ``CELERY_BROKER_URL``,
#: ``HOOKLINE_*`` ...): the names a framework's config may set. Derived from the loader itself,
#: so a new setting is accepted without a change here.
SETTING_NAMES = _setting_names()


def configure_from(config: Mapping[str, Any], *, source: str, strict: bool) -> Settings:
    """Apply the Hookline settings in ``config`` on top of the environment.

    ``strict``: every key must be a Hookline setting (Django's ``settings.HOOKLINE`` dict).
    Otherwise (a Flask app's whole config) other keys are ignored, but a ``HOOKLINE_*`` key that
    is no setting is still an error: a misspelt name must not be silently ignored.
    Raises :class:`ConfigError` naming ``source`` and the offending key or value.
    """
    unknown = sorted(
        str(key) for key in config
        if key not in SETTING_NAMES and (strict or str(key).startswith("HOOKLINE_"))
    )
    if unknown:
        raise ConfigError(
            f"{source}: unknown Hookline setting(s) {', '.join(unknown)}; "
            f"the names are those of the environment variables ({', '.join(sorted(SETTING_NAMES))})"
        )
    overrides = {key: _text(value) for key, value in config.items()
                 if key in SETTING_NAMES and value is not None}
    try:
        candidate = load_settings({**os.environ, **overrides})
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    _apply_to_celery(candidate, source=source)
    return configure(overrides)


def _text(value: Any) -> str:
    """A config value as the environment would spell it (a list of networks comma-separated)."""
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(item) for item in value)
    return str(value)


def _apply_to_celery(applied: Settings, *, source: str) -> None:
    """The broker URL and visibility timeout, which ``celeryconfig`` took from the settings
    when it was loaded, follow the framework's config too."""
    from app.celery import app as celery_app

    conf = celery_app.conf
    options = dict(conf.broker_transport_options or {})
    if (conf.broker_url == applied.broker_url
            and options.get("visibility_timeout") == applied.visibility_timeout):
        return
    if celery_app._pool is not None and conf.broker_url != applied.broker_url:
        raise ConfigError(
            f"{source}: CELERY_BROKER_URL changed after this process connected to the broker; "
            "configure Hookline before the first enqueue"
        )
    options["visibility_timeout"] = applied.visibility_timeout
    conf.update(broker_url=applied.broker_url, broker_transport_options=options)


def enqueue_logged(event: PreparedEvent) -> None:
    """Publish a prepared event; after a commit nobody else would notice a failure, so it is
    logged with the event's id before it propagates."""
    try:
        enqueue_prepared(event)
    except Exception as exc:
        # After a commit nobody else will notice: say which event was not enqueued.
        log_event("enqueue.failed", level=logging.ERROR, endpoint_id=event.endpoint_id,
                  event_id=event.event_id, event_type=event.event_type,
                  error=type(exc).__name__)
        raise
