"""``tasks.webhooks.deliver``: the delivery task, defined in ``hookline.worker.tasks``."""

from hookline.worker.tasks import deliver

__all__ = ["deliver"]
