"""The Django app behind ``INSTALLED_APPS = [..., "hookline.contrib.django"]``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class HooklineConfig(AppConfig):
    """Checks Hookline's environment settings with Django's system checks; holds the console's
    permissions (:mod:`hookline.contrib.django.models`)."""

    name = "hookline.contrib.django"
    label = "hookline"
    verbose_name = "Hookline webhooks"
    #: The console's permission model keeps this key type whatever the host's
    #: DEFAULT_AUTO_FIELD, so the host's makemigrations never finds a change to make.
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        checks.register(check_settings)
        checks.register(check_console_extra, checks.Tags.urls)


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A bad Hookline setting as Django's system check error ``hookline.E001``: ``manage.py
    check``, ``runserver`` and ``migrate`` print it in one line naming the variable, with no
    traceback, and refuse to go on (``check`` exits 1). Django runs no checks under a WSGI
    server: there the first ``send_webhook`` or ``publish`` raises the same error (run
    ``manage.py check --deploy`` in the release step, as Django advises). An exception raised
    from ``ready()`` would print a traceback at every command instead."""
    from hookline.contrib.django import check_configuration

    try:
        check_configuration()
    except ImproperlyConfigured as error:
        return [checks.Error(str(error), id="hookline.E001")]
    return []


def check_console_extra(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The console mounted (``include("hookline.contrib.django.console")``) without its extra
    as the system check error ``hookline.E002``: one line naming the extra, no traceback. The
    project's URLconf is loaded to know (Django's own URL check loads it too); one that fails
    to load is left to that check."""
    import sys

    from django.urls import get_resolver

    try:
        get_resolver().url_patterns  # noqa: B018 - imports the URLconf and what it includes
    except Exception:
        return []
    console = sys.modules.get("hookline.contrib.django.console")
    missing = getattr(console, "MISSING_EXTRA", None)
    return [checks.Error(missing, id="hookline.E002")] if missing else []
