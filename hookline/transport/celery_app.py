"""The publishing Celery app: what every process (a web request's ``send_webhook``, the
``deliver`` handle, a replay, a released retry, a fan-out) publishes deliveries through.

The app only publishes. It is never the process's current app (``set_as_current=False``), so a
host's own Celery app and ``@shared_task`` tasks are left alone, and it never imports the
worker's task module: the message names the task (``hookline.deliver``) and the worker that
consumes it knows the rest. Built from the Celery settings (``celery_settings``) with
Hookline's ``AMQP`` (``amqp.py``), so what it puts on the wire is what the worker expects.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery

from hookline.core.config import Settings, settings
from hookline.transport.amqp import AMQP_CLASS, SENTINEL_TRANSPORT, TRANSPORT

_lock = threading.Lock()
_app: tuple[Settings, Celery] | None = None


class PublishingApp(Celery):
    """Celery's app, less the search for a result backend when there is none to find.

    Hookline keeps no task results (``result_backend = None``), so the backend is Celery's
    ``DisabledBackend``; Celery finds that out by reading the entry points of every installed
    distribution (``celery.result_backends``), some 20 ms of a web process's first send. This
    app answers ``DisabledBackend`` at once when no backend is configured, as Celery would."""

    def _get_backend(self) -> Any:
        if self.backend_cls is None and self.conf.result_backend is None:
            from celery.backends.base import DisabledBackend

            return DisabledBackend(app=self, url=None)
        return super()._get_backend()


def publishing_app() -> Celery:
    """This process's publishing app, built on first use from the Celery settings (and
    again if the settings were reconfigured in this process)."""
    global _app
    config = settings()
    current = _app
    if current is not None and current[0] is config:
        return current[1]
    with _lock:
        if _app is None or _app[0] is not config:
            from hookline.transport import celery_settings

            built = PublishingApp("hookline", set_as_current=False, fixups=[],
                                  amqp=AMQP_CLASS)
            built.config_from_object(celery_settings)
            built.conf.update(celery_settings.broker_settings(config))
            # The previous app is dropped, not closed: its connection pool is kombu's pool for
            # that broker URL, shared by every app in the process that uses the same URL.
            _app = (config, built)
        return _app[1]


def claims_on_publish() -> bool:
    """Whether a publish can claim the event id itself (``hookline_claim``): the broker is
    Hookline's Redis transport on Hookline's own Redis, so claim and push are one script."""
    config = settings()
    transport = str(publishing_app().conf.broker_transport or "")
    return transport in (TRANSPORT, SENTINEL_TRANSPORT) and config.broker_is_state
