"""Endpoints on a loopback receiver, and waits on what Hookline recorded for an event."""

from __future__ import annotations

import uuid
from typing import Any

from hookline.core.endpoint import Endpoint
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until


def new_endpoint(receiver: Any, behaviour: Any, *, path: str | None = None,
                 **options: Any) -> Endpoint:
    """Register an endpoint whose URL is a receiver route with ``behaviour``."""
    endpoint_id = f"ep-{uuid.uuid4().hex[:10]}"
    url = receiver.route(path or f"/{endpoint_id}", behaviour)
    return EndpointRegistry().add(endpoint_id, url, **options)


def dead_letter(endpoint_id: str, event_id: str, timeout: float = 20.0) -> DeadLetter:
    return wait_until(lambda: DeadLetterQueue().get(f"{endpoint_id}/{event_id}"), timeout)


def wait_delivered(endpoint_id: str, event_id: str, timeout: float = 20.0) -> None:
    """Wait until Hookline recorded the delivery (its done marker), not just the request."""
    gate = Gate()
    wait_until(lambda: gate.is_delivered(endpoint_id, event_id), timeout)
