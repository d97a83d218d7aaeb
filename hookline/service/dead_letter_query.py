"""Which dead letters a view or an action is about: :class:`DeadLetterQuery`, read from a
query string or a form and written back to one (``from_params``, ``to_params``: a view can be
bookmarked), each bad value refused in one line naming it (:class:`InvalidQuery`).

Re-exported by :mod:`hookline.service.dead_letters`, where the faces find it. A listing is
newest first unless ``order=oldest`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hookline.core.event import ENDPOINT_ID_PATTERN, recorded_id
from hookline.core.times import format_time_param
from hookline.service.pages import InvalidQuery as InvalidQuery  # the faces find it here
from hookline.service.pages import time_param
from hookline.store.dead_letter_queue import REASONS, DeadLetterFilter

#: The orders a listing can be read in.
ORDERS = ("oldest", "newest")
#: The order a listing is read in unless ``order=`` says otherwise: the latest failures first.
DEFAULT_ORDER = "newest"
#: The parameters a query reads and writes (``to_params`` keys).
PARAMS = ("endpoint", "reason", "status", "since", "until", "min_attempts", "max_attempts",
          "order")


def _param(name: str) -> str:
    return name


@dataclass(frozen=True)
class DeadLetterQuery:
    """Which dead letters a view or an action is about (see the module's docstring)."""

    endpoint: str | None = None
    reason: str | None = None
    status: int | None = None
    since: float | None = None
    until: float | None = None
    min_attempts: int | None = None
    max_attempts: int | None = None
    ids: tuple[str, ...] = ()
    order: str = "newest"

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> DeadLetterQuery:
        """From a query string's values (empty ones ignored, other keys too, e.g. a cursor)."""
        given = {name: str(params[name]).strip() for name in PARAMS
                 if params.get(name) is not None and str(params[name]).strip()}
        query = cls(
            endpoint=_endpoint(given.get("endpoint")),
            reason=_reason(given.get("reason")),
            status=_count("status", given.get("status"), high=599),
            since=time_param("since", given.get("since")),
            until=time_param("until", given.get("until")),
            min_attempts=_count("min_attempts", given.get("min_attempts")),
            max_attempts=_count("max_attempts", given.get("max_attempts")),
            order=_order(given.get("order")),
        )
        return query.checked()

    def to_params(self) -> dict[str, str]:
        """The query as query-string values (the ones set): ``from_params`` reads them back."""
        values: dict[str, Any] = {
            "endpoint": self.endpoint, "reason": self.reason, "status": self.status,
            "since": None if self.since is None else format_time_param(self.since),
            "until": None if self.until is None else format_time_param(self.until),
            "min_attempts": self.min_attempts, "max_attempts": self.max_attempts,
            "order": None if self.order == DEFAULT_ORDER else self.order}
        return {name: str(value) for name, value in values.items() if value is not None}

    def checked(self, spell: Any = _param) -> DeadLetterQuery:
        """The query, if its ranges are not empty; ``spell`` writes a parameter's name as the
        caller's users know it (``--since`` for the CLI)."""
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidQuery("since", f"{spell('since')} is later than {spell('until')}: "
                                        "the range is empty")
        if (self.min_attempts is not None and self.max_attempts is not None
                and self.min_attempts > self.max_attempts):
            raise InvalidQuery("min_attempts", f"{spell('min_attempts')} is above "
                                               f"{spell('max_attempts')}: the range is empty")
        return self

    @property
    def narrowed(self) -> bool:
        """Whether the query selects less than every dead letter."""
        return bool(self.ids) or any(value is not None for value in (
            self.endpoint, self.reason, self.status, self.since, self.until,
            self.min_attempts, self.max_attempts))

    def selection(self) -> DeadLetterFilter:
        return DeadLetterFilter(endpoint_id=self.endpoint, reason=self.reason,
                                since=self.since, until=self.until, ids=self.ids,
                                min_attempts=self.min_attempts,
                                max_attempts=self.max_attempts, last_status=self.status)


def require_selection(query: DeadLetterQuery, select_all: bool, *, spell: Any = _param,
                      all_flag: str = "all") -> DeadLetterQuery:
    """An action on every dead letter must say so (``select_all``), and saying so excludes
    any filter: the selection is then exactly what the operator meant."""
    if select_all and query.narrowed:
        raise InvalidQuery("all", f"{all_flag} selects every dead letter: give it without ids "
                                  "or filters")
    if not select_all and not query.narrowed:
        names = ", ".join(spell(name) for name in ("endpoint", "reason", "status", "since",
                                                    "until", "min_attempts", "max_attempts"))
        raise InvalidQuery("all", f"refusing to act on every dead letter: give entry ids, a "
                                  f"filter ({names}) or {all_flag}")
    return query


def lookup_id(given: str) -> str:
    """An entry id (``ENDPOINT/EVENT_ID``) or event id as a dead letter records it: an
    overlong event id is recorded by its start and length (``recorded_id``), so the id as it
    was sent still finds its entry."""
    endpoint_id, slash, event_id = given.partition("/")
    return f"{endpoint_id}/{recorded_id(event_id)}" if slash else recorded_id(given)


def _endpoint(text: str | None) -> str | None:
    if text is not None and not ENDPOINT_ID_PATTERN.match(text):
        raise InvalidQuery("endpoint", f"endpoint {text[:70]!r} is not an endpoint id")
    return text


def _reason(text: str | None) -> str | None:
    if text is not None and text not in REASONS:
        raise InvalidQuery("reason", f"reason {text[:40]!r} is not one of "
                                     f"{', '.join(sorted(REASONS))}")
    return text


def _count(name: str, text: str | None, *, high: int = 10**9) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > high:
        raise InvalidQuery(name, f"{name} {text[:20]!r} is not a whole number from 0 to {high}")
    return int(text)


def _order(text: str | None) -> str:
    if text is None:
        return DEFAULT_ORDER
    if text not in ORDERS:
        raise InvalidQuery("order", f"order {text[:20]!r} is not one of {', '.join(ORDERS)}")
    return text


def newest_first(query: DeadLetterQuery) -> DeadLetterQuery:
    """The same query, listed newest first (the default order)."""
    return replace(query, order="newest")
