"""The one base class of Hookline's own exceptions: ``except HooklineError`` catches every error
Hookline raises on purpose (bad settings, bad input, an unknown endpoint, a full schedule)."""


class HooklineError(Exception):
    """Base of every exception Hookline raises on purpose; the message says what to fix."""
