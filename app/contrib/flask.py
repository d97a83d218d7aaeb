"""Hookline as a Flask extension.

    from app.contrib.flask import Hookline

    hookline = Hookline()

    def create_app():
        app = Flask(__name__)
        app.config["REDIS_URL"] = "redis://redis:6379/0"   # or leave it to the environment
        hookline.init_app(app)
        return app

    # in a view
    event_id = hookline.send_webhook("shop-42", "order.created", {"order": 1234})

``init_app`` reads ``REDIS_URL``, ``CELERY_BROKER_URL``, ``CELERY_VISIBILITY_TIMEOUT`` and the
``HOOKLINE_*`` settings from ``app.config`` (the environment fills in the rest) and validates
them; a misspelt ``HOOKLINE_*`` key is an error. The settings are per process: every app in one
process must agree on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Flask

from app.config import Settings
from app.contrib.framework import configure_from
from app.enqueue import send_webhook as _send_webhook

__all__ = ["Hookline"]


class Hookline:
    """The extension; ``app.extensions["hookline"]`` holds it after :meth:`init_app`.

    :param app: a Flask application to initialise now, or None to call :meth:`init_app`
        later (application factories).
    """

    def __init__(self, app: Flask | None = None) -> None:
        self.settings: Settings | None = None
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Apply the app's Hookline settings; raises ``app.config.ConfigError`` naming the bad
        key or value."""
        self.settings = configure_from(app.config, source=f"Flask app {app.name!r} config",
                                       strict=False)
        app.extensions["hookline"] = self

    def send_webhook(
        self,
        endpoint_id: str,
        event_type: str,
        payload: Any,
        event_id: str | None = None,
        *,
        deadline: float | datetime | None = None,
    ) -> str:
        """Validate and enqueue one event, as :func:`app.send_webhook`; returns its event id.
        Raises :class:`app.WebhookInputError` on bad input."""
        return _send_webhook(endpoint_id, event_type, payload, event_id, deadline=deadline)
