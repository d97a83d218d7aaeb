"""The Celery application: ``celery -A app worker`` (all settings in ``celeryconfig.py``)."""

from celery import Celery

#: Queue of first deliveries.
DELIVERY_QUEUE = "hookline"
#: Queue of retries, kept apart so a failing endpoint's retries never wait in front of, or
#: behind, other endpoints' first deliveries.
RETRY_QUEUE = "hookline.retry"

app = Celery("hookline", include=["tasks.webhooks"])
app.config_from_object("celeryconfig")
