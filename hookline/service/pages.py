"""One page of a list the service answers: its items and the cursor of the next page.

Every list a face shows is paginated (10,000 endpoints, 100,000 dead letters): the face passes
back ``next_cursor`` as an opaque string to get the following page, and ``None`` means the list
ends here. A list read through time indexes (the dead letters, the event log) resumes after a
:class:`~hookline.store.dead_letter_index.Position`, which its cursor carries
(:func:`cursor_after`, :func:`position_after`). A list's filters come from a query string;
a bad one is :class:`InvalidQuery`, naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hookline.core.errors import InvalidField
from hookline.core.times import parse_time
from hookline.store.dead_letter_index import Position

T = TypeVar("T")

#: The most items any page holds, whatever a caller asks for.
MAX_LIMIT = 500


@dataclass(frozen=True)
class Page(Generic[T]):
    """``items`` in the list's order; ``next_cursor`` is opaque, ``None`` on the last page."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None
    #: False: the page stopped at its budget of rows examined (a rare filter): what matched
    #: so far is shown, and the next page goes on from there.
    complete: bool = True


class InvalidQuery(InvalidField):
    """A filter value refused; the message names the parameter and says what is wrong."""


def time_param(name: str, text: str | None) -> float | None:
    """A time parameter (``since``, ``until``, a purge's ``as_of``) as Unix seconds, to the
    microsecond (None when not given); InvalidQuery names it."""
    text = text.strip() if text else None
    if text is None:
        return None
    try:
        return round(parse_time(text), 6)
    except ValueError as exc:
        raise InvalidQuery(name, f"{name}: {exc}") from None


def bounded_limit(limit: int) -> int:
    """A page size between 1 and :data:`MAX_LIMIT`: a face's parameter cannot ask for all."""
    return max(1, min(int(limit), MAX_LIMIT))


def cursor_after(position: Position | None) -> str | None:
    """The cursor of the page that starts after ``position`` (None: the list ended)."""
    if position is None:
        return None
    raw = json.dumps([position.at, position.entry_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def position_after(cursor: str | None, listing: str) -> Position | None:
    """Where the page of ``cursor`` starts (None: the first page); a cursor that is not one of
    :func:`cursor_after`'s is ``InvalidField`` naming the ``listing`` ("a dead-letter")."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, entry_id = json.loads(raw)
        return Position(float(at), str(entry_id))
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidField("cursor", f"cursor {cursor[:40]!r} is not {listing} "
                                     "position") from None
