"""The worker's request for a delivery (``DeliveryTask.Request``): what Flower is told.

A delivery's outcome is Hookline's, not Celery's: the task returns normally whether the event
was delivered, parked for a retry or a deferral, or dead-lettered, so Celery would report
every one of them as SUCCESS. Here the one event Celery sends when the task returns
(``task-succeeded``, with the result's text) becomes the event that matches the outcome:

- delivered or a duplicate: ``task-succeeded`` (SUCCESS), as before;
- a retry or a deferral parked in the schedule: ``task-retried`` (RETRY), the result as its
  "exception", its runtime kept;
- dead-lettered, any reason: ``task-failed`` (FAILURE; Flower's Workers page counts it as
  failed), the result as its "exception", no traceback.

No exception is raised for it (a traceback per dead letter or retry would cost more than the
delivery and fill the log): one string comparison per task event. A revoked delivery is
dead-lettered by ``hookline.worker.tasks`` (``task_revoked``); its ``task-revoked`` event is
followed by a ``task-failed`` one, so Flower's last word is FAILURE like any dead letter.

``task-received`` shows the arguments Hookline's publishers put in the headers (the payload's
size, ``hookline.transport.amqp``); a message published otherwise (a bare ``send_task`` from
another Celery app, whose ``argsrepr`` holds the payload) is shown the same way, worked out
here.

The request also carries the message's entry in its channel's ledger
(``hookline.transport.ledger``) from the consumer to the task, which reads it back with
:func:`held_entry`: where the threads or solo pool run the task in the process that took the
message. A prefork child gets None (an entry is its process's), as does any message without
one (RabbitMQ, kombu's own layout).
"""

from __future__ import annotations

from typing import Any

from celery.worker.request import Request

from hookline.core.messages import shown_keywords, shown_positional
from hookline.transport.ledger import Entry, entry_of

#: The start of a task result's text (``saferepr`` of the dict ``deliver`` returns), by the
#: Flower event it stands for.
_RETRIED = ("{'outcome': 'retry_scheduled'", "{'outcome': 'deferred'")
_FAILED = "{'outcome': 'dead_lettered'"
#: The message's ledger entry in the request the task gets (``self.request``).
ENTRY_KEY = "hookline_entry"


def held_entry(request: Any) -> Entry | None:
    """The ledger entry of the message a task's ``request`` runs for, when this process took
    it with a records-set member; else None."""
    entry = getattr(request, ENTRY_KEY, None)
    return entry if isinstance(entry, Entry) else None


class TaskRequest(Request):
    def __init__(self, message: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(message, *args, **kwargs)
        entry = entry_of(message)
        if entry is not None:
            self._request_dict[ENTRY_KEY] = entry

    @property
    def argsrepr(self) -> str:
        if "hookline_event" in self._request_dict:  # published by Hookline: already shown
            return str(super().argsrepr)
        return shown_positional(self._args)

    @property
    def kwargsrepr(self) -> str:
        if "hookline_event" in self._request_dict:
            return str(super().kwargsrepr)
        return shown_keywords(self._kwargs)

    def send_event(self, type: str, **fields: Any) -> None:
        if type == "task-succeeded":
            result = fields.get("result")
            if isinstance(result, str):
                if result.startswith(_RETRIED):
                    super().send_event("task-retried", exception=result, traceback="",
                                       result=result, runtime=fields.get("runtime"))
                    return
                if result.startswith(_FAILED):
                    super().send_event("task-failed", exception=result, traceback="",
                                       result=result, runtime=fields.get("runtime"))
                    return
        super().send_event(type, **fields)
        if type == "task-revoked":
            reason = "expired" if fields.get("expired") else "revoked"
            outcome = repr({"outcome": "dead_lettered", "reason": reason})
            super().send_event("task-failed", exception=outcome, traceback="", result=outcome)
