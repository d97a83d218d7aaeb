"""The worker's start-up and shutdown glue, connected to Celery's worker signals.

Loaded by the worker (``imports`` in ``hookline.worker.celery``), never by the layers below.
Each handler acts only for Hookline's own worker: a host's worker in the same virtualenv is
left alone.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

import redis
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)
from celery.utils.log import get_multiprocessing_logger

from hookline.core.config import ConfigError, settings
from hookline.core.logs import configure_worker_logging, log_event
from hookline.core.messages import RETRY_QUEUE
from hookline.transport import compat
from hookline.transport.liveness import stop_process_liveness
from hookline.worker.celery import worker_app


def _ours(sender: Any) -> bool:
    return getattr(sender, "app", None) is worker_app


@worker_init.connect
def _check_versions(sender: Any = None, **_: object) -> None:
    """Refuse to start on celery/kombu/billiard versions the broker was not written for.
    (Celery logs and swallows an ordinary exception from a signal handler: SystemExit stops
    the worker, with the message on stderr.)"""
    if not _ours(sender):
        return
    try:
        compat.require_supported()
    except compat.UnsupportedVersion as exc:
        log_event("worker.unsupported_versions", level=logging.CRITICAL, error=str(exc))
        raise SystemExit(f"hookline: {exc}") from None


@worker_init.connect
def _check_secrets_at_rest(sender: Any = None, **_: object) -> None:
    """Before the pool starts: refuse to start when an endpoint's secrets are encrypted with a
    key this worker lacks (it would sign nothing), report the damaged ones (they are never
    sent), and say once that secrets are stored in plain text when no key is set."""
    if not _ours(sender):
        return
    from hookline.store import sealed

    try:
        found = sealed.census()
    except redis.RedisError as exc:
        log_event("secrets.unchecked", level=logging.WARNING, error=type(exc).__name__)
        return
    missing = [error for error in found.unreadable if error.missing_key]
    if missing:
        log_event("worker.missing_encryption_key", level=logging.CRITICAL,
                  endpoints=len(missing), error=str(missing[0]))
        raise SystemExit(f"hookline: {len(missing)} endpoint(s) cannot be read: {missing[0]}")
    for error in found.unreadable:
        log_event("secrets.unreadable", level=logging.ERROR, endpoint_id=error.endpoint_id,
                  error=str(error))
    if not settings().encryption_keys:
        log_event("secrets.plain_text", level=logging.WARNING,
                  detail="signing secrets and header values are stored in plain text in "
                         "Redis: set HOOKLINE_ENCRYPTION_KEYS (hookline secrets generate-key)")
    elif found.plain:
        log_event("secrets.partly_plain", level=logging.WARNING, fields=found.plain,
                  detail="some are stored in plain text: run 'hookline secrets reencrypt'")


@worker_init.connect
def _check_ordered_endpoints(sender: Any = None, **_: object) -> None:
    """An ordered endpoint's lines are kept by the consume script of a broker that is
    Hookline's own Redis: a worker on any other broker would deliver its events out of order,
    so it refuses to start while one exists."""
    if not _ours(sender) or settings().broker_is_state:
        return
    from hookline.store.ordering import ordered_endpoints

    try:
        found = ordered_endpoints()
    except redis.RedisError:
        return
    if found:
        raise SystemExit(
            f"hookline: endpoint {found[0]!r} is ordered, which needs the broker to be "
            "Hookline's own Redis (HOOKLINE_BROKER_URL unset or equal to REDIS_URL); make it "
            f"unordered first ('hookline endpoint update {found[0]} --unordered')")


@after_setup_logger.connect
@after_setup_task_logger.connect
def _worker_logs(logger: logging.Logger, **_: object) -> None:
    """The log handlers Celery set up in Hookline's worker (this module is loaded by Hookline's
    app only): the root logger's, the multiprocessing logger's and ``celery.task``'s. Every
    line is redacted (URLs in messages and tracebacks: urllib3's DEBUG lines, Celery's task
    failure lines), and with ``HOOKLINE_LOG_FORMAT=json`` written as one JSON object,
    Celery's own lines included."""
    json_lines = settings().log_format == "json"
    configure_worker_logging(logger, json_lines=json_lines)
    multiprocessing_logger = get_multiprocessing_logger()
    if multiprocessing_logger is not None and multiprocessing_logger is not logger:
        configure_worker_logging(multiprocessing_logger, json_lines=json_lines)


_releaser: Any = None
_metrics_server: Any = None


@worker_ready.connect
def _start_releaser(sender: Any = None, **_: object) -> None:
    """Every worker releases due retries unless HOOKLINE_RELEASER=off (then run
    ``hookline releaser`` as its own process). Releasers are safe to run side by side."""
    global _releaser
    if _ours(sender) and settings().releaser == "worker":
        from hookline.delivery.releaser import Releaser

        _releaser = Releaser(queue=RETRY_QUEUE).start()


_reconciler: Any = None


@worker_ready.connect
def _start_reconciler(sender: Any = None, **_: object) -> None:
    """Every worker mends the in-flight counts Redis keeps for it (hookline.worker.reconciler):
    after Redis comes back, and on a periodic sweep."""
    global _reconciler
    if not _ours(sender):
        return
    from hookline.store import connection as store
    from hookline.store.keys import FAIR_WAITING_KEY
    from hookline.store.leases import Leases
    from hookline.worker.reconciler import Reconciler

    config = settings()
    client = store.client()
    waiting = ((lambda: {str(e) for e in client.smembers(FAIR_WAITING_KEY)})
               if config.broker_is_state else None)
    _reconciler = Reconciler(Leases(client), interval=config.reconcile_interval,
                             waiting=waiting).start()


@worker_init.connect
def _start_malloc_trim(sender: Any = None, **_: object) -> None:
    """Return free heap pages to the system now and then (hookline.worker.memory)."""
    if _ours(sender):
        from hookline.worker import memory

        memory.start(settings().malloc_trim_interval)


@worker_process_init.connect
def _start_malloc_trim_in_child(**_: object) -> None:
    """A prefork child of a worker that trims trims its own heap (threads do not survive a
    fork)."""
    from hookline.worker import memory

    if memory.started_in_parent():
        memory.start(settings().malloc_trim_interval)


_relay: Any = None


@worker_init.connect
def _index_disabled(sender: Any = None, **_: object) -> None:
    """Every disabled endpoint in the overview's index (hookline.store.disabled), whatever
    disabled it and whatever process died before writing the index."""
    if not _ours(sender):
        return
    from hookline.store import connection as store
    from hookline.store import disabled
    from hookline.store.endpoints import registered_ids

    try:
        client = store.client()
        disabled.rebuild(client, registered_ids(client))
    except redis.RedisError as exc:
        log_event("disabled_index.unchecked", level=logging.WARNING, error=type(exc).__name__)


@worker_init.connect
def _find_outbox(sender: Any = None, **_: object) -> None:
    """With ``HOOKLINE_OUTBOX=on`` every worker runs the outbox's relay (hookline.outbox.relay)
    once ready, reading the database ``HOOKLINE_OUTBOX_URL`` names, else the Django project's
    of ``DJANGO_SETTINGS_MODULE``. Relays are safe side by side. With neither set (or a driver
    missing) the worker refuses to start, saying why: the rows would wait for nobody."""
    global _relay
    if not _ours(sender) or not settings().outbox:
        return
    from hookline.outbox.relay import relay_from_settings

    try:
        _relay = relay_from_settings(settings())
    except ConfigError as exc:
        log_event("outbox.unconfigured", level=logging.CRITICAL, error=str(exc))
        raise SystemExit(f"hookline: {exc}") from None


@worker_ready.connect
def _start_relay(sender: Any = None, **_: object) -> None:
    if _ours(sender) and _relay is not None:
        log_event("outbox.relaying", database=_relay.database.describe())
        _relay.start()


@worker_init.connect
def _import_host_modules(sender: Any = None, **_: object) -> None:
    """Import ``HOOKLINE_WORKER_IMPORTS``: the host's operational-event callbacks and signal
    receivers (``hookline.operational``) connect here, in the process where the events
    happen. A module that cannot be imported stops the worker, saying which."""
    if not _ours(sender):
        return
    for name in settings().worker_imports:
        try:
            importlib.import_module(name)
        except Exception as exc:
            log_event("worker.import_failed", level=logging.ERROR, module=name,
                      error=type(exc).__name__)
            raise
        log_event("worker.imported", module=name)


@worker_init.connect
def _clear_metrics_files(sender: Any = None, **_: object) -> None:
    """Before the pool starts: a prefork worker's children write their metrics to files in
    PROMETHEUS_MULTIPROC_DIR, which must not hold an earlier run's. Not under ``hookline
    worker`` (HOOKLINE_WORKER_SUPERVISED): the workers share its directory, cleared once."""
    if _ours(sender) and not os.environ.get("HOOKLINE_WORKER_SUPERVISED"):
        from hookline.transport.gauges import clear_multiprocess_dir

        clear_multiprocess_dir()


@worker_ready.connect
def _serve_metrics(sender: Any = None, **_: object) -> None:
    """This worker's own counters and histograms on HOOKLINE_METRICS_ADDRESS and
    HOOKLINE_METRICS_PORT (0: none), served by the worker's main process; the Redis gauges
    are ``hookline metrics``'s. A port already taken (another worker on the host) is logged,
    not fatal."""
    global _metrics_server
    if not _ours(sender):
        return
    from hookline.transport.gauges import multiprocess_dir, start_server

    port, address = settings().metrics_port, settings().metrics_address
    if not port:
        return
    pool = type(getattr(sender, "pool", None)).__module__
    if pool.endswith("prefork") and not multiprocess_dir():
        log_event("metrics.incomplete", level=logging.WARNING, port=port,
                  detail="prefork pool without PROMETHEUS_MULTIPROC_DIR: the pool processes' "
                         "counters are not served")
    try:
        _metrics_server = start_server(port, engine=True, gauges=False, addr=address)
    except OSError as exc:
        log_event("metrics.unavailable", level=logging.WARNING, address=address, port=port,
                  error=exc.strerror or type(exc).__name__)
        return
    log_event("metrics.serving", address=address, port=port,
              multiprocess=bool(multiprocess_dir()))


@worker_shutdown.connect
def _stop(sender: Any = None, **_: object) -> None:
    if not _ours(sender):
        return
    # Leave the registry of live workers: a clean shutdown put its messages back, so nobody
    # needs to declare it dead (hookline/transport/liveness.py).
    stop_process_liveness()
    if _releaser is not None:
        _releaser.stop()
    if _reconciler is not None:
        _reconciler.stop()
    if _relay is not None:
        _relay.stop()
    if _metrics_server is not None:
        _metrics_server.shutdown()
        _metrics_server.server_close()
