"""The Celery application: ``celery -A app worker`` (all settings in ``celeryconfig.py``)."""

import logging
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    task_retry,
    worker_init,
    worker_ready,
    worker_shutdown,
)

from app import tracebacks
from app.config import settings
from app.logs import configure_json_logging, log_event

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


_metrics_server: Any = None


@worker_init.connect
def _cheap_retry_tracebacks(**_: object) -> None:
    tracebacks.install()  # see app/tracebacks.py: a retry no longer lists every code position


@worker_init.connect
def _clear_metrics_files(**_: object) -> None:
    """Before the pool starts: a prefork worker's children write their metrics to files in
    PROMETHEUS_MULTIPROC_DIR, which must not hold an earlier run's."""
    from app.metrics import clear_multiprocess_dir

    clear_multiprocess_dir()


@worker_ready.connect
def _serve_metrics(sender: Any = None, **_: object) -> None:
    """Prometheus metrics on HOOKLINE_METRICS_PORT (0: none), served by the worker's main
    process. A port already taken (another worker on the host) is logged, not fatal."""
    global _metrics_server
    from app.metrics import multiprocess_dir, start_server

    port = settings().metrics_port
    if not port:
        return
    pool = type(getattr(sender, "pool", None)).__module__
    if pool.endswith("prefork") and not multiprocess_dir():
        log_event("metrics.incomplete", level=logging.WARNING, port=port,
                  detail="prefork pool without PROMETHEUS_MULTIPROC_DIR: the pool processes' "
                         "counters are not served")
    try:
        _metrics_server = start_server(port)
    except OSError as exc:
        log_event("metrics.unavailable", level=logging.WARNING, port=port,
                  error=exc.strerror or type(exc).__name__)
        return
    log_event("metrics.serving", port=port, multiprocess=bool(multiprocess_dir()))


@worker_shutdown.connect
def _stop_metrics(**_: object) -> None:
    if _metrics_server is not None:
        _metrics_server.shutdown()
        _metrics_server.server_close()


@task_retry.connect
def _count_parked_retry(request: Any = None, reason: Any = None, **_: object) -> None:
    """A failed attempt's retry is counted once it is parked in the retry schedule: Celery
    sends ``task_retry`` after the task's ``retry()`` wrote it. Deferrals (no exception) and
    Hookline's own Redis failures are not attempts and are not counted here."""
    from celery.utils.serialization import UnpickleableExceptionWrapper

    from app.delivery import RetryableDelivery
    from app.metrics import count_outcome

    failure = getattr(reason, "exc", None)
    # Celery's Retry keeps a wrapper of an exception it cannot pickle, as this one.
    if isinstance(failure, UnpickleableExceptionWrapper):
        failed_attempt = (failure.exc_module, failure.exc_cls_name) == (
            RetryableDelivery.__module__, RetryableDelivery.__name__)
    else:
        failed_attempt = isinstance(failure, RetryableDelivery)
    args = getattr(request, "args", None)
    if failed_attempt and args:
        count_outcome(str(args[0]), "retry_scheduled")
