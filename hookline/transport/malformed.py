"""What is not a usable broker message is kept in the dead-letter queue, never dropped.

The transport meets such text in four places: an item on a queue's list that is no kombu
envelope (hookline/transport/redis.py), an unacked record that holds no message
(hookline/transport/unacked.py), a released retry that is no stored envelope
(hookline/transport/rabbitmq.py), and a message Celery's consumer cannot use
(hookline/worker/consumer.py). Each keeps the raw text (reason ``malformed``) so an operator
sees what was sent; here, below the delivery layer, so the transport needs nothing above it.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from hookline.core import redact
from hookline.core.logs import log_event
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue

#: Raw body text kept in the dead letter.
RAW_BODY_LIMIT = 4096


def dead_letter_raw(message: Any, problem: str) -> None:
    """Keep an unusable broker message in the dead-letter queue; never raises."""
    headers = getattr(message, "headers", None) or {}
    body = getattr(message, "body", b"")
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    dead_letter_text(text, problem, task_id=headers.get("id"), task_name=headers.get("task"))


def dead_letter_text(text: str, problem: str, *, task_id: Any = None,
                     task_name: Any = None) -> bool:
    """Keep the raw text of an unusable message in the dead-letter queue; never raises.

    Returns whether it was kept (False when Redis refused it: the caller keeps the text)."""
    try:
        event_id = str(task_id or f"raw-{uuid.uuid4()}")[:200]
        DeadLetterQueue().add(DeadLetter(
            endpoint_id="invalid", event_id=event_id, event_type=str(task_name or ""),
            payload=text[:RAW_BODY_LIMIT], reason="malformed",
            last_error=redact.text(problem)[:500],
            detail="a message on the queue that is not a valid Hookline task",
        ))
        log_event("delivery.dead_lettered", level=logging.ERROR, endpoint_id="invalid",
                  event_id=event_id, reason="malformed", error=problem[:200])
        return True
    except Exception:  # the consumer must go on whatever happens here
        logging.getLogger("hookline").exception("could not dead-letter an unusable message")
        return False
