"""A RabbitMQ virtual host of a test's own, on the machine's RabbitMQ (127.0.0.1:5672,
guest/guest): made with ``rabbitmqctl`` before the test and deleted, with every queue in it,
after. A test that needs one skips, saying why, when ``rabbitmqctl`` or the server is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

#: Where the machine's RabbitMQ is expected (override with HOOKLINE_TEST_AMQP_HOST / _PORT).
HOST = os.environ.get("HOOKLINE_TEST_AMQP_HOST", "127.0.0.1")
PORT = int(os.environ.get("HOOKLINE_TEST_AMQP_PORT", "5672"))
USER, PASSWORD = "guest", "guest"


def _ctl(*args: str) -> subprocess.CompletedProcess[str]:
    """``rabbitmqctl *args``, in its own session (a Ctrl-C reaches only the test run, which
    then cleans up with rabbitmqctl)."""
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60,
                          check=False, start_new_session=True)


def unavailable() -> str | None:
    """Why a RabbitMQ vhost cannot be made here, or None when it can."""
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed (RabbitMQ is needed for the RabbitMQ broker tests)"
    try:
        with socket.create_connection((HOST, PORT), timeout=2):
            pass
    except OSError as exc:
        return f"no RabbitMQ answers on {HOST}:{PORT} ({exc.strerror or exc})"
    return None


def url(vhost: str, scheme: str = "pyamqp") -> str:
    return f"{scheme}://{USER}:{PASSWORD}@{HOST}:{PORT}/{vhost}"


@contextmanager
def private_vhost(prefix: str = "hl-test") -> Iterator[str]:
    """A new vhost with full permissions for guest; deleted (queues and all) afterwards."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    vhost = f"{prefix}-{uuid.uuid4().hex[:10]}"
    made = _ctl("add_vhost", vhost)
    if made.returncode != 0:
        pytest.skip(f"rabbitmqctl add_vhost failed: {made.stderr.strip() or made.stdout}")
    try:
        allowed = _ctl("set_permissions", "-p", vhost, USER, ".*", ".*", ".*")
        if allowed.returncode != 0:
            pytest.fail(f"rabbitmqctl set_permissions failed: {allowed.stderr.strip()}")
        yield vhost
    finally:
        _ctl("delete_vhost", vhost)


def queue_types(vhost: str) -> dict[str, str]:
    """Each queue's type (classic, quorum) in ``vhost``."""
    listed = _ctl("list_queues", "-p", vhost, "--quiet", "--no-table-headers", "name", "type")
    return dict(line.split()[:2] for line in listed.stdout.splitlines() if len(line.split()) >= 2)
