"""Hookline as a Flask extension.

    from hookline.contrib.flask import Hookline

    hookline = Hookline()

    def create_app():
        app = Flask(__name__)
        hookline.init_app(app)
        return app

    # in a view
    event_id = hookline.send_webhook("shop-42", "order.created", {"order": 1234})

Settings come from the environment (``REDIS_URL``, ``HOOKLINE_*``), the same variables the
worker reads. ``init_app`` validates them and refuses ``HOOKLINE_*`` keys in ``app.config``,
which would configure the web process but not the worker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Flask

from hookline.contrib.framework import check_environment
from hookline.core.config import Settings
from hookline.enqueue import send_webhook as _send_webhook

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
        """Validate Hookline's environment settings; raises
        ``hookline.core.config.ConfigError`` naming the bad variable, or a ``HOOKLINE_*`` key
        in ``app.config``."""
        self.settings = check_environment(app.config, source=f"Flask app {app.name!r} config")
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
        """Validate and enqueue one event, as :func:`hookline.send_webhook`; returns its event id.
        Raises :class:`hookline.WebhookInputError` on bad input."""
        return _send_webhook(endpoint_id, event_type, payload, event_id, deadline=deadline)
