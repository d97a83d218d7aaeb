"""A worker on a kombu outside the tested range refuses to start, saying why, instead of
taking messages its broker overrides may not handle (hookline/transport/compat.py,
hookline/worker/boot.py).

The worker is the real ``celery -A app worker`` command; a ``sitecustomize`` on its
PYTHONPATH makes ``importlib.metadata`` report kombu 5.5.0."""

from __future__ import annotations

import os
import subprocess

import pytest
import redis

from hookline.transport.envelope import build_message
from hookline.transport.records import held_count
from hookline.worker.celery import worker_app
from tests.conftest import WorkerProcess, isolated_url

#: A database no other test uses. Only the key this test writes is deleted, never the database.
URL = isolated_url(8)

SITECUSTOMIZE = '''
import importlib.metadata as _metadata

_real_version = _metadata.version


def _version(name):
    return "5.5.0" if name.lower() == "kombu" else _real_version(name)


_metadata.version = _version
'''


@pytest.fixture
def queue():
    client = redis.Redis.from_url(URL, decode_responses=True)
    client.delete("hookline")
    yield client
    client.delete("hookline")


def test_a_worker_on_an_unsupported_kombu_refuses_to_start_and_takes_nothing(tmp_path, queue):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    queue.lpush("hookline", build_message(
        worker_app, task_name="hookline.deliver", task_id="compat-1",
        args=["ep-compat", "order.created", {"id": 1}], kwargs={"event_id": "compat-1"},
        retries=0, queue="hookline"))

    worker = WorkerProcess("compat", concurrency=1,
                           extra_env={"PYTHONPATH": path, "REDIS_URL": URL})
    try:
        code = worker.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.stop()
        pytest.fail(f"the worker did not exit:\n{worker.output()}")
    worker.stop()
    output = worker.output()

    assert code != 0, output
    assert "kombu 5.5.0 is outside the tested range >=5.6.0,<5.8" in output, output
    assert " ready." not in output
    # The message it would have taken is still on its queue, and none is held unacknowledged.
    assert queue.llen("hookline") == 1
    assert held_count(queue) == 0
