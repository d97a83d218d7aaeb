"""The console mounted without its extra (``pip install 'hookline[console]'``: Jinja2 and
Werkzeug) is one line naming the extra, never a traceback.

Django: the example project (which mounts the console under /hookline/) in a process of its own
where ``import werkzeug`` and ``import jinja2`` raise ``ImportError`` (``sys.modules[name] =
None`` before anything is imported: what an environment without the extra does). ``manage.py
check`` refuses with the system check ``hookline.E002`` in one line; a console URL raises the
same message as ``ImproperlyConfigured``; a project that does not mount the console is not
bothered.

Flask: Flask itself requires Werkzeug and Jinja2, in versions the extra accepts, so a Flask app
always has what the console needs; the test checks that, from the installed metadata.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

#: Run first in the subprocess: the console extra's modules cannot be imported.
WITHOUT_EXTRA = "import sys\nfor name in ('werkzeug', 'jinja2', 'markupsafe'):\n" \
                "    sys.modules[name] = None\n"
ERROR = ("the Hookline console is mounted but its extra is not installed (no module named "
         "'werkzeug'): pip install 'hookline[console]'")


def _run_without_extra(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    script = WITHOUT_EXTRA + textwrap.dedent(code)
    environment = {**os.environ, "ORDERS_DB_PATH": str(tmp_path / "orders.sqlite3"),
                   "DJANGO_SETTINGS_MODULE": "examples.django_project.settings",
                   "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), **env}
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=120)


def test_manage_py_check_says_the_extra_is_missing_in_one_line(tmp_path: Path) -> None:
    result = _run_without_extra("""
        sys.argv = ["manage.py", "check"]
        from django.core.management import execute_from_command_line
        execute_from_command_line(sys.argv)
    """, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if "hookline" in line.lower()]
    assert errors == [f"?: (hookline.E002) {ERROR}"], output


def test_a_console_url_raises_improperly_configured_with_the_same_line(tmp_path: Path) -> None:
    """Under a WSGI server Django runs no checks: the console's URLs raise the error, the
    project's other URLs work."""
    result = _run_without_extra("""
        import django
        django.setup()
        from django.core.exceptions import ImproperlyConfigured
        from django.test import Client
        client = Client(raise_request_exception=True)
        assert client.get("/admin/login/").status_code == 200
        try:
            client.get("/hookline/")
        except ImproperlyConfigured as exc:
            print("raised:", exc)
    """, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"raised: {ERROR}"], result.stdout + result.stderr


def test_a_project_without_the_console_is_not_bothered(tmp_path: Path) -> None:
    (tmp_path / "no_console_settings.py").write_text(
        "from examples.django_project.settings import *  # noqa: F403\n"
        "ROOT_URLCONF = 'no_console_urls'\n")
    (tmp_path / "no_console_urls.py").write_text(
        "from django.contrib import admin\nfrom django.urls import path\n"
        "urlpatterns = [path('admin/', admin.site.urls)]\n")
    result = _run_without_extra("""
        sys.argv = ["manage.py", "check"]
        from django.core.management import execute_from_command_line
        execute_from_command_line(sys.argv)
    """, tmp_path, DJANGO_SETTINGS_MODULE="no_console_settings")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_flask_brings_what_the_console_extra_needs() -> None:
    """No Flask without Werkzeug and Jinja2: flask_console can never miss its extra, so it
    needs no error of its own; a Flask release that dropped either would fail here."""
    extra = [Requirement(text) for text in metadata.requires("hookline") or []
             if 'extra == "console"' in text]
    flask = {requirement.name.lower(): requirement for text in metadata.requires("flask") or []
             if not (requirement := Requirement(text)).marker}
    assert {requirement.name for requirement in extra} == {"jinja2", "werkzeug"}
    for needed in extra:
        given = flask[needed.name]
        floor = min(spec.version for spec in given.specifier if spec.operator == ">=")
        assert needed.specifier.contains(floor), (needed, given)
