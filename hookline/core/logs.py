"""Structured log lines: one per attempt and per state change, with a stable event name.

``log_event("delivery.succeeded", endpoint_id=..., ...)`` writes ``delivery.succeeded
endpoint_id=ep_1 ...`` as text, or one JSON object per line with ``HOOKLINE_LOG_FORMAT=json``.
Callers pass identifiers, statuses and timings only: never a secret, signature or payload.
Fields with the names in :data:`REDACTED_FIELDS` are replaced, should a caller pass one anyway,
and every text field goes through :func:`hookline.core.redact.text` (no URL credential or
token in a line).

JSON lines come from python-json-logger (:class:`JsonFormatter`): ``time``, ``level``,
``logger``, then the event's fields (or ``message`` for any other line) and ``traceback`` when
the record carries an exception. :func:`configure_worker_logging` sets that up, with
:class:`~hookline.core.redact.RedactingFilter`, on the handlers of Hookline's own worker
process only: a host process's loggers are never touched.

Each HTTP attempt gives exactly one line with ``endpoint_id``, ``event_id``, ``event_type``,
``attempt``, ``status`` (absent when no response came), ``latency`` and ``error`` (when there
was one): ``delivery.succeeded``, ``delivery.retry_scheduled``, ``delivery.gave_up`` (retries
over: ``reason`` exhausted or expired) or ``delivery.rejected`` (the answer ends the event:
``reason`` rejected, refused or endpoint_gone). State changes have their own lines:
``delivery.deferred``, ``delivery.duplicate``, ``delivery.dead_lettered``, ``breaker.opened``,
``breaker.half_open``, ``breaker.closed``, ``endpoint.blocked``, ``endpoint.disabled``,
``schedule.*`` and ``metrics.*``.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from hookline.core import redact

log = logging.getLogger("hookline")

#: Field names whose values never reach a log line.
REDACTED_FIELDS = frozenset({"secret", "secrets", "signature", "payload", "body", "headers",
                             "url", "response"})


@functools.cache
def _json_formatter() -> type[logging.Formatter]:
    """The JSON formatter class, built on first use: python-json-logger is loaded by a
    process that writes JSON lines, not by every process that imports this module."""
    from pythonjsonlogger.json import JsonFormatter as Library

    class JsonFormatter(Library):
        """One JSON object per line (python-json-logger): time, level, logger, then the event's
        fields (``log_event``) or ``message``; ``traceback`` for a record with an exception,
        ``stack`` with stack info. Other ``extra`` attributes of a record are left out (Celery's
        task lines carry the task's arguments in one)."""

        def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord,
                       message_dict: dict[str, Any]) -> None:
            log_data["time"] = round(record.created, 3)
            log_data["level"] = record.levelname.lower()
            log_data["logger"] = record.name
            fields = getattr(record, "hookline", None)
            if isinstance(fields, dict):
                log_data.update(fields)
            else:
                log_data["message"] = record.getMessage()
            if message_dict.get("exc_info"):
                log_data["traceback"] = message_dict["exc_info"]
            if message_dict.get("stack_info"):
                log_data["stack"] = message_dict["stack_info"]

        def formatException(self, ei: Any) -> str:
            return redact.text(str(super().formatException(ei)))

    return JsonFormatter


def __getattr__(name: str) -> Any:
    if name == "JsonFormatter":
        return _json_formatter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def log_event(name: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log event ``name`` with ``fields``, text or JSON as configured."""
    from hookline.core.config import settings  # the settings once a line is written

    fields = {key: "[redacted]" if key in REDACTED_FIELDS
              else redact.text(value) if isinstance(value, str) else value
              for key, value in fields.items() if value is not None}
    if settings().log_format == "json":
        log.log(level, name, extra={"hookline": {"event": name, **fields}})
        return
    text = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
    log.log(level, "%s %s", name, text, extra={"hookline": {"event": name, **fields}})


def _text(value: Any) -> str:
    """A field's value in a text line: quoted (JSON, so escaped) when it holds a space, a
    quote, an ``=`` or anything unprintable, so a value can never start a forged field or
    line."""
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    plain = text and text.isprintable() and not any(c in text for c in ' "=')
    return text if plain else json.dumps(text)


def configure_worker_logging(logger: logging.Logger, *, json_lines: bool) -> None:
    """For Hookline's own worker process: every handler of ``logger`` redacts URLs (messages
    and tracebacks, whichever library logged them: urllib3's DEBUG lines, Celery's task
    failures) and, with ``json_lines``, writes JSON lines. Never called in a host's process."""
    for handler in logger.handlers:
        if not any(isinstance(f, redact.RedactingFilter) for f in handler.filters):
            handler.addFilter(redact.RedactingFilter())
        if json_lines:
            handler.setFormatter(_json_formatter()())


def configure_json_logging(logger: logging.Logger | None = None) -> None:
    """JSON lines, redacted, on every handler of ``logger`` (default: the root logger), for a
    process that is Hookline's own (``hookline releaser``)."""
    configure_worker_logging(logger or logging.getLogger(), json_lines=True)
