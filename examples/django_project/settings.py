"""Settings of the example project (``DJANGO_SETTINGS_MODULE=examples.django_project.settings``).

Run it from the repository root:

    .venv/bin/python -m examples.django_project.manage migrate
    .venv/bin/hookline endpoint add orders --url http://127.0.0.1:8099/ok
    .venv/bin/python -m examples.django_project.manage runserver 8000
    curl -X POST localhost:8000/orders -d '{"customer": "ada", "total": "9.99"}'

The console is mounted under /hookline/ behind Django's staff sign-in (the admin's login page):
create a superuser (``manage createsuperuser``), or give a staff user the permissions
``hookline.view_console`` and ``hookline.act_console``, and open localhost:8000/hookline/.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# A demo key: this project is an example, never a deployment.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "hookline-example-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",  # its login page is the console's sign-in (staff only)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "hookline.contrib.django",  # checks the environment's Hookline settings (manage.py check)
    "examples.django_project.orders",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]
#: Someone not signed in who opens the console is sent here: the admin's staff sign-in.
LOGIN_URL = "/admin/login/"
STATIC_URL = "/static/"
ROOT_URLCONF = "examples.django_project.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get(
            "ORDERS_DB_PATH", str(Path(tempfile.gettempdir()) / "hookline-example-orders.sqlite3")
        ),
    }
}

# Hookline's settings are not Django settings: they come from the environment (REDIS_URL,
# HOOKLINE_MAX_ATTEMPTS, ...), which the worker reads too, so both processes agree. The
# hookline.contrib.django app checks them (a system check) and refuses a settings.HOOKLINE dict.

#: The endpoint that receives this shop's order events (`hookline endpoint add orders ...`).
ORDERS_WEBHOOK_ENDPOINT = os.environ.get("ORDERS_WEBHOOK_ENDPOINT", "orders")
