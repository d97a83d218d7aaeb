"""The Celery application: ``celery -A app worker`` (all settings in ``celeryconfig.py``)."""

import logging

from celery import Celery
from celery.signals import after_setup_logger

from app.config import settings
from app.logs import configure_json_logging

#: Queue of first deliveries.
DELIVERY_QUEUE = "hookline"
#: Queue of retries, kept apart so a failing endpoint's retries never wait in front of, or
#: behind, other endpoints' first deliveries.
RETRY_QUEUE = "hookline.retry"

app = Celery("hookline", include=["tasks.webhooks"])
app.config_from_object("celeryconfig")


@after_setup_logger.connect
def _json_logs(logger: logging.Logger, **_: object) -> None:
    """``HOOKLINE_LOG_FORMAT=json``: every worker log line becomes one JSON object."""
    if settings().log_format == "json":
        configure_json_logging(logger)
