"""A bad setting refused at a door, in one line.

Every way into Hookline reads the same settings, and each must say what is wrong in one line
that names the variable, with no traceback, and exit non-zero. Most doors are click command
lines: ``celery -A app worker`` and ``celery -A app flower`` (Celery's CLI reads
``hookline.celeryconfig`` while it parses its options), ``flask run`` and the other ``flask``
commands (Flask's CLI loads the app, whose ``Hookline(app)`` checks the settings), and
``hookline``. click prints a :class:`click.ClickException` as ``Error: <message>`` and exits 1,
so the error raised there is one: :class:`SettingRefused` is both that and a
:class:`~hookline.core.config.ConfigError` (a host catching ``ConfigError`` or
``HooklineError`` still does). Nothing global changes: outside a click command line it is an
ordinary exception with a one-line message.
"""

from __future__ import annotations

import click

from hookline.core.config import ConfigError


class SettingRefused(ConfigError, click.ClickException):
    """A :class:`ConfigError` that click's command lines print as one line."""

    def __init__(self, message: str) -> None:
        click.ClickException.__init__(self, message)  # (sets args as ConfigError's would)


def refused(error: ConfigError) -> SettingRefused:
    """``error`` as a :class:`SettingRefused` (unchanged if it is one)."""
    return error if isinstance(error, SettingRefused) else SettingRefused(str(error))
