"""Publishing deliveries by task name, from any process: a web request's ``send_webhook``, the
``deliver`` handle, a replay.

They go through the transport's publishing app (``hookline.transport.celery_app.publishing_app``: it
only publishes, and is never the process's current app); the message names the task
(``hookline.deliver``) and the worker that consumes it knows the rest.
"""

from __future__ import annotations

import uuid
from typing import Any

from hookline.core import tracing
from hookline.core.event import MAX_KEPT_DEPTH, MalformedEvent, nested_deeper_than
from hookline.core.messages import (
    DELIVERY_QUEUE,
    TASK_NAME,
    delivery_headers,
    stamped,
)
from hookline.transport.bounded import bounded
from hookline.transport.celery_app import claims_on_publish, publishing_app
from hookline.transport.errors import EncodeError

__all__ = ["DeliverHandle", "claims_on_publish", "deliver", "enqueue_delivery", "publishing_app"]


def enqueue_delivery(args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any] | None = None,
                     *, task_id: str | None = None, queue: str = DELIVERY_QUEUE,
                     **options: Any) -> Any:
    """Publish one delivery task; returns Celery's ``AsyncResult`` (``.id``: the task id).

    ``kwargs`` get the publish time (``enqueued_at``); the headers name the endpoint and event
    for the broker's consume script, and the trace context where traces are on; Flower shows
    the payload's size, not its content."""
    task_id = task_id or str(uuid.uuid4())
    kwargs = stamped(dict(kwargs or {}))
    args = tuple(args)  # argsrepr/kwargsrepr (the payload's size): hookline.transport.amqp
    headers = {**tracing.message_headers(), **options.pop("headers", {}),
               **delivery_headers(args, kwargs, task_id)}
    return publishing_app().send_task(TASK_NAME, args=args, kwargs=kwargs, task_id=task_id,
                                      queue=queue, headers=headers, **options)


class DeliverHandle:
    """``hookline.deliver``: publish a delivery the way a Celery task's ``.delay()`` and
    ``.apply_async()`` do, by name, without importing the task. Arguments are the task's:
    ``(endpoint_id, event_type, payload, event_id=None, deadline=None)``; the worker validates
    them (use :func:`hookline.send_webhook` to have them checked at the call)."""

    name = TASK_NAME

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    @bounded
    def apply_async(self, args: tuple[Any, ...] | list[Any] | None = None,
                    kwargs: dict[str, Any] | None = None, **options: Any) -> Any:
        """Publish; returns Celery's ``AsyncResult``: its ``id`` is the event id unless
        ``event_id`` is given (no result is stored: the outcome is ``hookline event show``).
        ``options`` are Celery's (``task_id``, ``countdown`` is refused: see below).
        :class:`hookline.RedisUnavailable` when the broker does not answer within
        ``HOOKLINE_REDIS_TIMEOUT`` or refuses the connection."""
        for refused in ("countdown", "eta"):
            if refused in options:
                raise TypeError(f"{refused} is not supported: a delivery goes out now, and "
                                "retries wait in Hookline's schedule (pass deadline= instead)")
        for refused in ("argsrepr", "kwargsrepr"):
            if refused in options:
                raise TypeError(f"{refused} is not supported: Flower and the logs are shown "
                                "the payload's size, never its content")
        args = tuple(args or ())
        # Only what cannot even be put on the queue is refused here; the rest is the worker's.
        if len(args) >= 3 and nested_deeper_than(args[2], MAX_KEPT_DEPTH):
            raise MalformedEvent("payload", f"payload is nested deeper than {MAX_KEPT_DEPTH} "
                                            "levels: it cannot be encoded for the queue")
        try:
            return enqueue_delivery(args, kwargs, **options)
        except EncodeError as exc:
            raise MalformedEvent("payload", f"the delivery's arguments cannot be encoded as "
                                            f"JSON for the queue: {exc}") from None

    def __repr__(self) -> str:
        return f"<hookline.deliver handle: publishes {TASK_NAME!r}>"


deliver = DeliverHandle()
