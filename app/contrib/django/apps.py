"""The Django app behind ``INSTALLED_APPS = [..., "app.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig


class HooklineConfig(AppConfig):
    """Applies ``settings.HOOKLINE`` once the project's settings are loaded."""

    name = "app.contrib.django"
    label = "hookline"
    verbose_name = "Hookline webhooks"

    def ready(self) -> None:
        from app.contrib.django import configure_from_django

        configure_from_django()
