"""What Hookline's Celery apps (the worker's and the publishing one) put on the wire and show
to Flower: Celery's ``AMQP`` with two changes, given to each app as ``Celery(amqp=...)``.

- **No payload in task events.** Every ``hookline.deliver`` message (``send_webhook``,
  ``deliver.delay()``, a retry parked in the schedule, a replay, Flower's own "apply") gets
  ``argsrepr``/``kwargsrepr`` with the payload's size in place of its content, so ``task-sent``
  (this process) and ``task-received`` (the worker reads them from the headers) never carry it,
  and the headers naming the endpoint and event (``hookline_endpoint``/``hookline_event``).
- **The broker's URL reads ``redis://``.** The connection names its transport
  ``hookline.transport.redis:Transport`` (``broker_transport``), and Flower picks its Broker tab and
  ``/api/queues/length`` client from the scheme of the connection's URL: kombu's own table of
  transport aliases (``Connection.resolve_aliases``), extended here, shows it as the Redis
  transport it extends. Only the displayed URL changes; the transport used is still Hookline's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.app.amqp import AMQP as CeleryAMQP
from kombu import Connection as KombuConnection
from kombu.connection import resolve_aliases

from hookline.core.messages import (
    TASK_NAME,
    delivery_headers,
    shown_keywords,
    shown_positional,
)

#: ``Celery(amqp=AMQP_CLASS)``.
AMQP_CLASS = "hookline.transport.amqp:AMQP"
#: The transports named in the Celery settings (``broker_transport``).
TRANSPORT = "hookline.transport.redis:Transport"
SENTINEL_TRANSPORT = "hookline.transport.sentinel:SentinelTransport"

#: Told the deliveries one consume call parked: ``[(task id, endpoint id, event id, reason,
#: countdown seconds), ...]``.
ParkedListener = Callable[[list[tuple[str, str, str, str, float]]], None]


class Connection(KombuConnection):
    """kombu's connection; its URL (``as_uri``, ``info()``) names Hookline's transport as
    ``redis``, the scheme of the URL it was given.

    It also carries who listens for the deliveries its channels' consume script parks for
    held endpoints (:meth:`on_parked`): the worker's consumer registers on the connection it
    consumes from, so each connection has its own listener and none is process-wide."""

    resolve_aliases = {**resolve_aliases, TRANSPORT: "redis", SENTINEL_TRANSPORT: "sentinel"}

    #: Who is told the parked deliveries (hookline/transport/redis.py); None: nobody.
    parked_listener: ParkedListener | None = None

    def on_parked(self, listener: ParkedListener | None) -> None:
        """Tell ``listener`` the deliveries parked on this connection's channels (None: stop
        telling). They never reach a task, so the worker's consumer tells Flower instead."""
        self.parked_listener = listener


class AMQP(CeleryAMQP):
    Connection = Connection

    def as_task_v2(self, task_id: str, name: str, args: Any = None, kwargs: Any = None,
                   *rest: Any, **options: Any) -> Any:
        if name != TASK_NAME:
            return super().as_task_v2(task_id, name, args, kwargs, *rest, **options)
        if options.get("argsrepr") is None:
            options["argsrepr"] = shown_positional(args or ())
        options["kwargsrepr"] = shown_keywords(kwargs or {})
        message = super().as_task_v2(task_id, name, args, kwargs, *rest, **options)
        message.headers.update(delivery_headers(args, kwargs, task_id))
        return message
