"""RabbitMQ as the broker (``HOOKLINE_BROKER_URL=pyamqp://...``, ``amqp://``, ``amqps://``):
what Hookline asks of the broker besides Celery's own consuming, through kombu.

- **Releasing retries.** A parked retry is stored as the message kombu's Redis transport
  would push (``hookline.transport.envelope.build_message``: a JSON envelope, base64 body).
  :meth:`RabbitBroker.publish_released` unwraps it (body, content type and encoding, headers,
  and the properties that matter: the task id as correlation id, reply-to, priority) and
  publishes it to the retry queue through the Celery app's producer pool, with publisher
  confirms (``confirm_publish``, celery_settings): a publish returns once RabbitMQ has it.
- **Queue depths.** A passive ``queue.declare`` reports a queue's ready messages without
  touching it (:meth:`RabbitBroker.depths`), for ``hookline stats`` and the metrics gauges.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterable
from typing import Any

from kombu import Queue
from kombu.exceptions import KombuError

from hookline.core.config import Settings
from hookline.core.errors import HooklineError
from hookline.transport.malformed import dead_letter_text

#: Seconds to wait for the broker: a connection, a publisher confirm, a passive declare.
BROKER_TIMEOUT = 10.0
#: kombu's retry policy for a publish (reconnects in between), as celery_settings' for tasks.
PUBLISH_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5,
                        "interval_max": 2}


class BrokerUnavailable(HooklineError):
    """RabbitMQ did not answer or refused the operation (the message says which).
    ``published``: how many of a batch of released retries were published before it."""

    def __init__(self, message: str, *, published: int = 0) -> None:
        super().__init__(message)
        self.published = published


def _errors(connection: Any) -> tuple[type[BaseException], ...]:
    return (KombuError, OSError, *connection.connection_errors, *connection.channel_errors)


class RabbitBroker:
    """Hookline's queues on RabbitMQ, through ``celery_app``'s connection and producer pools.

    :param celery_app: the Celery app whose broker is RabbitMQ (default: the publishing app,
        ``hookline.transport.celery_app.publishing_app()``).
    :param config: settings, for the queue declarations (default: the process's).
    """

    def __init__(self, celery_app: Any = None, config: Settings | None = None) -> None:
        from hookline.core.config import settings
        from hookline.transport.celery_app import publishing_app
        from hookline.transport.celery_settings import hookline_queues

        self.celery_app = celery_app or publishing_app()
        self.queues = {queue.name: queue for queue in hookline_queues(config or settings())}

    def publish_released(self, queue: str, messages: list[str]) -> int:
        """Publish released retries (stored envelopes; "" for one with no message, skipped)
        to ``queue`` in order, each confirmed by RabbitMQ; returns how many were done. A
        failure part-way raises :class:`BrokerUnavailable` after the ones before it."""
        declared = self.queues.get(queue) or Queue(queue)
        done = 0
        with self.celery_app.producer_pool.acquire(block=True, timeout=BROKER_TIMEOUT) as producer:
            errors = _errors(producer.connection)
            try:
                for message in messages:
                    if message:
                        try:
                            body, options = unwrap(message)
                        except (ValueError, KeyError, TypeError, AttributeError) as exc:
                            # Not a stored envelope (corrupted in Redis): kept as a dead
                            # letter and counted done, so it never blocks the retries behind
                            # it; not kept (Redis refused): stop here, tried again later.
                            if not dead_letter_text(message, "a released retry that is not a "
                                                    f"broker envelope: {type(exc).__name__}"):
                                break
                            done += 1
                            continue
                        producer.publish(body, exchange=declared.exchange, routing_key=queue,
                                         declare=[declared], retry=True,
                                         retry_policy=PUBLISH_RETRY_POLICY,
                                         confirm_timeout=BROKER_TIMEOUT, **options)
                    done += 1
            except errors as exc:
                raise BrokerUnavailable(
                    f"publishing a released retry to {queue} failed after {done} of "
                    f"{len(messages)}: {type(exc).__name__}", published=done) from exc
        return done

    def depths(self, queues: Iterable[str]) -> dict[str, int]:
        """Ready messages in each queue (0 for a queue not declared yet)."""
        depths: dict[str, int] = {}
        with self.celery_app.pool.acquire(block=True, timeout=BROKER_TIMEOUT) as connection:
            errors = _errors(connection)
            try:
                connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT)
                for queue in queues:
                    depths[queue] = self._depth(connection, queue)
            except errors as exc:
                raise BrokerUnavailable(f"RabbitMQ does not answer: {type(exc).__name__}"
                                        ) from exc
        return depths

    @staticmethod
    def _depth(connection: Any, queue: str) -> int:
        channel = connection.channel()
        try:
            ok = channel.queue_declare(queue=queue, passive=True)
            return int(ok.message_count)
        except connection.channel_errors as exc:
            if getattr(exc, "reply_code", None) == 404:  # NOT_FOUND: not declared yet
                return 0
            raise
        finally:
            with contextlib.suppress(Exception):  # a channel the server closed already
                channel.close()


def unwrap(message: str) -> tuple[bytes, dict[str, Any]]:
    """The body and ``Producer.publish`` options of a stored Redis-transport envelope: content
    type and encoding (so kombu publishes the body as it is), headers, and the properties
    AMQP carries (correlation id = the task id, reply-to, priority, persistent delivery)."""
    envelope = json.loads(message)
    properties = envelope.get("properties") or {}
    body = envelope["body"]
    raw = (base64.b64decode(body) if properties.get("body_encoding") == "base64"
           else str(body).encode())
    options: dict[str, Any] = {
        "content_type": envelope.get("content-type") or "application/json",
        "content_encoding": envelope.get("content-encoding") or "utf-8",
        "headers": envelope.get("headers") or {},
        "delivery_mode": properties.get("delivery_mode") or 2,
        "priority": properties.get("priority") or 0,
    }
    for name in ("correlation_id", "reply_to"):
        if properties.get(name):
            options[name] = properties[name]
    return raw, options
