"""What the Django and Flask integrations share: one configuration for every process, and an
event validated where it is produced but enqueued later.

Hookline's settings come from the environment only (``REDIS_URL``, ``HOOKLINE_BROKER_URL``,
``HOOKLINE_*``), because the worker must mean the same by them as the web process, and the
worker never reads a Django settings module or a Flask config. A framework config that tries to
set them is refused with the reason, instead of taking effect in one process only.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hookline.core.operational_events import KINDS, REGISTRY, OperationalEvent

if TYPE_CHECKING:
    from hookline.core.config import Settings
    from hookline.core.specs import PublicationSpec
    from hookline.delivery.prepared import PreparedEvent

# A web process imports this module with its framework (Django's INSTALLED_APPS, a Flask
# extension): the settings, the checks and the logs are imported where first used.


def check_environment(framework_keys: Iterable[Any], *, source: str) -> Settings:
    """Validate the environment's Hookline settings now (a bad value fails the web process
    at start-up, naming the variable), and refuse Hookline settings given in ``source``."""
    from hookline.core.config import ConfigError, settings

    own = _own_names()
    misplaced = sorted(str(key) for key in framework_keys
                       if str(key) == "HOOKLINE" or str(key).startswith("HOOKLINE_")
                       or str(key) in own)
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


@functools.cache
def _own_names() -> frozenset[str]:
    """Names only Hookline uses (``REDIS_URL`` is common to other libraries' configs, a cache's
    for one, and is not refused there)."""
    from hookline.core.config import setting_names

    return frozenset(name for name in setting_names() if name.startswith("HOOKLINE_")) | {
        "CELERY_VISIBILITY_TIMEOUT"}


def enqueue_logged(event: PreparedEvent) -> None:
    """Publish a prepared event; after a commit nobody else would notice a failure, so it is
    logged with the event's id before it propagates."""
    from hookline.core.logs import log_event
    from hookline.delivery.prepared import enqueue_prepared  # the publishing path, when used

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


def prepare_publication(spec: PublicationSpec) -> Publication:
    """Check what can be checked without Redis (the application id's form, the event type, id,
    payload, channels, deadline and ordering key: ``WebhookInputError`` at the call site) and
    copy the payload as JSON, so the event published at commit is the one checked now.
    ``hookline.publish`` checks the rest (the application exists, the catalog and schemas)
    when it runs."""
    from hookline.core.incoming import checked_publication

    checked = checked_publication(spec)
    return Publication(spec.app_id, spec.event_type, json.loads(checked.text), checked.event_id,
                       checked.channels if spec.channels is not None else None,
                       checked.deadline, checked.ordering_key)


def publish_logged(publication: Publication) -> None:
    """Publish a checked event; a failure after the commit is logged with the event's id
    before it propagates (nobody else would notice it)."""
    import hookline  # hookline.publish looked up now, not at import (a test may wrap it)
    from hookline.core.logs import log_event

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
