"""What the Django and Flask integrations share: one configuration for every process, and an
event validated where it is produced but enqueued later.

Hookline's settings come from the environment only (``REDIS_URL``, ``HOOKLINE_BROKER_URL``,
``HOOKLINE_*``), because the worker must mean the same by them as the web process, and the
worker never reads a Django settings module or a Flask config. A framework config that tries to
set them is refused with the reason, instead of taking effect in one process only.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hookline.api.enqueue import PreparedEvent, WebhookInputError, enqueue_prepared
from hookline.core.config import ConfigError, Settings, setting_names, settings
from hookline.core.errors import InvalidField
from hookline.core.event import (
    check_deadline,
    check_event_id,
    check_event_type,
    check_ordering_key,
    check_payload,
)
from hookline.core.logs import log_event
from hookline.core.operational_events import KINDS, REGISTRY, OperationalEvent


def check_environment(framework_keys: Iterable[Any], *, source: str) -> Settings:
    """Validate the environment's Hookline settings now (a bad value fails the web process
    at start-up, naming the variable), and refuse Hookline settings given in ``source``."""
    misplaced = sorted(str(key) for key in framework_keys
                       if str(key) == "HOOKLINE" or str(key).startswith("HOOKLINE_")
                       or str(key) in _OWN_NAMES)
    if misplaced:
        raise ConfigError(
            f"{source} sets {', '.join(misplaced)}: Hookline reads its settings from the "
            "environment only, so that the worker and the web process agree. Set them as "
            "environment variables of both processes "
            "(see https://hookline.github.io/hookline/operations/configuration/)"
        )
    try:
        return settings()
    except ConfigError as exc:
        raise ConfigError(f"environment: {exc}") from None


#: Names only Hookline uses (``REDIS_URL`` is common to other libraries' configs, a cache's
#: for one, and is not refused there).
_OWN_NAMES = frozenset(name for name in setting_names() if name.startswith("HOOKLINE_")) | {
    "CELERY_VISIBILITY_TIMEOUT"}


def enqueue_logged(event: PreparedEvent) -> None:
    """Publish a prepared event; after a commit nobody else would notice a failure, so it is
    logged with the event's id before it propagates."""
    try:
        enqueue_prepared(event)
    except Exception as exc:
        log_event("enqueue.failed", level=logging.ERROR, endpoint_id=event.endpoint_id,
                  event_id=event.event_id, event_type=event.event_type,
                  error=type(exc).__name__)
        raise


@dataclass(frozen=True)
class Publication:
    """An event checked now, to be published (``hookline.publish``) once a commit happened."""

    app_id: str
    event_type: str
    payload: Any
    event_id: str
    channels: tuple[str, ...] | None
    deadline: float | None
    ordering_key: str | None = None


def prepare_publication(app_id: str, event_type: str, payload: Any, event_id: str | None,
                        channels: Sequence[str] | None,
                        deadline: float | datetime | None,
                        ordering_key: str | None = None) -> Publication:
    """Check what can be checked without Redis (the event type, id, payload and deadline:
    ``WebhookInputError`` at the call site) and copy the payload as JSON, so the event
    published at commit is the one checked now. ``hookline.publish`` checks the rest (the
    application, the channels) when it runs."""
    event_id = str(uuid.uuid4()) if event_id is None else event_id
    try:
        check_event_type(event_type)
        check_event_id(event_id)
        text = check_payload(payload, max_bytes=settings().max_payload_bytes)
        deadline_ts = check_deadline(deadline)
        ordering_key = check_ordering_key(ordering_key)
    except InvalidField as exc:
        raise WebhookInputError(str(exc), exc.field) from None
    if not isinstance(app_id, str) or not app_id:
        raise WebhookInputError("app id must be a non-empty string", "app_id")
    return Publication(app_id, event_type, json.loads(text), event_id,
                       None if channels is None else tuple(channels), deadline_ts,
                       ordering_key)


def publish_logged(publication: Publication) -> None:
    """Publish a checked event; a failure after the commit is logged with the event's id
    before it propagates (nobody else would notice it)."""
    import hookline  # hookline.publish looked up now, not at import (a test may wrap it)

    try:
        hookline.publish(publication.app_id, publication.event_type, publication.payload,
                         event_id=publication.event_id, channels=publication.channels,
                         deadline=publication.deadline,
                         ordering_key=publication.ordering_key)
    except Exception as exc:
        log_event("publish.failed", level=logging.ERROR, app_id=publication.app_id,
                  event_id=publication.event_id, event_type=publication.event_type,
                  error=type(exc).__name__)
        raise


def forward_operational(send: Callable[[OperationalEvent], Any],
                        listening: Callable[[str], bool]) -> None:
    """Connect ``send`` (a framework's signal sender) to every kind of operational event;
    ``listening(kind)`` says whether the kind's signal has receivers now."""
    for kind in KINDS:
        REGISTRY.connect(kind, send, listening=listening)
