"""The Django app behind ``INSTALLED_APPS = [..., "hookline.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig


class HooklineConfig(AppConfig):
    """Validates Hookline's environment settings once Django has started."""

    name = "hookline.contrib.django"
    label = "hookline"
    verbose_name = "Hookline webhooks"

    def ready(self) -> None:
        from hookline.contrib.django import check_configuration

        check_configuration()
