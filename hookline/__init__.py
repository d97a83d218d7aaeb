"""Hookline: outbound webhook delivery on Celery and Redis.

All a web process needs::

    import hookline

    hookline.send_webhook("shop-42", "order.created", {"order": 1234})   # checked, then queued
    hookline.deliver.delay("shop-42", "order.created", {"order": 1234})  # queued as it is
    hookline.publish("acme", "order.created", {"order": 1234})  # every subscribed endpoint
    hookline.portal_link("acme", ttl=3600)  # a signed, expiring link to acme's tenant portal

Both publish the task ``hookline.deliver`` by name on Hookline's own Celery instance, which is
never the process's current app. Workers run ``celery -A hookline.worker worker``. Settings
come from the environment (``REDIS_URL``, ``HOOKLINE_*``), read the same way by every process.

Every call waits at most ``HOOKLINE_REDIS_TIMEOUT`` (5 s) for Redis and the broker; past it,
or when the connection is refused, it raises ``hookline.RedisUnavailable`` (one line naming the
server and the timeout).

Nothing is imported until it is used: ``import hookline.core.policy`` loads no Celery.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from hookline.core.version import __version__

if TYPE_CHECKING:
    from hookline.api.enqueue import EventIdConflict, WebhookInputError, send_webhook
    from hookline.api.publishing import PublishedEventConflict, SchemaViolation, publish
    from hookline.core.errors import HooklineError, RedisUnavailable
    from hookline.delivery.publisher import deliver
    from hookline.service.portal import portal_link

_LAZY = {
    "send_webhook": "hookline.api.enqueue",
    "WebhookInputError": "hookline.api.enqueue",
    "EventIdConflict": "hookline.api.enqueue",
    "deliver": "hookline.delivery.publisher",
    "HooklineError": "hookline.core.errors",
    "RedisUnavailable": "hookline.core.errors",
    "publish": "hookline.api.publishing",
    "PublishedEventConflict": "hookline.api.publishing",
    "SchemaViolation": "hookline.api.publishing",
    "portal_link": "hookline.service.portal",
}

__all__ = ["EventIdConflict", "HooklineError", "PublishedEventConflict", "RedisUnavailable",
           "SchemaViolation", "WebhookInputError", "__version__", "deliver", "portal_link",
           "publish", "send_webhook"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hookline' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
