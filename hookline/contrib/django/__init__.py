"""Hookline in a Django project.

    INSTALLED_APPS = [..., "hookline.contrib.django"]

Settings come from the environment (``REDIS_URL``, ``HOOKLINE_*``), the same variables the
worker reads; at start-up the app validates them, and refuses a ``settings.HOOKLINE`` dict (it
would configure the web process but not the worker). In a view::

    with transaction.atomic():
        order = Order.objects.create(...)
        send_webhook_on_commit("shop-42", "order.created", {"order": order.pk})

The event is checked at once (``WebhookInputError`` at the call site) and enqueued only when
the transaction commits: a rolled-back transaction sends nothing. ``publish_on_commit`` does the
same for ``hookline.publish`` (an event for every subscribed endpoint of an application).

With ``HOOKLINE_OUTBOX=on`` both write the event as a row of the transactional outbox
(:class:`hookline.contrib.django.models.OutboxRow`, ``manage.py migrate`` creates its table) in
the same transaction, and a worker's relay publishes it once committed: the call never touches
Redis, and no committed event is lost to a Redis outage or a crash (docs/guides/outbox.md).

Operational events are Django signals here (:data:`endpoint_disabled`,
:data:`event_dead_lettered`, :data:`endpoint_failing`, :data:`endpoint_recovered`), sent with
the endpoint id as ``sender`` and the keyword arguments ``event`` (a
``hookline.operational.OperationalEvent``), ``endpoint_id`` and the event's fields (``reason``,
``event_id``, ...). They are sent in the process where the event happens, usually a Hookline
worker: connect your receivers in a module the worker imports (``HOOKLINE_WORKER_IMPORTS``,
which also runs ``django.setup()`` there). A receiver that raises is logged and passed over.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.dispatch import Signal

from hookline.contrib.framework import (
    enqueue_logged,
    forward_operational,
    prepare_publication,
    publish_logged,
)
from hookline.core import operational_events
from hookline.core.logs import log_event
from hookline.core.operational_events import OperationalEvent

if TYPE_CHECKING:
    from hookline.core.config import Settings
    from hookline.outbox.rows import OutboxRow

# Django imports this module at django.setup(): the settings, the checks and the outbox's rows
# are imported by the calls that use them, so a web process pays for them when it sends.

__all__ = ["check_configuration", "endpoint_disabled", "endpoint_failing", "endpoint_recovered",
           "event_dead_lettered", "publish_on_commit", "send_webhook_on_commit"]

#: An endpoint was disabled: a 410 Gone (``reason="gone"``) or an operator (``"operator"``).
endpoint_disabled = Signal()
#: An event went to the dead-letter queue; ``reason`` says why (``exhausted``, ``rejected``...).
event_dead_lettered = Signal()
#: An endpoint's circuit breaker opened: it keeps failing.
endpoint_failing = Signal()
#: An endpoint's circuit breaker closed again.
endpoint_recovered = Signal()
SIGNALS = {operational_events.ENDPOINT_DISABLED: endpoint_disabled,
           operational_events.DEAD_LETTERED: event_dead_lettered,
           operational_events.ENDPOINT_FAILING: endpoint_failing,
           operational_events.ENDPOINT_RECOVERED: endpoint_recovered}


def _send_signal(event: OperationalEvent) -> None:
    """Forward one operational event to its Django signal; receivers that raise are logged."""
    responses = SIGNALS[event.kind].send_robust(sender=event.endpoint_id, event=event,
                                                endpoint_id=event.endpoint_id, **event.data)
    for receiver, response in responses:
        if isinstance(response, Exception):
            log_event("operational.callback_failed", level=logging.WARNING, kind=event.kind,
                      endpoint_id=event.endpoint_id,
                      callback=getattr(receiver, "__qualname__", type(receiver).__name__),
                      error=type(response).__name__)


forward_operational(_send_signal, lambda kind: SIGNALS[kind].has_listeners())


def check_configuration() -> Settings:
    """Validate Hookline's environment settings; the app's system check
    (``hookline.E001``, :func:`hookline.contrib.django.apps.check_settings`) calls this. Raises
    ``ImproperlyConfigured`` naming the bad variable, or a ``settings.HOOKLINE`` / ``HOOKLINE_*``
    Django setting (Hookline does not read Django settings)."""
    from django.conf import settings as django_settings

    from hookline.contrib.framework import check_environment
    from hookline.core.config import ConfigError

    names = [name for name in dir(django_settings) if name.startswith("HOOKLINE")]
    try:
        return check_environment(names, source="Django settings")
    except ConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from None


def send_webhook_on_commit(
    endpoint_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    deadline: float | datetime | None = None,
    using: str | None = None,
    ordering_key: str | None = None,
) -> str:
    """Check an event now and enqueue it when the current transaction of database ``using``
    commits; returns its event id. Outside a transaction it is enqueued at once.

    Raises :class:`hookline.WebhookInputError` here, like :func:`hookline.send_webhook`
    (:class:`hookline.EventIdConflict` when the event id is bound to another content already).
    The id is bound to this content when a worker first takes the event, not here: a
    rolled-back transaction leaves the id free. If the
    broker cannot be reached at commit time the error propagates from the commit (the data is
    committed, the event is not queued) and an ``enqueue.failed`` line names the event.
    Either check, here or at the commit, raises :class:`hookline.RedisUnavailable` once Redis
    has not answered for ``HOOKLINE_REDIS_TIMEOUT`` (at once when it refuses connections).

    With ``HOOKLINE_OUTBOX=on`` the event is a row of the outbox written now, in the
    transaction (at once outside one): only what needs no Redis is checked here, and the relay
    dead-letters, with its reason, an event whose endpoint is unknown or whose id is bound to
    other content.
    """
    from hookline.core.config import settings
    from hookline.core.specs import EventSpec

    spec = EventSpec(endpoint_id, event_type, payload, event_id, deadline, ordering_key)
    if settings().outbox:
        from hookline.outbox.rows import webhook_row

        return _write(webhook_row(spec), using)
    from hookline.api.enqueue import prepare_event  # the direct path loads the publisher

    event = prepare_event(spec, bind=False)
    transaction.on_commit(partial(enqueue_logged, event), using=using)
    return event.event_id


def publish_on_commit(
    app_id: str,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    channels: Sequence[str] | None = None,
    deadline: float | datetime | None = None,
    using: str | None = None,
    ordering_key: str | None = None,
) -> str:
    """Publish an event to an application's subscribed endpoints (``hookline.publish``) when
    the current transaction of database ``using`` commits; returns its event id. Outside a
    transaction it is published at once. The application id, event type, id, payload,
    channels and deadline are checked now (``WebhookInputError``); ``hookline.publish`` checks
    that the application exists (and the catalog) at commit, where a failure propagates from
    the commit and a ``publish.failed`` line names the event. A rolled-back transaction
    publishes nothing. With ``HOOKLINE_OUTBOX=on`` the event is a row of the outbox written in
    the transaction, and the relay publishes it (an unknown application, or a type the catalog
    or a schema refuses, ends as a dead letter with its reason)."""
    from hookline.core.config import settings
    from hookline.core.specs import PublicationSpec

    spec = PublicationSpec(app_id, event_type, payload, event_id, channels, deadline,
                           ordering_key)
    if settings().outbox:
        from hookline.outbox.rows import publication_row

        return _write(publication_row(spec), using)
    publication = prepare_publication(spec)
    transaction.on_commit(partial(publish_logged, publication), using=using)
    return publication.event_id


def _write(row: OutboxRow, using: str | None) -> str:
    """Add ``row`` to the outbox, in the current transaction of database ``using``."""
    from django.db import DEFAULT_DB_ALIAS

    from hookline.contrib.django.models import OutboxRow as Row

    Row.objects.using(using or DEFAULT_DB_ALIAS).create(**row.values())
    return row.event_id
