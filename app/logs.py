"""Structured log lines: one per attempt and per state change, with a stable event name.

``log_event("delivery.succeeded", endpoint_id=..., ...)`` writes ``delivery.succeeded
endpoint_id=ep_1 ...`` as text, or one JSON object per line with ``HOOKLINE_LOG_FORMAT=json``.
Callers pass identifiers, statuses and timings only: never a secret, signature or payload.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from app.config import settings

log = logging.getLogger("hookline")


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
    fields = {key: value for key, value in fields.items() if value is not None}
    if settings().log_format == "json":
        log.log(level, name, extra={"hookline": {"event": name, **fields}})
        return
    text = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
    log.log(level, "%s %s", name, text, extra={"hookline": {"event": name, **fields}})


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text


def configure_json_logging(logger: logging.Logger | None = None) -> None:
    """Make every handler of ``logger`` (default: the root logger) write JSON lines."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        handler.setFormatter(JsonFormatter())
