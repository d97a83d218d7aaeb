"""Hookline in a Django project.

    INSTALLED_APPS = [..., "hookline.contrib.django"]

Settings come from the environment (``REDIS_URL``, ``HOOKLINE_*``), the same variables the
worker reads; at start-up the app validates them, and refuses a ``settings.HOOKLINE`` dict (it
would configure the web process but not the worker). In a view::

    with transaction.atomic():
        order = Order.objects.create(...)
        send_webhook_on_commit("shop-42", "order.created", {"order": order.pk})

The event is checked at once (``WebhookInputError`` at the call site) and enqueued only when
the transaction commits: a rolled-back transaction sends nothing.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from hookline.contrib.framework import check_environment, enqueue_logged
from hookline.core.config import ConfigError, Settings
from hookline.enqueue import prepare_event

__all__ = ["check_configuration", "send_webhook_on_commit"]


def check_configuration() -> Settings:
    """Validate Hookline's environment settings; the app's ``ready()`` calls this. Raises
    ``ImproperlyConfigured`` naming the bad variable, or a ``settings.HOOKLINE`` / ``HOOKLINE_*``
    Django setting (Hookline does not read Django settings)."""
    from django.conf import settings as django_settings

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
) -> str:
    """Check an event now and enqueue it when the current transaction of database ``using``
    commits; returns its event id. Outside a transaction it is enqueued at once.

    Raises :class:`hookline.WebhookInputError` here, like :func:`hookline.send_webhook`
    (:class:`hookline.EventIdConflict` when the event id is bound to another content already).
    The id is bound to this content when a worker first takes the event, not here: a
    rolled-back transaction leaves the id free. If the
    broker cannot be reached at commit time the error propagates from the commit (the data is
    committed, the event is not queued) and an ``enqueue.failed`` line names the event.
    """
    event = prepare_event(endpoint_id, event_type, payload, event_id, deadline=deadline,
                          bind=False)
    transaction.on_commit(partial(enqueue_logged, event), using=using)
    return event.event_id
