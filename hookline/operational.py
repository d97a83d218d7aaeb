"""Operational events for the host: ``hookline.operational.connect(kind, callback)``.

    import hookline.operational

    @hookline.operational.connect("endpoint_disabled")
    def tell_the_customer(event):
        notify(event.endpoint_id, event.data["reason"])

Kinds: ``endpoint_disabled`` (410 Gone or an operator's disable), ``dead_lettered`` (with its
``reason``), ``endpoint_failing`` (circuit breaker opened), ``endpoint_recovered`` (closed
again); ``"*"`` for all. Callbacks run where the event happens, usually in a worker process:
connect them in a module the worker imports (``HOOKLINE_WORKER_IMPORTS``). A callback that
raises is logged and passed over. Django and Flask signals: ``hookline.contrib.django`` and
``hookline.contrib.flask``. The events can also go out as webhooks to an operator endpoint
(``HOOKLINE_OPERATIONAL_ENDPOINT``). See ``hookline.core.operational_events``.
"""

from __future__ import annotations

from hookline.core.operational_events import (
    DEAD_LETTERED,
    ENDPOINT_DISABLED,
    ENDPOINT_FAILING,
    ENDPOINT_RECOVERED,
    EVENT_TYPES,
    KINDS,
    REGISTRY,
    OperationalEvent,
    connect,
    disconnect,
)

__all__ = ["DEAD_LETTERED", "ENDPOINT_DISABLED", "ENDPOINT_FAILING", "ENDPOINT_RECOVERED",
           "EVENT_TYPES", "KINDS", "REGISTRY", "OperationalEvent", "connect", "disconnect"]
