"""One page of a list the service answers: its items and the cursor of the next page.

Every list a face shows is paginated (10,000 endpoints, 100,000 dead letters): the face passes
back ``next_cursor`` as an opaque string to get the following page, and ``None`` means the list
ends here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

#: The most items any page holds, whatever a caller asks for.
MAX_LIMIT = 500


@dataclass(frozen=True)
class Page(Generic[T]):
    """``items`` in the list's order; ``next_cursor`` is opaque, ``None`` on the last page."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None


def bounded_limit(limit: int) -> int:
    """A page size between 1 and :data:`MAX_LIMIT`: a face's parameter cannot ask for all."""
    return max(1, min(int(limit), MAX_LIMIT))
