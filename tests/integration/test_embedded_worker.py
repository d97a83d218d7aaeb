"""Hookline's worker app run in-process by Celery's pytest support (what pytest-celery
re-exports as ``celery_app`` and runs with ``celery.contrib.testing.worker``), on a Redis
database of its own, against a real loopback receiver; and pytest-celery's Docker smoke setup
where a Docker engine answers.

The in-process worker kills nothing: it shows the task, the broker transport, the consumer, the
engine, the schedule and the releaser working together in the test's own process. Tests that
kill or restart workers use worker subprocesses (tests/faults).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

import hookline
from examples.receiver import Reply, always, fail_first
from hookline.core.messages import RETRY_QUEUE
from hookline.delivery.releaser import Releaser
from hookline.store.gates import Gate
from tests.conftest import wait_until
from tests.support.endpoints import new_endpoint

#: The app's settings the test points at its own database, restored afterwards.
BROKER_SETTINGS = ("broker_url", "broker_read_url", "broker_write_url",
                   "broker_transport_options")


@pytest.fixture
def celery_app(quiet_redis: Any) -> Iterator[Any]:
    """Overrides celery.contrib.pytest's ``celery_app``: Hookline's own worker app (the one
    ``celery -A app worker`` runs), pointed at the test's database (``quiet_redis``)."""
    from hookline.core.config import settings
    from hookline.transport import celery_settings
    from hookline.worker.celery import worker_app

    saved = {name: worker_app.conf[name] for name in BROKER_SETTINGS}
    worker_app.conf.update(celery_settings.broker_settings(settings()))
    yield worker_app
    worker_app.conf.update(saved)
    # Forget (do not close) the test database's pool: kombu shares it by URL across apps.
    worker_app._pool = None


@pytest.fixture
def embedded_worker(celery_app: Any) -> Iterator[Any]:
    """A worker in a thread of this process (solo pool), stopped after the test, with a
    releaser beside it: Celery's test worker sends no ``worker_ready``, the signal on which a
    real worker starts its releaser (hookline/worker/boot.py)."""
    releaser = Releaser(queue=RETRY_QUEUE).start()
    try:
        with start_worker(celery_app, pool="solo", perform_ping_check=False,
                          shutdown_timeout=30) as worker:
            yield worker
    finally:
        releaser.stop()


def test_an_embedded_worker_delivers_and_retries_an_event(embedded_worker, receiver):
    steady = new_endpoint(receiver, always(Reply(204)))
    flaky = new_endpoint(receiver, fail_first(1, Reply(503)))
    first = hookline.deliver.delay(steady.id, "order.created", {"order": 1}).id
    retried = hookline.send_webhook(flaky.id, "order.created", {"order": 2})
    gate = Gate()
    wait_until(lambda: gate.is_delivered(steady.id, first) and gate.is_delivered(flaky.id,
                                                                                retried), 30)
    assert [r.webhook_id for r in receiver.requests_to(f"/{steady.id}")] == [first]
    # The failed attempt was parked, released and sent again with the same event id.
    assert [r.webhook_id for r in receiver.requests_to(f"/{flaky.id}")] == [retried, retried]


def docker_engine() -> bool:
    """Whether a Docker engine answers (the client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not docker_engine(), reason="pytest-celery's celery_setup runs its broker, "
                    "backend and worker in Docker containers, and no Docker engine answers here")
def test_pytest_celery_docker_setup_is_ready(celery_setup: Any) -> None:
    assert celery_setup.ready()
