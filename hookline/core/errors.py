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
