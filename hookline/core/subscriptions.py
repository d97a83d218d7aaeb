"""Who receives a published event: applications, event-type filters and channels, and the
one matching rule, written once. Pure: no Redis, no Celery.

An endpoint of an application *matches* an event when both hold:

- its event-type filter matches the event's type, or it has no filter (every type);
- it has no channels, or the event carries at least one of its channels.

A filter is a list of patterns. A pattern is an exact type (``order.created``), a trailing
wildcard (``order.*``: every type below ``order.``, at any depth: ``order.created`` and
``order.item.added``, not ``order`` itself) or ``*`` alone (every type). A type is one or more
dot-separated segments of letters, digits, ``_`` and ``-``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from hookline.core.errors import InvalidField
from hookline.core.event import ENDPOINT_ID_PATTERN, shown

#: One segment of an event type in a filter or the catalog.
_SEGMENT = r"[A-Za-z0-9_-]+"
#: An event type name the catalog and filters accept (``order.created``).
TYPE_NAME_PATTERN = re.compile(rf"\A{_SEGMENT}(?:\.{_SEGMENT})*\Z")
#: A pattern of an endpoint's event-type filter: an exact name, ``prefix.*`` or ``*``.
FILTER_PATTERN = re.compile(rf"\A(?:\*|{_SEGMENT}(?:\.{_SEGMENT})*(?:\.\*)?)\Z")
#: A channel name (Svix's alphabet): letters, digits, ``_``, ``-``, ``.`` and ``:``.
CHANNEL_PATTERN = re.compile(r"\A[A-Za-z0-9_.:-]{1,128}\Z")
#: Longest type name or filter pattern, characters (as long as an event type may be).
MAX_TYPE_LENGTH = 200
#: Most patterns in one endpoint's event-type filter.
MAX_FILTERS = 100
#: Most channels on one endpoint.
MAX_ENDPOINT_CHANNELS = 100
#: Most channels one published event carries (Svix allows 10; so does Hookline).
MAX_EVENT_CHANNELS = 10
#: The word that clears a filter or channel list on the command line.
NONE_WORD = "none"


class SubscriptionError(InvalidField):
    """A bad application id, filter or channel; the message names it."""


def check_app_id(app_id: Any) -> str:
    """An application id: as an endpoint id, 1-64 letters, digits, ``_``, ``.`` or ``-``,
    starting with a letter or digit (it names Redis keys as a hash tag)."""
    if not isinstance(app_id, str) or not ENDPOINT_ID_PATTERN.match(app_id):
        raise SubscriptionError(
            "app_id", f"application id {shown(app_id)} is invalid: use 1-64 letters, digits, "
                      "'_', '.' or '-', starting with a letter or digit")
    return app_id


def check_type_name(name: Any, field: str = "event_type") -> str:
    """A catalog type name: dot-separated segments of letters, digits, ``_`` and ``-``."""
    if (not isinstance(name, str) or len(name) > MAX_TYPE_LENGTH
            or not TYPE_NAME_PATTERN.match(name)):
        raise SubscriptionError(
            field, f"event type {shown(name)} is invalid: use dot-separated segments of "
                   f"letters, digits, '_' and '-' (e.g. order.created), at most "
                   f"{MAX_TYPE_LENGTH} characters")
    return name


def check_filter(pattern: Any) -> str:
    """One event-type filter pattern: ``order.created``, ``order.*`` or ``*``."""
    if (not isinstance(pattern, str) or len(pattern) > MAX_TYPE_LENGTH
            or not FILTER_PATTERN.match(pattern)):
        raise SubscriptionError(
            "events", f"event filter {shown(pattern)} is invalid: use an event type "
                      "(order.created), a prefix ending in '.*' (order.*) or '*' alone; '*' "
                      "stands only for whole segments at the end")
    return pattern


def check_channel(channel: Any, field: str = "channels") -> str:
    if not isinstance(channel, str) or not CHANNEL_PATTERN.match(channel):
        raise SubscriptionError(
            field, f"channel {shown(channel)} is invalid: use 1-128 letters, digits, '_', "
                   "'-', '.' or ':'")
    return channel


def _items(value: str | Iterable[str] | None, field: str) -> list[str]:
    """A comma-separated string or an iterable of strings, as a list (empty items dropped
    from a string only: ``a,,b`` is a typo worth forgiving, an empty item in a list is not)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if not isinstance(value, Iterable):
        raise SubscriptionError(field, f"{field} must be a list of strings, got {shown(value)}")
    return list(value)


def parse_filters(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """An endpoint's event-type filter, checked, without repeats, in the order given. An empty
    filter (or ``none``) means every type."""
    items = _items(value, "events")
    if items == [NONE_WORD]:
        return ()
    patterns = tuple(dict.fromkeys(check_filter(item) for item in items))
    if len(patterns) > MAX_FILTERS:
        raise SubscriptionError("events", f"an endpoint takes at most {MAX_FILTERS} event "
                                          f"filters, got {len(patterns)}")
    return patterns


def parse_channels(value: str | Iterable[str] | None, *, limit: int = MAX_ENDPOINT_CHANNELS,
                   field: str = "channels") -> tuple[str, ...]:
    """Channels, checked, without repeats (``none`` alone: no channels)."""
    items = _items(value, field)
    if items == [NONE_WORD]:
        return ()
    channels = tuple(dict.fromkeys(check_channel(item, field) for item in items))
    if len(channels) > limit:
        raise SubscriptionError(field, f"at most {limit} channels, got {len(channels)}")
    return channels


def type_matches(pattern: str, event_type: str) -> bool:
    """Whether one filter pattern matches ``event_type``."""
    if pattern == "*" or pattern == event_type:
        return True
    if pattern.endswith(".*"):
        prefix = pattern[:-1]  # 'order.'
        return len(event_type) > len(prefix) and event_type.startswith(prefix)
    return False


def subscribed(filters: Collection[str], channels: Collection[str], event_type: str,
               event_channels: Collection[str]) -> bool:
    """The matching rule (module docstring): the type filter, then the channels."""
    if filters and not any(type_matches(pattern, event_type) for pattern in filters):
        return False
    return not channels or not set(channels).isdisjoint(event_channels)


def unknown_filters(filters: Iterable[str], catalog: Collection[str]) -> list[str]:
    """The patterns of ``filters`` that match no type of ``catalog`` (refused once the
    catalog is in use: a typo would otherwise subscribe to nothing, silently)."""
    return [pattern for pattern in filters
            if not any(type_matches(pattern, name) for name in catalog)]
