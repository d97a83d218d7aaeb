"""How the ``hookline`` command prints: plain aligned tables for people, JSON for scripts.

Tables are plain text (no colours, no wrapping) so that they survive pipes, ``grep`` and logs;
``--json`` output has sorted keys so that it is stable from one release to the next.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import click
import redis
from redis.sentinel import MasterNotFoundError

from hookline.core import redact
from hookline.core.config import settings

#: Widest a free-text cell (an error message, a URL) gets in a table.
MAX_CELL_WIDTH = 60


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def printable(text: str) -> str:
    """``text`` with each control, line-break or invisible character escaped (``\\n``,
    ``\\x1b``): a value that came in malformed (a dead letter's event id) cannot move the
    cursor, forge a line or hide itself on an operator's terminal."""
    if text.isprintable():
        return text
    return "".join(character if character.isprintable()
                   else character.encode("unicode_escape").decode("ascii")
                   for character in text)


def readable_json(value: Any) -> str:
    """``value`` as indented JSON for people: non-ASCII text as it is, unless some cannot be
    written as UTF-8 (a lone surrogate), then escaped."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, indent=2, sort_keys=True, default=str)
    return text


def shorten(text: str, width: int = MAX_CELL_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def echo_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns padded to their widest cell; ``None`` prints as ``-``."""
    cells = [["-" if value is None else printable(str(value)) for value in row] for row in rows]
    widths = [max([len(header), *(len(row[i]) for row in cells)]) for i, header in
              enumerate(headers)]
    for row in [[header.upper() for header in headers], *cells]:
        click.echo("  ".join(cell.ljust(width) for cell, width in
                             zip(row, widths, strict=True)).rstrip())


def field_lines(fields: Iterable[tuple[str, Any]]) -> list[str]:
    """``name: value`` lines with the values aligned; ``None`` prints as ``-``."""
    pairs = [(name, "-" if value is None else printable(str(value))) for name, value in fields]
    width = max((len(name) for name, _ in pairs), default=0) + 1
    return [f"{name + ':':<{width}} {value}" for name, value in pairs]


def echo_fields(fields: Iterable[tuple[str, Any]]) -> None:
    for line in field_lines(fields):
        click.echo(line)


def watch_frames(render: Callable[[], str], *, interval: float, iterations: int | None = None,
          redraw: bool = True) -> None:
    """Print ``render()`` every ``interval`` seconds until Ctrl-C, or ``iterations`` times.

    With ``redraw`` each frame replaces the last on a terminal (cleared, then drawn at once,
    so it does not flicker); piped, frames simply follow each other.
    """
    shown = 0
    try:
        while True:
            frame = render()
            if redraw:
                click.clear()  # nothing when stdout is not a terminal
            click.echo(frame)
            shown += 1
            if iterations is not None and shown >= iterations:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def format_age(seconds: float) -> str:
    """``45s``, ``12m``, ``3h``, ``2d``: the largest whole unit."""
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def format_time(timestamp: float | None, *, now: float | None = None) -> str | None:
    """Local time with its age, ``2026-11-29 16:52:13 (5m ago)``; None stays None."""
    if timestamp is None:
        return None
    now = time.time() if now is None else now
    when = datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")
    age = format_age(now - timestamp)
    return f"{when} ({age} ago)" if now >= timestamp else f"{when} (in {age})"


def redacted(url: str) -> str:
    """``url`` with any password replaced by ``***``, fit for an error message."""
    return redact.server(url)


def redis_failure(exc: redis.RedisError, url: str, variable: str) -> click.ClickException:
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        problem = "does not answer"
    else:
        problem = "failed"
    detail = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, MasterNotFoundError):  # its message is the Sentinel clients' repr
        detail = ("no Sentinel answered with a master named "
                  f"{settings().sentinel_master!r} (HOOKLINE_SENTINEL_MASTER)")
    return click.ClickException(f"Redis at {redacted(url)} ({variable}) {problem}: {detail}")
