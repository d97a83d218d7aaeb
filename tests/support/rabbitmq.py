"""A RabbitMQ virtual host of a test's own, on the machine's RabbitMQ (127.0.0.1:5672,
guest/guest): made with ``rabbitmqctl`` before the test and deleted, with every queue in it,
after. A test that needs one skips, saying why, when ``rabbitmqctl`` or the server is missing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.servers import AMQP_HOST, AMQP_PORT, rabbitmq_unavailable, rabbitmqctl

HOST, PORT = AMQP_HOST, AMQP_PORT
USER, PASSWORD = "guest", "guest"
_ctl = rabbitmqctl
unavailable = rabbitmq_unavailable


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
