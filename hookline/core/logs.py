"""Structured log lines: one per attempt and per state change, with a stable event name.

``log_event("delivery.succeeded", endpoint_id=..., ...)`` writes ``delivery.succeeded
endpoint_id=ep_1 ...`` as text, or one JSON object per line with ``HOOKLINE_LOG_FORMAT=json``.
Callers pass identifiers, statuses and timings only: never a secret, signature or payload.
Fields with the names in :data:`REDACTED_FIELDS` are replaced, should a caller pass one anyway.

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

import json
import logging
from typing import Any

from hookline.core.config import settings

log = logging.getLogger("hookline")

#: Field names whose values never reach a log line.
REDACTED_FIELDS = frozenset({"secret", "secrets", "signature", "payload", "body", "headers",
                             "url", "response"})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, event name and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "hookline", None)
        document: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if fields is None:
            document["message"] = record.getMessage()
        else:
            document.update(fields)
        return json.dumps(document, default=str)


def log_event(name: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log event ``name`` with ``fields``, text or JSON as configured."""
    fields = {key: "[redacted]" if key in REDACTED_FIELDS else value
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


def configure_json_logging(logger: logging.Logger | None = None) -> None:
    """Make every handler of ``logger`` (default: the root logger) write JSON lines."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        handler.setFormatter(JsonFormatter())
