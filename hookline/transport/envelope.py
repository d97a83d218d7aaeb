"""The broker message kombu's Redis transport pushes for a task, built without a broker.

A retry parked in the schedule is stored as this message, ready to push (the schedule and
its readers see only text: ``hookline.core.envelope`` reads it back), and a fan-out's
deliveries are pushed in this form by one script. Built with Celery's own
``create_task_message`` and the envelope kombu's virtual channel makes, so a worker reads it
like any published task.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kombu.serialization import dumps as serialize
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps as json_dumps
from kombu.utils.uuid import uuid

from hookline.core.messages import DELIVERY_QUEUE, TASK_NAME, delivery_headers, shown_args, stamped
from hookline.core.tracing import message_headers
from hookline.store.fanouts import PublishedEvent


def build_message(celery_app: Any, *, task_name: str, task_id: str, args: Any,
                  kwargs: dict[str, Any], retries: int, queue: str, parent_id: str | None = None,
                  root_id: str | None = None, argsrepr: str | None = None,
                  headers: dict[str, Any] | None = None) -> str:
    """The message kombu's Redis transport would push for this task onto ``queue``, as JSON.

    Built with Celery's own ``create_task_message`` and the envelope kombu's virtual channel
    makes (``prepare_message`` and ``_inplace_augment_message``: base64 body, a fresh delivery
    tag, the queue as exchange and routing key), so the worker reads it like any published
    task. Built here rather than through a producer: no broker connection is needed, so a
    retry can be built (and parked) without one.
    """
    made, properties, body, _ = celery_app.amqp.create_task_message(
        task_id, task_name, args, kwargs, retries=retries, parent_id=parent_id, root_id=root_id,
        argsrepr=argsrepr,
    )
    if task_name == TASK_NAME:
        made.update(delivery_headers(args, kwargs, task_id))
    made.update(headers or {})
    content_type, content_encoding, data = serialize(body, serializer="json")
    message = {
        "body": bytes_to_str(base64.b64encode(str_to_bytes(data))),
        "content-encoding": content_encoding,
        "content-type": content_type,
        "headers": made,
        "properties": {
            **properties,
            "delivery_mode": 2,
            "delivery_info": {"exchange": queue, "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": uuid(),
        },
    }
    return str(json_dumps(message))


#: Stand-ins for what differs from one delivery's message to the next (JSON-safe text).
_TASK_ID, _ENDPOINT, _ARGSREPR, _TAG, _BODY = (f"@@hookline-{name}@@" for name in
                                               ("task-id", "endpoint", "argsrepr", "tag", "body"))


class DeliveryMessages:
    """The broker messages of one event's deliveries, as kombu's Redis transport writes them
    (:func:`build_message`). Celery builds one; the others differ only in
    the endpoint, the task id, ``argsrepr``, the delivery tag and the body's first argument,
    so they are that message's JSON text with those filled in: a tenth of building each one
    through Celery."""

    def __init__(self, celery_app: Any, event: PublishedEvent, payload: Any, size: int) -> None:
        self.event, self.size, self.celery_app, self.payload = event, size, celery_app, payload
        self.trace = message_headers()  # the publish's or the fan-out task's trace context
        # An id or type holding a stand-in's text would be filled in too: build those whole.
        self.whole = "@@hookline-" in event.event_id + event.event_type
        self.kwargs = stamped({"event_id": event.event_id, "deadline": event.deadline,
                               **({"ordering_key": event.ordering_key}
                                  if event.ordering_key else {})})
        template = json.loads(build_message(
            celery_app, task_name=TASK_NAME, task_id=_TASK_ID,
            args=(_ENDPOINT, event.event_type, payload),
            kwargs=self.kwargs, retries=0, queue=DELIVERY_QUEUE, argsrepr=_ARGSREPR,
            headers=self.trace))
        _args, kwargs, embed = json.loads(base64.b64decode(template["body"]))
        # The body: [[endpoint id, type, payload], kwargs, embed], the endpoint id put in front.
        self.body_tail = json_dumps([event.event_type, payload])[1:] + ", " + json_dumps(
            kwargs) + ", " + json_dumps(embed) + "]"
        template["body"] = _BODY
        template["headers"]["hookline_endpoint"] = _ENDPOINT
        template["properties"]["delivery_tag"] = _TAG
        self.text = str(json_dumps(template))
        for stand_in in (_TASK_ID, _ENDPOINT, _ARGSREPR, _TAG, _BODY):
            if f'"{stand_in}"' not in self.text:  # a Celery that lays messages out otherwise
                raise RuntimeError(f"fan-out message template lacks {stand_in}")

    def build(self, endpoint_id: str) -> str:
        task_id = f"{endpoint_id}/{self.event.event_id}"
        argsrepr = shown_args(endpoint_id, self.event.event_type, None, size=self.size)
        if self.whole:
            return build_message(
                self.celery_app, task_name=TASK_NAME, task_id=task_id,
                args=(endpoint_id, self.event.event_type, self.payload), kwargs=self.kwargs,
                retries=0, queue=DELIVERY_QUEUE, argsrepr=argsrepr, headers=self.trace)
        body = f"[[{json_dumps(endpoint_id)}, {self.body_tail}"
        return (self.text
                .replace(_TASK_ID, _json_text(task_id))
                .replace(_ENDPOINT, endpoint_id)  # [A-Za-z0-9_.-]: JSON-safe as it is
                .replace(_ARGSREPR, _json_text(argsrepr))
                .replace(_TAG, uuid())
                .replace(_BODY, base64.b64encode(body.encode()).decode()))


def _json_text(text: str) -> str:
    """``text`` as the inside of a JSON string."""
    return json.dumps(text)[1:-1]
