"""Hookline: outbound webhook delivery on Celery and Redis.

``celery -A app worker`` finds the Celery application here as ``app.app``; applications enqueue
with :func:`send_webhook` (validated) or ``tasks.webhooks.deliver.delay(...)``.
"""

__version__ = "0.1.0"

from app.celery import app
from app.enqueue import WebhookInputError, send_webhook

__all__ = ["WebhookInputError", "__version__", "app", "send_webhook"]
