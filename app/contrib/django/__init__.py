"""Hookline in a Django project.

    INSTALLED_APPS = [..., "app.contrib.django"]
    HOOKLINE = {"REDIS_URL": "redis://redis:6379/0", "HOOKLINE_MAX_ATTEMPTS": 20}

At start-up the app applies ``settings.HOOKLINE`` (the environment variables' names; anything
not given there comes from the environment). In a view::

    with transaction.atomic():
        order = Order.objects.create(...)
        send_webhook_on_commit("shop-42", "order.created", {"order": order.pk})

The event is checked at once (``WebhookInputError`` at the call site) and enqueued only when
the transaction commits: a rolled-back transaction sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from app.config import ConfigError, Settings
from app.contrib.framework import configure_from, enqueue_logged
from app.enqueue import prepare_event

__all__ = ["configure_from_django", "send_webhook_on_commit"]


def configure_from_django() -> Settings:
    """Apply ``settings.HOOKLINE`` over the environment; the app's ``ready()`` calls this.
    Raises ``ImproperlyConfigured`` naming the bad key or value."""
    from django.conf import settings as django_settings

    overrides = getattr(django_settings, "HOOKLINE", None) or {}
    if not isinstance(overrides, Mapping):
        raise ImproperlyConfigured(
            "settings.HOOKLINE must be a dict of Hookline settings, e.g. "
            "{'REDIS_URL': 'redis://127.0.0.1:6379/0'}"
        )
    try:
        return configure_from(overrides, source="settings.HOOKLINE", strict=True)
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

    Raises :class:`app.WebhookInputError` here, like :func:`app.send_webhook`. If the broker
    cannot be reached at commit time the error propagates from the commit (the data is
    committed, the event is not queued) and an ``enqueue.failed`` line names the event.
    """
    event = prepare_event(endpoint_id, event_type, payload, event_id, deadline=deadline)
    transaction.on_commit(partial(enqueue_logged, event), using=using)
    return event.event_id
