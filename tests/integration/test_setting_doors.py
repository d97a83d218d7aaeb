"""A bad setting at every door says so in one line naming the variable, with no traceback, and
a non-zero exit: Celery's worker and Flower (whose command line reads ``hookline.celeryconfig``
while it parses its options), ``hookline worker`` with one process or several, the other
``hookline`` commands, Flask's command line and Django's management commands (a system check).
Each door is its own process started as a user starts it; none gets as far as Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

#: (variable, bad value): a number, a broker nobody supports, a Celery worker setting.
BAD = [("HOOKLINE_MAX_ATTEMPTS", "abc"), ("HOOKLINE_BROKER_URL", "kafka://broker:9092"),
       ("CELERY_WORKER_CONCURRENCY", "lots")]

DOORS = {
    "celery -A app worker": [str(BIN / "celery"), "-A", "app", "worker"],
    "celery -A hookline.worker worker": [str(BIN / "celery"), "-A", "hookline.worker",
                                         "worker"],
    "celery -A app flower": [str(BIN / "celery"), "-A", "app", "flower"],
    "hookline worker": [str(BIN / "hookline"), "worker", "--processes", "2"],
    "hookline worker --processes 1": [str(BIN / "hookline"), "worker", "--processes", "1"],
    "hookline stats": [str(BIN / "hookline"), "stats"],
    "hookline endpoint list": [str(BIN / "hookline"), "endpoint", "list"],
    "hookline console": [str(BIN / "hookline"), "console", "--port", "0"],
    "flask routes": [str(BIN / "flask"), "--app", "examples.flask_app.app", "routes"],
    "manage.py check": [sys.executable, "-m", "examples.django_project.manage", "check"],
}
#: Doors that read only Hookline's settings, not the Celery worker's (CELERY_WORKER_*).
WEB_AND_CLI = {"hookline stats", "hookline endpoint list", "hookline console", "flask routes",
               "manage.py check"}


def _run(command: list[str], variable: str, value: str) -> subprocess.CompletedProcess[str]:
    env = {key: val for key, val in os.environ.items()
           if not key.startswith(("HOOKLINE_", "CELERY_"))}
    env.update({variable: value, "PYTHONPATH": str(ROOT), "HOOKLINE_METRICS_PORT": "0"})
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


CASES = [(door, variable, value) for door in sorted(DOORS) for variable, value in BAD
         if not (variable.startswith("CELERY_") and door in WEB_AND_CLI)]


@pytest.mark.parametrize(("door", "variable", "value"), CASES,
                         ids=[f"{door}-{variable}" for door, variable, _ in CASES])
def test_a_bad_setting_is_one_line_naming_it_and_a_non_zero_exit(door, variable, value):
    done = _run(DOORS[door], variable, value)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if variable in line]
    assert len(lines) == 1, output
    # Nothing but that line (Django frames its check errors in a few lines of its own).
    if door != "manage.py check":
        assert output.splitlines() == lines, output
    else:
        assert "(hookline.E001)" in lines[0], output


@pytest.mark.parametrize(("value", "shown"), [
    ("notaurl", "REDIS_URL='notaurl' must start with redis://"),
    ("s3cret-pw@redis.internal:6379/0", "REDIS_URL='***@redis.internal:6379/***' must start"),
    ("redis://user:s3cret-pw@redis.internal:port/0",
     "REDIS_URL='redis://***@redis.internal:***/***' is not a valid URL"),
    ("redis://:s3cret/pw@redis.internal:6379/0",
     "REDIS_URL='redis://***@redis.internal:6379/***' is not a valid URL"),
    ("redis://:s3cret-pw@[::1/0", "REDIS_URL='redis://***@[::1/***' is not a valid URL"),
])
def test_a_malformed_redis_url_is_shown_by_scheme_and_host_never_its_password(value, shown):
    done = _run(DOORS["hookline endpoint list"], "REDIS_URL", value)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 1, output
    assert output.startswith(f"Error: {shown}"), output
    assert len(output.splitlines()) == 1 and "s3cret" not in output, output
