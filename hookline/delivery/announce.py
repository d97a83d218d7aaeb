"""Telling Flower about deliveries dead-lettered outside a worker's task: the retries an
endpoint's disable, removal or 410 moves from the schedule to the dead-letter queue
(``retries.dead_letter_scheduled``, from the CLI, the console, the portal or a worker).

Their last task event was ``task-retried`` (RETRY); without a word from the process that
dead-lettered them Flower would show them waiting for good. Any process can send task events
(Celery's event dispatcher on the broker): one ``task-failed`` per retry (FAILURE, the reason
as the "exception"), published together as one ``task.multi`` message. Best effort: quick
timeouts, no retries, and a broker that does not answer costs a log line, never the caller's
command (the dead letters are written first, and they are what counts).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable

from hookline.core.logs import log_event
from hookline.delivery.publisher import publishing_app

#: Seconds to connect to the broker and to wait for it: Flower's view is not worth more.
TIMEOUT = 2.0


def hostname() -> str:
    """The name Flower shows as the "worker" of these events: this process."""
    return f"hookline-{os.getpid()}@{socket.gethostname()}"


def dead_lettered(tasks: Iterable[tuple[str, str]]) -> int:
    """Send ``task-failed`` for each ``(task id, reason)``; returns how many were sent (0 when
    task events are off or the broker did not take them). Never raises."""
    tasks = [(task_id, reason) for task_id, reason in tasks if task_id]
    celery_app = publishing_app()
    if not tasks or not celery_app.conf.worker_send_task_events:
        return 0
    try:
        connection = celery_app.connection_for_write(
            connect_timeout=TIMEOUT,
            transport_options={"socket_connect_timeout": TIMEOUT, "socket_timeout": TIMEOUT,
                               "max_retries": 0})
        with connection:
            connection.ensure_connection(max_retries=1)
            with celery_app.events.Dispatcher(connection, hostname=hostname(),
                                              buffer_group=["task"],
                                              buffer_limit=len(tasks) + 1) as dispatcher:
                for task_id, reason in tasks:
                    outcome = repr({"outcome": "dead_lettered", "reason": reason})
                    dispatcher.send("task-failed", uuid=task_id, exception=outcome,
                                    traceback="", result=outcome)
                dispatcher.flush()
    except Exception as exc:  # Flower's view must never break the command that dead-lettered
        log_event("flower.event_failed", level=logging.WARNING, count=len(tasks),
                  error=type(exc).__name__)
        return 0
    return len(tasks)
