"""Times and ages as people type them (``15m``, ``2h``, ``1d``, Unix seconds, ISO 8601) and
as a bookmarkable URL carries them: the dead-letter filters' words, for every face.

Pure: no Redis, no Celery.
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

TIME_HELP = "Unix seconds, ISO 8601, or an age such as 15m, 2h, 1d (meaning that long ago)"
#: Seconds per unit of a relative age.
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
AGE_PATTERN = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


def parse_time(text: str, *, now: float | None = None) -> float:
    """Unix seconds from ``1764435133``, ``2026-11-29T16:52:13+00:00`` (local time when no
    offset is given) or an age ``15m`` / ``2h`` / ``1d`` before ``now``."""
    text = text.strip()
    age = AGE_PATTERN.match(text)
    if age:
        return (time.time() if now is None else now) - float(age[1]) * AGE_UNITS[age[2]]
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use {TIME_HELP}") from None


def parse_age(text: str) -> float:
    """Seconds from ``30d``, ``12h``, ``90m`` or plain seconds."""
    text = text.strip()
    age = AGE_PATTERN.match(text)
    if age:
        return float(age[1]) * AGE_UNITS[age[2]]
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not an age: use seconds or e.g. 90m, 12h, 30d")
    return seconds


def format_time_param(seconds: float) -> str:
    """A time for a URL a person may read and bookmark: ISO 8601 in UTC, to the microsecond
    when it has a fraction (``parse_time`` reads it back to the same microsecond)."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if moment.microsecond == 0:
        return moment.isoformat(timespec="seconds")
    return moment.isoformat(timespec="microseconds")
