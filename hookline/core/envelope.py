"""Reading a broker message: the task id and arguments inside the JSON envelope kombu's Redis
transport pushes (``{"body": <base64 of [args, kwargs, embed]>, "headers": ..., "properties":
...}``), as the retry schedule keeps it and a listing shows it.

Pure: JSON and base64 only. Building one needs Celery and kombu, so it is the transport's
(``hookline.transport.envelope.build_message``).
"""

from __future__ import annotations

import base64
import json
from typing import Any


def decode_message(message: str) -> tuple[list[Any], dict[str, Any]]:
    """The task arguments inside a broker message
    (``hookline.transport.envelope.build_message``)."""
    _task_id, args, kwargs = decode_task(message)
    return args, kwargs


def decode_task(message: str) -> tuple[str, list[Any], dict[str, Any]]:
    """The task id ("" if none) and arguments inside a broker message."""
    headers, args, kwargs = decode_headed(message)
    return str(headers.get("id") or ""), args, kwargs


def decode_headed(message: str) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
    """The headers (the task id, the trace context, ...) and arguments of a broker message."""
    envelope = json.loads(message)
    body = envelope["body"]
    if envelope["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs, _embed = json.loads(body)
    headers = envelope.get("headers")
    return (headers if isinstance(headers, dict) else {}), list(args), dict(kwargs)
