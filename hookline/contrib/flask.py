"""Hookline as a Flask extension.

    from hookline.contrib.flask import Hookline

    hookline = Hookline()

    def create_app():
        app = Flask(__name__)
        hookline.init_app(app)
        return app

    # in a view
    event_id = hookline.send_webhook("shop-42", "order.created", {"order": 1234})

Settings come from the environment (``REDIS_URL``, ``HOOKLINE_*``), the same variables the
worker reads. ``init_app`` validates them and refuses ``HOOKLINE_*`` keys in ``app.config``,
which would configure the web process but not the worker.

``publish_on_commit`` publishes (``hookline.publish``) once the request has ended well: after
a response below 400; an error response or an unhandled exception publishes nothing. Outside
a request it publishes at once.

Operational events are blinker signals here (:data:`endpoint_disabled`,
:data:`event_dead_lettered`, :data:`endpoint_failing`, :data:`endpoint_recovered`), sent with
the endpoint id as sender and the keyword arguments ``event``, ``endpoint_id`` and the event's
fields, in the process where the event happens (usually a worker: connect receivers in a
module named by ``HOOKLINE_WORKER_IMPORTS``). A receiver that raises is logged and passed over.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from blinker import Namespace
from flask import Flask, Response, g, has_request_context

from hookline.contrib.framework import (
    Publication,
    check_environment,
    enqueue_logged,
    forward_operational,
    prepare_publication,
    publish_logged,
)
from hookline.core import operational_events
from hookline.core.config import ConfigError, Settings, settings
from hookline.core.logs import log_event
from hookline.core.operational_events import OperationalEvent
from hookline.core.refusal import refused
from hookline.core.specs import EventSpec, PublicationSpec

__all__ = ["Hookline", "endpoint_disabled", "endpoint_failing", "endpoint_recovered",
           "event_dead_lettered"]

_signals = Namespace()
#: An endpoint was disabled: a 410 Gone (``reason="gone"``) or an operator (``"operator"``).
endpoint_disabled = _signals.signal("hookline.endpoint-disabled")
#: An event went to the dead-letter queue; ``reason`` says why.
event_dead_lettered = _signals.signal("hookline.event-dead-lettered")
#: An endpoint's circuit breaker opened: it keeps failing.
endpoint_failing = _signals.signal("hookline.endpoint-failing")
#: An endpoint's circuit breaker closed again.
endpoint_recovered = _signals.signal("hookline.endpoint-recovered")
SIGNALS = {operational_events.ENDPOINT_DISABLED: endpoint_disabled,
           operational_events.DEAD_LETTERED: event_dead_lettered,
           operational_events.ENDPOINT_FAILING: endpoint_failing,
           operational_events.ENDPOINT_RECOVERED: endpoint_recovered}


def _send_signal(event: OperationalEvent) -> None:
    """Forward one operational event to its blinker signal, each receiver on its own: one
    that raises is logged and the others still hear it."""
    signal = SIGNALS[event.kind]
    for receiver in list(signal.receivers_for(event.endpoint_id)):
        try:
            receiver(event.endpoint_id, event=event, endpoint_id=event.endpoint_id,
                     **event.data)
        except Exception as exc:
            log_event("operational.callback_failed", level=logging.WARNING, kind=event.kind,
                      endpoint_id=event.endpoint_id,
                      callback=getattr(receiver, "__qualname__", type(receiver).__name__),
                      error=type(exc).__name__)


forward_operational(_send_signal, lambda kind: bool(SIGNALS[kind].receivers))
#: Where a request keeps the events it publishes when it ends well.
_PENDING = "_hookline_publications"


class Hookline:
    """The extension; ``app.extensions["hookline"]`` holds it after :meth:`init_app`.

    :param app: a Flask application to initialise now, or None to call :meth:`init_app`
        later (application factories).
    """

    def __init__(self, app: Flask | None = None) -> None:
        self.settings: Settings | None = None
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Validate Hookline's environment settings; raises
        ``hookline.core.config.ConfigError`` naming the bad variable, or a ``HOOKLINE_*`` key
        in ``app.config`` (a :class:`~hookline.core.refusal.SettingRefused`, which the
        ``flask`` command line prints as one line)."""
        try:
            self.settings = check_environment(app.config,
                                              source=f"Flask app {app.name!r} config")
        except ConfigError as error:
            raise refused(error) from None  # `flask run` and friends: one line
        app.extensions["hookline"] = self
        app.after_request(_publish_pending)

    def send_webhook(
        self,
        endpoint_id: str,
        event_type: str,
        payload: Any,
        event_id: str | None = None,
        *,
        deadline: float | datetime | None = None,
        ordering_key: str | None = None,
    ) -> str:
        """Validate and enqueue one event, as :func:`hookline.send_webhook`; returns its event id.
        Raises :class:`hookline.WebhookInputError` on bad input."""
        from hookline.api.enqueue import send_event

        return send_event(EventSpec(endpoint_id, event_type, payload, event_id, deadline,
                                    ordering_key))

    def send_webhook_on_commit(
        self,
        endpoint_id: str,
        event_type: str,
        payload: Any,
        event_id: str | None = None,
        *,
        session: Any,
        deadline: float | datetime | None = None,
        ordering_key: str | None = None,
    ) -> str:
        """One event for one endpoint, sent only if ``session``'s transaction (a SQLAlchemy
        session: Flask-SQLAlchemy's ``db.session``) commits; returns its event id.

        With ``HOOKLINE_OUTBOX=on`` it is a row of the outbox in that transaction
        (``hookline.contrib.sqlalchemy.add_webhook``), published by the workers' relay:
        nothing here touches Redis. Off, the event is checked now (Redis included, as
        :func:`hookline.send_webhook`) and enqueued when the session commits; a rollback
        sends nothing."""
        spec = EventSpec(endpoint_id, event_type, payload, event_id, deadline, ordering_key)
        if _outbox(session):
            from hookline.contrib.sqlalchemy import add_event

            return add_event(session, spec)
        from sqlalchemy import event as sa_event

        from hookline.api.enqueue import prepare_event

        prepared = prepare_event(spec, bind=False)
        target = getattr(session, "registry", None)  # a scoped_session: its session now
        target = target() if callable(target) else session
        ended = [False]  # the transaction this event belongs to has ended

        def committed(_: Any) -> None:
            if not ended[0]:
                ended[0] = True
                enqueue_logged(prepared)

        def rolled_back(_: Any) -> None:
            ended[0] = True

        sa_event.listen(target, "after_commit", committed, once=True)
        sa_event.listen(target, "after_rollback", rolled_back, once=True)
        return prepared.event_id

    def publish_on_commit(
        self,
        app_id: str,
        event_type: str,
        payload: Any,
        event_id: str | None = None,
        *,
        channels: Sequence[str] | None = None,
        deadline: float | datetime | None = None,
        ordering_key: str | None = None,
        session: Any = None,
    ) -> str:
        """Publish an event to an application's subscribed endpoints (``hookline.publish``)
        once this request has answered below 400; returns its event id. The event type, id,
        payload and deadline are checked now (``WebhookInputError``). Outside a request it is
        published at once.

        With ``HOOKLINE_OUTBOX=on`` and a SQLAlchemy ``session`` (Flask-SQLAlchemy's
        ``db.session``) the event is instead a row of the outbox in that session's
        transaction (``hookline.contrib.sqlalchemy.add_publication``), published by the
        workers' relay once committed."""
        spec = PublicationSpec(app_id, event_type, payload, event_id, channels, deadline,
                               ordering_key)
        if session is not None and _outbox(session):
            from hookline.contrib.sqlalchemy import add_event

            return add_event(session, spec)
        publication = prepare_publication(spec)
        if has_request_context():
            pending: list[Publication] = g.setdefault(_PENDING, [])
            pending.append(publication)
        else:
            publish_logged(publication)
        return publication.event_id


def _publish_pending(response: Response) -> Response:
    """After a request: publish what it asked to when it answered below 400 (the work it
    reported done), drop it otherwise."""
    pending: list[Publication] = g.pop(_PENDING, [])
    if not pending:
        return response
    if response.status_code >= 400:
        for publication in pending:
            log_event("publish.dropped", app_id=publication.app_id,
                      event_id=publication.event_id, status=response.status_code)
        return response
    for publication in pending:
        publish_logged(publication)
    return response


def _outbox(session: Any) -> bool:
    """Whether events go to the outbox: ``HOOKLINE_OUTBOX=on`` and a session to write in."""
    return settings().outbox and session is not None
