"""Reporting operational events (``hookline.core.operational_events``): to the host's
callbacks and signals, and as an operational webhook to the operator's endpoint.

The webhook is an ordinary delivery (``hookline.deliver`` to ``HOOKLINE_OPERATIONAL_ENDPOINT``):
signed, gated, retried and dead-lettered like any other, its event id derived from the
occurrence, so the same occurrence reaches the operator once. An occurrence about the operator
endpoint itself (its 410, its breaker, a dead letter of an operational webhook) is never sent
to it as a webhook: a failing operator endpoint cannot feed itself. The callbacks still hear it.

Nothing here raises: a broker that refuses the webhook, a Redis that does not answer or a
callback that fails is logged, and the delivery that met the occurrence goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from hookline.core import operational_events
from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.core.operational_events import OperationalEvent
from hookline.store.occurrences import first_report


def report(event: OperationalEvent) -> None:
    """Tell the callbacks and the operator endpoint about ``event``, once per occurrence."""
    try:
        target = settings().operational_endpoint
        webhook = target is not None and event.endpoint_id != target
        if not webhook and not operational_events.REGISTRY.listened(event.kind):
            return  # nobody listens: not even the marker is written
        try:
            if not first_report(event.endpoint_id, event.event_id):
                return
        except Exception as exc:  # Redis: report it maybe twice rather than not at all
            log_event("operational.marker_failed", level=logging.WARNING, kind=event.kind,
                      endpoint_id=event.endpoint_id, error=type(exc).__name__)
        log_event("operational.event", kind=event.kind, endpoint_id=event.endpoint_id,
                  event_id=event.event_id, webhook=target if webhook else None)
        if webhook:
            assert target is not None
            _send_webhook(target, event)
        operational_events.REGISTRY.fire(event)
    except Exception:  # never into the delivery that met it
        logging.getLogger("hookline").exception("operational event %s not reported", event.kind)


def _send_webhook(target: str, event: OperationalEvent) -> None:
    from hookline.delivery.publisher import enqueue_delivery

    try:
        enqueue_delivery((target, event.event_type, event.payload()),
                         {"event_id": event.event_id}, task_id=event.event_id)
    except Exception as exc:
        log_event("operational.webhook_failed", level=logging.WARNING, kind=event.kind,
                  endpoint_id=event.endpoint_id, event_id=event.event_id,
                  error=type(exc).__name__)


# -- the occurrences ----------------------------------------------------------------------------


def endpoint_disabled(endpoint_id: str, *, reason: str, detail: str, since: Any,
                      status: int | None = None) -> OperationalEvent:
    """``reason``: ``gone`` (a 410) or ``operator``; ``since``: what tells this disabling
    from another one of the same endpoint (the endpoint's ``updated_at`` as the disabling
    attempt or operator read it)."""
    return OperationalEvent(operational_events.ENDPOINT_DISABLED, endpoint_id,
                            {"reason": reason, "detail": detail, "status": status},
                            (reason, since))


def dead_lettered(endpoint_id: str, event_id: str, event_type: str, reason: str, *,
                  attempts: int, first_attempt_at: Any = None) -> OperationalEvent:
    return OperationalEvent(operational_events.DEAD_LETTERED, endpoint_id,
                            {"event_id": event_id, "event_type": event_type, "reason": reason,
                             "attempts": attempts},
                            (event_id, reason, attempts, first_attempt_at))


def breaker_changed(endpoint_id: str, *, opened: bool, event_id: str,
                    attempt: int) -> OperationalEvent:
    """The breaker opened (failing) or closed (recovered) on ``event_id``'s attempt."""
    kind = (operational_events.ENDPOINT_FAILING if opened
            else operational_events.ENDPOINT_RECOVERED)
    return OperationalEvent(kind, endpoint_id, {"event_id": event_id, "attempt": attempt},
                            (event_id, attempt))
