"""The Celery application: ``celery -A app worker`` (all settings in ``celeryconfig.py``)."""

import logging

from celery import Celery
from celery.signals import after_setup_logger, worker_ready, worker_shutdown

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


_releaser = None


@worker_ready.connect
def _start_releaser(**_: object) -> None:
    """Every worker releases due retries unless HOOKLINE_RELEASER=off (then run
    ``hookline releaser`` as its own process). Releasers are safe to run side by side."""
    global _releaser
    if settings().releaser == "worker":
        from app.schedule import Releaser

        _releaser = Releaser(queue=RETRY_QUEUE).start()


@worker_shutdown.connect
def _stop_releaser(**_: object) -> None:
    if _releaser is not None:
        _releaser.stop()
