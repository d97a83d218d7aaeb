"""The one base class of Hookline's own exceptions: ``except HooklineError`` catches every error
Hookline raises on purpose (bad settings, bad input, an unknown endpoint, a full schedule)."""

from __future__ import annotations


class HooklineError(Exception):
    """Base of every exception Hookline raises on purpose; the message says what to fix."""


class InvalidField(HooklineError, ValueError):
    """One input field Hookline refuses, wherever it came in; the message starts with the
    field's name (``endpoint id``, ``event id``, ``event type``, ``payload``, ``deadline``,
    ``url``, ...) and says what is wrong, and :attr:`field` names it for code."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class RedisUnavailable(HooklineError):
    """Hookline's Redis (its state, or its Redis broker) did not answer within
    ``HOOKLINE_REDIS_TIMEOUT``, or could not be reached at all: what a web process's call
    (``send_webhook``, ``publish``, ``deliver.delay``, ``portal_link``, a console page) raises
    instead of waiting. The message is one line naming the server (its password masked) and the
    timeout; :attr:`url` is that URL as shown, :attr:`timeout` the setting in seconds, and
    :attr:`reason` why it could not be reached (None: it did not answer in time)."""

    def __init__(self, server: str, url: str, timeout: float, reason: str | None = None
                 ) -> None:
        problem = (f"did not answer within {timeout:g}s (HOOKLINE_REDIS_TIMEOUT)"
                   if reason is None else
                   f"cannot be reached: {reason} (HOOKLINE_REDIS_TIMEOUT={timeout:g}s)")
        super().__init__(f"{server} {url} {problem}")
        self.url = url
        self.timeout = timeout
        self.reason = reason


class WebhookInputError(HooklineError, ValueError):
    """The event cannot be enqueued as given; the message says why, naming the field
    (:attr:`field`: ``endpoint_id``, ``event_type``, ``payload``, ``event_id`` or
    ``deadline``)."""

    def __init__(self, message: str, field: str = "endpoint_id") -> None:
        super().__init__(message)
        self.field = field


class EventIdConflict(WebhookInputError):
    """The event id was already used for this endpoint with another event type or payload: an
    event id is an idempotency key, so the same id must always carry the same content."""

    def __init__(self, endpoint_id: str, event_id: str) -> None:
        super().__init__(
            f"event id {event_id!r} was already sent to endpoint {endpoint_id!r} with a "
            "different event type or payload: an event id names one event (the same id "
            "with the same content is delivered once); give new content a new id",
            "event_id",
        )
        self.endpoint_id = endpoint_id
        self.event_id = event_id


class UnregisteredEndpoint(WebhookInputError):
    """The event's endpoint is not registered (never added, or removed)."""
