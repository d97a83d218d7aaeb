"""Publishing deliveries by task name, from any process: a web request's ``send_webhook``, the
``deliver`` handle, a replay.

The Celery instance here only publishes. It is never the process's current app
(``set_as_current=False``), so a host's own Celery app and ``@shared_task`` tasks are left
alone, and it never imports the worker's task module: the message names the task
(``hookline.deliver``) and the worker that consumes it knows the rest.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery
from kombu.exceptions import EncodeError
from kombu.utils.uuid import uuid

from hookline.core.config import Settings, settings
from hookline.core.event import MAX_KEPT_DEPTH, MalformedEvent, nested_deeper_than
from hookline.core.messages import (
    DELIVERY_QUEUE,
    TASK_NAME,
    delivery_headers,
    stamped,
)
from hookline.delivery.amqp import AMQP_CLASS

_lock = threading.Lock()
_app: tuple[Settings, Celery] | None = None


def celery_app() -> Celery:
    """This process's publishing app, built on first use from ``hookline.celeryconfig`` (and
    again if the settings were reconfigured in this process)."""
    global _app
    config = settings()
    current = _app
    if current is not None and current[0] is config:
        return current[1]
    with _lock:
        if _app is None or _app[0] is not config:
            from hookline import celeryconfig

            built = Celery("hookline", set_as_current=False, fixups=[], amqp=AMQP_CLASS)
            built.config_from_object(celeryconfig)
            built.conf.update(celeryconfig.broker_settings(config))
            # The previous app is dropped, not closed: its connection pool is kombu's pool for
            # that broker URL, shared by every app in the process that uses the same URL.
            _app = (config, built)
        return _app[1]


def claims_on_publish() -> bool:
    """Whether a publish can claim the event id itself (``hookline_claim``): the broker is
    Hookline's Redis transport on Hookline's own Redis, so claim and push are one script."""
    config = settings()
    transport = str(celery_app().conf.broker_transport or "")
    return transport.startswith("hookline.broker:") and config.broker_is_state


def publish(args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any] | None = None, *,
            task_id: str | None = None, queue: str = DELIVERY_QUEUE, **options: Any) -> Any:
    """Publish one delivery task; returns Celery's ``AsyncResult`` (``.id``: the task id).

    ``kwargs`` get the publish time (``enqueued_at``); the headers name the endpoint and event
    for the broker's consume script; Flower shows the payload's size, not its content."""
    task_id = task_id or uuid()
    kwargs = stamped(dict(kwargs or {}))
    args = tuple(args)  # argsrepr/kwargsrepr (the payload's size): hookline.delivery.amqp
    headers = {**options.pop("headers", {}), **delivery_headers(args, kwargs, task_id)}
    return celery_app().send_task(TASK_NAME, args=args, kwargs=kwargs, task_id=task_id,
                                  queue=queue, headers=headers, **options)


class DeliverHandle:
    """``hookline.deliver``: publish a delivery the way a Celery task's ``.delay()`` and
    ``.apply_async()`` do, by name, without importing the task. Arguments are the task's:
    ``(endpoint_id, event_type, payload, event_id=None, deadline=None)``; the worker validates
    them (use :func:`hookline.send_webhook` to have them checked at the call)."""

    name = TASK_NAME

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def apply_async(self, args: tuple[Any, ...] | list[Any] | None = None,
                    kwargs: dict[str, Any] | None = None, **options: Any) -> Any:
        """Publish; returns Celery's ``AsyncResult``: its ``id`` is the event id unless
        ``event_id`` is given (no result is stored: the outcome is ``hookline event show``).
        ``options`` are Celery's (``task_id``, ``countdown`` is refused: see below)."""
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
            return publish(args, kwargs, **options)
        except EncodeError as exc:
            raise MalformedEvent("payload", f"the delivery's arguments cannot be encoded as "
                                            f"JSON for the queue: {exc}") from None

    def __repr__(self) -> str:
        return f"<hookline.deliver handle: publishes {TASK_NAME!r}>"


deliver = DeliverHandle()
