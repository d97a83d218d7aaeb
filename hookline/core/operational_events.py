"""Operational events: what Hookline tells the host when delivery goes wrong or gets better.

Four kinds, each with a webhook event type (the operational webhook's, Svix's names where
Svix has one):

=====================  ===============================  ===================================
kind                   webhook event type               when
=====================  ===============================  ===================================
``endpoint_disabled``  ``endpoint.disabled``            a 410 Gone, or an operator's disable
``dead_lettered``      ``message.attempt.exhausted``    an event went to the dead-letter
                                                        queue (``reason`` says why)
``endpoint_failing``   ``endpoint.failing``             the circuit breaker opened
``endpoint_recovered`` ``endpoint.recovered``           the circuit breaker closed again
=====================  ===============================  ===================================

A host listens with :func:`connect` (``hookline.operational.connect``), or with the Django and
Flask signals of ``hookline.contrib.django`` and ``hookline.contrib.flask``, which forward from
here. Callbacks run in the process where the event happened: usually a worker (a 410, a dead
letter, a breaker), the CLI's process for an operator's ``endpoint disable``. A callback that
raises is logged and passed over: it can never break a delivery.

This module is pure: the registry and the events. Sending them as webhooks is
``hookline.delivery.reporting``'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hookline.core.logs import log_event

ENDPOINT_DISABLED = "endpoint_disabled"
DEAD_LETTERED = "dead_lettered"
ENDPOINT_FAILING = "endpoint_failing"
ENDPOINT_RECOVERED = "endpoint_recovered"

#: kind -> the event type of its operational webhook.
EVENT_TYPES: Mapping[str, str] = {
    ENDPOINT_DISABLED: "endpoint.disabled",
    DEAD_LETTERED: "message.attempt.exhausted",
    ENDPOINT_FAILING: "endpoint.failing",
    ENDPOINT_RECOVERED: "endpoint.recovered",
}
KINDS = tuple(EVENT_TYPES)
#: The prefix of an operational webhook's event id (the rest is a digest of the occurrence).
EVENT_ID_PREFIX = "hookline-op-"


@dataclass(frozen=True)
class OperationalEvent:
    """One occurrence.

    :param kind: one of :data:`KINDS`.
    :param endpoint_id: the endpoint it is about.
    :param data: what a receiver is told (the operational webhook's payload): the endpoint id
        and the kind's own fields, e.g. ``reason``, ``event_id``; never a secret, a header
        value or an event's payload.
    :param occurrence: what makes this occurrence itself (never shown): the same occurrence
        seen twice (two workers meeting the same 410) gives the same :attr:`event_id`, so its
        webhook is sent once.
    """

    kind: str
    endpoint_id: str
    data: Mapping[str, Any] = field(default_factory=dict)
    occurrence: tuple[Any, ...] = ()

    @property
    def event_type(self) -> str:
        return EVENT_TYPES[self.kind]

    @property
    def event_id(self) -> str:
        """Deterministic: a digest of the kind, the endpoint and the occurrence."""
        text = json.dumps([self.kind, self.endpoint_id, *self.occurrence], default=str)
        return EVENT_ID_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]

    def payload(self) -> dict[str, Any]:
        return {"endpoint_id": self.endpoint_id, **self.data}


Callback = Callable[[OperationalEvent], Any]


class OperationalRegistry:
    """Callbacks by kind. Connect and disconnect from any thread; :meth:`fire` calls each
    callback of the event's kind in the order connected, and logs and passes over one that
    raises."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {kind: [] for kind in KINDS}
        self._listening: dict[Callback, Callable[[str], bool]] = {}
        self._lock = threading.Lock()

    def connect(self, kind: str, callback: Callback, *,
                listening: Callable[[str], bool] | None = None) -> Callback:
        """Call ``callback(event)`` for every operational event of ``kind`` (``"*"``: every
        kind). Connecting the same callback again changes nothing. ``listening(kind)``: for a
        callback that forwards (a framework's signals), whether anyone hears it now; nothing
        is reported when nobody does. Returns ``callback``, so this works as a decorator's
        body."""
        kinds = _kinds(kind)
        if not callable(callback):
            raise TypeError(f"callback {callback!r} is not callable")
        with self._lock:
            if listening is not None:
                self._listening[callback] = listening
            for name in kinds:
                if callback not in self._callbacks[name]:
                    self._callbacks[name] = [*self._callbacks[name], callback]
        return callback

    def listened(self, kind: str) -> bool:
        """Whether an event of ``kind`` would reach anyone."""
        return any(self._listening.get(callback, _always)(kind)
                   for callback in self._callbacks[_kinds(kind)[0]])

    def disconnect(self, kind: str, callback: Callback) -> None:
        with self._lock:
            for name in _kinds(kind):
                self._callbacks[name] = [c for c in self._callbacks[name] if c != callback]

    def receivers(self, kind: str) -> list[Callback]:
        return list(self._callbacks[_kinds(kind)[0]])

    def fire(self, event: OperationalEvent) -> int:
        """Call every callback of ``event.kind``; returns how many raised (each logged)."""
        failed = 0
        for callback in self._callbacks.get(event.kind, ()):
            try:
                callback(event)
            except Exception as exc:  # a host's callback must never break a delivery
                failed += 1
                log_event("operational.callback_failed", level=logging.WARNING,
                          kind=event.kind, endpoint_id=event.endpoint_id,
                          callback=getattr(callback, "__qualname__", type(callback).__name__),
                          error=type(exc).__name__)
        return failed


def _always(kind: str) -> bool:
    return True


def _kinds(kind: str) -> tuple[str, ...]:
    if kind == "*":
        return KINDS
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown operational event kind {kind!r}: use one of "
                         f"{', '.join(KINDS)} or '*'")
    return (kind,)


#: The process's registry.
REGISTRY = OperationalRegistry()


def connect(kind: str, callback: Callback | None = None) -> Any:
    """Connect ``callback`` to ``kind`` (:meth:`OperationalRegistry.connect`); without
    ``callback``, a decorator::

        @hookline.operational.connect("endpoint_disabled")
        def page_someone(event): ...
    """
    if callback is None:
        return lambda function: REGISTRY.connect(kind, function)
    return REGISTRY.connect(kind, callback)


def disconnect(kind: str, callback: Callback) -> None:
    REGISTRY.disconnect(kind, callback)
