"""What a caller gives for one event and for one endpoint, each as one typed set of arguments.

A face (``send_webhook``, the Django and Flask helpers, the outbox's writers, the CLI, the
console) builds the set once from what its user typed and passes it down, so the layers below
take one argument instead of spelling the list out again:

- :class:`EventSpec`: one event for one endpoint, before its checks
  (``hookline.core.incoming``); :class:`PublicationSpec`: one event for an application's
  subscribed endpoints;
- :class:`EndpointSpec`: an endpoint's settings, what ``EndpointRegistry.add`` and ``update``
  (and the service's ``add_endpoint`` and ``update_endpoint``) take as keyword arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

#: Names given as a comma-separated string or a sequence (event filters, channels).
Names = str | Sequence[str] | None


@dataclass(frozen=True)
class EventSpec:
    """One event for one endpoint, as :func:`hookline.send_webhook` takes it (the same
    meanings: a missing ``event_id`` is drawn when it is checked; ``deadline`` in Unix seconds
    or a datetime; ``ordering_key`` the line of an ordered endpoint it joins)."""

    endpoint_id: str
    event_type: str
    payload: Any
    event_id: str | None = None
    deadline: float | datetime | None = None
    ordering_key: str | None = None


@dataclass(frozen=True)
class PublicationSpec:
    """One event for the subscribed endpoints of application ``app_id``, as
    :func:`hookline.publish` takes it (``channels``: the channels it is published on)."""

    app_id: str
    event_type: str
    payload: Any
    event_id: str | None = None
    channels: Iterable[str] | None = None
    deadline: float | datetime | None = None
    ordering_key: str | None = None


class EndpointSpec(TypedDict, total=False):
    """An endpoint's settings as given, before their checks; each one absent or None is left
    as it is (an update) or at its default (a new endpoint). The meanings are
    :class:`hookline.core.endpoint.Endpoint`'s; beside them, ``secret`` is a signing key
    (a new endpoint without one gets one generated) and ``remove_headers`` names headers
    taken out before ``headers`` are set. On an update, ``"none"`` clears ``rate``, ``app``,
    ``event_types`` and ``channels``, and a ``max_in_flight`` of 0 removes the cap."""

    secret: str | None
    timeout: float | None
    retry_policy: Mapping[str, Any] | None
    rate: str | None
    burst: int | None
    headers: Mapping[str, str] | None
    remove_headers: Sequence[str]
    app: str | None
    event_types: Names
    channels: Names
    max_in_flight: int | None
    ordered: bool | None
    order_policy: str | None
    trace_context: bool | None


def given_settings(spec: EndpointSpec, **first: Any) -> list[str]:
    """The names of the settings given: ``first`` (a face's own, such as ``url``, named
    first), then ``spec``'s in their declared order; each not None, and ``headers`` and
    ``remove_headers`` not empty. What an update's answer and its audit entry name, never a
    value (a secret, a header's credentials)."""
    values = {**first, **{name: spec.get(name) for name in EndpointSpec.__annotations__
                          if name not in first}}
    return [name for name, value in values.items()
            if value is not None and (value or name not in ("headers", "remove_headers"))]
