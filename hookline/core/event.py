"""What a valid event is: the checks every way in applies (``send_webhook``, ``hookline send``,
the Django and Flask helpers, the worker's task for ``deliver.delay()``, a replay), written once.
Pure: no Redis, no Celery.

Each check raises :class:`MalformedEvent` (an :class:`~hookline.core.errors.InvalidField`) whose
message starts with the field's name; a door turns it into its own error (``WebhookInputError``,
a CLI ``Error:``) or, in the worker, a dead letter with reason ``malformed``. A message shows a
refused value through :func:`shown`: quoted, escaped and cut short, so that neither a control
character nor a megabyte of input reaches a terminal or a log line.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import time
from datetime import datetime
from typing import Any

from hookline.core.errors import InvalidField

#: What an endpoint id may be: it names Redis keys (as a hash tag) and metric labels. ``\Z``,
#: not ``$``: ``$`` also matches before a final newline.
ENDPOINT_ID_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
#: Longest event id, characters (it is the webhook-id header and part of Redis keys).
MAX_EVENT_ID_LENGTH = 200
#: What an event id may be: visible ASCII, no space. It is sent as the ``webhook-id`` and
#: ``Idempotency-Key`` headers, which carry nothing else safely (and it is signed as UTF-8
#: while a header goes out as Latin-1).
EVENT_ID_PATTERN = re.compile(rf"\A[!-~]{{1,{MAX_EVENT_ID_LENGTH}}}\Z")
#: Longest event type, characters.
MAX_EVENT_TYPE_LENGTH = 200
#: Deepest nesting of objects and arrays in a payload. Receivers' JSON parsers stop somewhere
#: (Ruby's at 100 by default); Python's own stop near 1,000 with a RecursionError.
MAX_PAYLOAD_DEPTH = 64
#: Latest time a deadline may name, seconds from now (ten years): later is no deadline at all.
MAX_DEADLINE_AHEAD = 10 * 365.25 * 86400
#: Largest Unix time accepted anywhere (the last second of year 9999, datetime's limit).
MAX_TIMESTAMP = 253402300799.0
#: The endpoint a dead letter is filed under when the delivery's own endpoint id was invalid
#: (the id as sent is in the entry's ``detail``).
INVALID_ENDPOINT = "invalid"
#: Characters of a refused value shown in an error message.
SHOWN_LENGTH = 60

_CONTAINERS = (dict, list, tuple)
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = SHOWN_LENGTH
#: A JSON string (skipped) or a bracket (counted) in JSON text.
#: An unclosed string runs to the end, so the scan stays linear on any text.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]', re.DOTALL)


class MalformedEvent(InvalidField):
    """An event field that can never be delivered as it is; ``field`` names it."""


def shown(value: Any, limit: int = SHOWN_LENGTH) -> str:
    """``value`` fit for an error message: its ``repr`` (control characters escaped), a long
    string cut to ``limit`` characters with its length said, a container a few levels deep."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else (
            f"{value[:limit]!r}... ({len(value)} characters)")
    return _SHORT_REPR.repr(value)


def _matching(field: str, value: Any, pattern: re.Pattern[str], rule: str) -> str:
    """``value`` when it is a string ``pattern`` matches; otherwise the field's error, which
    names it, shows the value and says the ``rule``."""
    if not isinstance(value, str) or not pattern.match(value):
        raise MalformedEvent(field, f"{field.replace('_', ' ')} {shown(value)} is invalid: "
                                    f"use {rule}")
    return value


def check_endpoint_id(endpoint_id: Any) -> str:
    """An endpoint id: 1-64 letters, digits, ``_``, ``.`` or ``-``, starting with a letter or
    digit."""
    return _matching("endpoint_id", endpoint_id, ENDPOINT_ID_PATTERN,
                     "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit")


def check_event_id(event_id: Any) -> str:
    """An event id: 1-200 visible ASCII characters (no space, no control character)."""
    return _matching("event_id", event_id, EVENT_ID_PATTERN,
                     f"1-{MAX_EVENT_ID_LENGTH} visible ASCII characters (no spaces or control "
                     "characters: it is sent as the webhook-id header)")


def check_ordering_key(key: Any) -> str | None:
    """An ordering key (``hookline.core.ordering``): None, or 1-200 visible ASCII characters,
    as an event id (it is sent as the ``hookline-ordering-key`` header)."""
    if key is None:
        return None
    return _matching("ordering_key", key, EVENT_ID_PATTERN,
                     f"1-{MAX_EVENT_ID_LENGTH} visible ASCII characters (no spaces or control "
                     "characters: it is sent as a header)")


def check_text(field: str, value: Any, *, limit: int, empty: bool = False) -> str:
    """Free text that reaches log lines and terminals (``field`` names it in the message):
    at most ``limit`` characters, none of them a control or line-breaking character, which
    would forge log entries."""
    name = field.replace("_", " ")
    if not isinstance(value, str):
        raise MalformedEvent(field, f"{name} must be a string, got {shown(value)}")
    if not value and not empty:
        raise MalformedEvent(field, f"{name} must not be empty")
    if len(value) > limit:
        raise MalformedEvent(field, f"{name} {shown(value)} is longer than {limit} characters")
    if not value.isprintable():
        raise MalformedEvent(field, f"{name} {shown(value)} holds a control, line-break or "
                                    "invisible character")
    return value


def check_event_type(event_type: Any) -> str:
    """An event type: 1-200 printable characters."""
    return check_text("event_type", event_type, limit=MAX_EVENT_TYPE_LENGTH)


def nested_deeper_than(payload: Any, limit: int) -> bool:
    """True if ``payload`` nests objects and arrays more than ``limit`` deep. Iterative, one
    level at a time: no recursion to overflow, and a payload that contains itself is simply
    too deep."""
    level = [payload]
    for _ in range(limit):
        containers = [item for item in level if isinstance(item, _CONTAINERS)]
        if not containers:
            return False
        level = []
        for container in containers:
            level.extend(container.values() if isinstance(container, dict) else container)
    return any(isinstance(item, _CONTAINERS) for item in level)


def check_payload(payload: Any, *, max_bytes: int | None = None) -> str:
    """The payload as compact JSON (what its size is measured on, so a caller serialises it
    once); refused if nested deeper than :data:`MAX_PAYLOAD_DEPTH`, not JSON, holding text
    that is not UTF-8 (a lone surrogate) or longer than ``max_bytes`` once encoded."""
    if nested_deeper_than(payload, MAX_PAYLOAD_DEPTH):
        raise MalformedEvent("payload", f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} "
                                        "levels of objects and arrays")
    try:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MalformedEvent("payload", f"payload is not JSON-serialisable: {exc}") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise MalformedEvent(
            "payload", f"payload holds text that cannot be encoded as UTF-8 "
                       f"({exc.reason}: {shown(exc.object[exc.start:exc.end])})") from None
    if max_bytes is not None and size > max_bytes:
        raise MalformedEvent("payload", f"payload is {size} bytes; the limit is {max_bytes} "
                                        "(HOOKLINE_MAX_PAYLOAD_BYTES)")
    return text


def parse_json_text(field: str, text: str) -> Any:
    """JSON text given by a person (a CLI option) -> its value; its nesting is measured on the
    text first, so a deep document is refused instead of overflowing the parser."""
    depth = deepest = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    if deepest > MAX_PAYLOAD_DEPTH:
        raise MalformedEvent(field, f"{field} is nested deeper than {MAX_PAYLOAD_DEPTH} levels "
                                    "of objects and arrays")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedEvent(field, f"{field} {shown(text)} is not valid JSON: {exc}") from None


def to_timestamp(value: Any, *, name: str) -> float | None:
    """A time as Unix seconds from a number, a datetime or an ISO 8601 string; finite, from
    1970 to year 9999."""
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        seconds = float(value) if -1e300 < value < 1e300 else math.nan
    elif isinstance(value, datetime):
        seconds = _datetime_seconds(value)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            seconds = _datetime_seconds(datetime.fromisoformat(value))
        except ValueError:
            seconds = None
    if seconds is None:
        raise MalformedEvent(name, f"{name} must be Unix seconds or an ISO 8601 time, got "
                                   f"{shown(value)}")
    if not 0 <= seconds <= MAX_TIMESTAMP:
        raise MalformedEvent(name, f"{name} {shown(value)} is not a time between 1970 and year "
                                   "9999")
    return seconds


def _datetime_seconds(value: datetime) -> float:
    try:
        return value.timestamp()
    except (OverflowError, OSError, ValueError):
        return math.nan


def check_deadline(value: Any, *, now: float | None = None) -> float | None:
    """A deadline as Unix seconds (None: none): a time from 1970 to ten years from now."""
    seconds = to_timestamp(value, name="deadline")
    now = time.time() if now is None else now
    if seconds is not None and seconds > now + MAX_DEADLINE_AHEAD:
        raise MalformedEvent("deadline", f"deadline {shown(value)} is more than ten years away: "
                                         "give a real deadline, or none")
    return seconds


def check_count(name: str, value: Any, *, limit: int = 2**53) -> int:
    """A non-negative whole number up to ``limit`` (the task's bookkeeping counters)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise MalformedEvent(name, f"{name} must be a whole number from 0 to {limit}, got "
                                   f"{shown(value)}")
    return value


def recorded_id(value: Any, limit: int = MAX_EVENT_ID_LENGTH) -> str:
    """How a dead letter records an identifier that may be invalid (a malformed delivery's
    event id): as it is when it fits in ``limit`` characters, else its start and its length.
    A lookup (``hookline event show ID``, ``hookline dlq show``) applies the same to the id it
    is given, so a malformed event is found by its own id, however long."""
    text = value if isinstance(value, str) else shown(value, limit)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} characters)"


#: Deepest payload a dead letter keeps as it is; a deeper one (only ``deliver.delay()`` can
#: send one) is replaced by a note, so that storing it can never overflow the JSON encoder.
MAX_KEPT_DEPTH = 4 * MAX_PAYLOAD_DEPTH


def kept_payload(payload: Any) -> Any:
    """``payload`` as a dead letter keeps it: itself, or a note if it is nested too deep."""
    if nested_deeper_than(payload, MAX_KEPT_DEPTH):
        return f"<payload not kept: nested deeper than {MAX_KEPT_DEPTH} levels>"
    return payload


def validate_event(endpoint_id: Any, event_type: Any, payload: Any, event_id: Any, *,
                   max_bytes: int | None = None) -> str:
    """Raise :class:`MalformedEvent` naming the first field that is wrong; return the payload
    as compact JSON (what its size is measured on), so a caller serialises it once."""
    check_endpoint_id(endpoint_id)
    check_event_type(event_type)
    check_event_id(event_id)
    return check_payload(payload, max_bytes=max_bytes)
