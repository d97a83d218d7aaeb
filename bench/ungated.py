"""``bench.ungated``: Hookline's request without its gates, the baseline of ``bench.gates``.

The same worker (``celery -A app worker --include bench.ungated``) sends the same Standard
Webhooks request through ``hookline.delivery.sender.send`` (pooled session per thread,
signing, timeouts, capped body read), but skips admit and settle: no idempotency marker,
lease, breaker or rate limit. The endpoint is read from the registry once per worker process,
not per event, so the task touches Hookline's Redis only on its first run. Benchmark use only:
nothing in ``hookline`` knows about it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from hookline.core.endpoint import Endpoint
from hookline.delivery.sender import WebhookEvent, send
from hookline.store.endpoints import EndpointRegistry
from hookline.worker.celery import worker_app

_endpoints: dict[str, Endpoint] = {}
_lock = threading.Lock()


def _endpoint(endpoint_id: str) -> Endpoint:
    endpoint = _endpoints.get(endpoint_id)
    if endpoint is None:
        with _lock:
            endpoint = _endpoints.get(endpoint_id)
            if endpoint is None:
                endpoint = _endpoints[endpoint_id] = EndpointRegistry().require(endpoint_id)
    return endpoint


@worker_app.task(name="bench.ungated", acks_late=True)
def ungated(endpoint_id: str, event_type: str, payload: Any,
            event_id: str | None = None) -> dict[str, Any]:
    """POST one event once: no gates, no retry, no dead letter."""
    event = WebhookEvent(event_id or "", event_type, payload, time.time())
    result = send(_endpoint(endpoint_id), event)
    return {"status": result.status, "error": result.error or None}
