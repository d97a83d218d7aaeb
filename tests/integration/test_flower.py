"""Flower tells the truth: a real Flower process (loopback, basic auth) watching the session's
real worker and a real receiver, driven through Flower's HTTP API.

One mixed run: delivered (``send_webhook`` and ``deliver.delay()``), retried then delivered,
rejected (400) and malformed (dead-lettered), deferred by the worker (rate limit) and parked by
the consumer (open breaker), a parked retry revoked in Flower, a parked retry dead-lettered by
``hookline endpoint disable``. Every task's last state in Flower must match its outcome in
Hookline's own stores; the revoked one is in the dead-letter queue (``revoked``) and replays;
the Broker tab and ``/api/queues/length`` answer; no payload content in any task.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from examples.receiver import Reply, always, fail_first, in_order
from hookline import deliver, send_webhook
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.gates import Gate
from hookline.store.schedule import DUE_KEY
from hookline.worker.celery import worker_app
from tests.conftest import ROOT, TEST_ENV, free_port, wait_until
from tests.support.cli import succeeds
from tests.support.endpoints import dead_letter, new_endpoint, wait_delivered

#: Put in every payload: it must never reach Flower.
SECRET = "PAYLOAD-CONTENT-" + secrets.token_hex(6)
#: Retries parked for this long stay parked for the whole test (unless the test moves them).
LONG = {"initial_backoff": 60, "max_backoff": 60}


class Flower:
    """``celery -A app flower`` on a free loopback port, with basic auth."""

    def __init__(self) -> None:
        self.port = free_port()
        self.auth = f"ops:{secrets.token_urlsafe(12)}"
        self.log_path = ROOT / ".pytest-flower.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, **TEST_ENV, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "app", "flower", "--address=127.0.0.1",
             f"--port={self.port}", f"--basic-auth={self.auth}", "--persistent=False"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def request(self, path: str, *, method: str = "GET", auth: bool = True) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=b"" if method == "POST" else None)
        if auth:
            token = base64.b64encode(self.auth.encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def json(self, path: str) -> Any:
        status, body = self.request(path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"flower exited:\n{self.log_path.read_text()}")
        try:
            return self.request("/healthcheck", auth=False)[0] == 200
        except OSError:
            return False

    def state(self, task_id: str) -> str | None:
        status, body = self.request(f"/api/task/info/{task_id}")
        return json.loads(body).get("state") if status == 200 else None

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(15)
        self.log.close()


@pytest.fixture
def flower(worker, receiver) -> Iterator[Flower]:
    running = Flower()
    try:
        wait_until(running.answers, timeout=30)
        # Flower hears only the events sent once its receiver is bound: wait until a delivery
        # sent now is seen through to the end.
        probe = new_endpoint(receiver, always(Reply(204)))
        probes: list[str] = []

        def seen() -> bool:
            if any(running.state(task_id) == "SUCCESS" for task_id in probes):
                return True
            probes.append(send_webhook(probe.id, "probe", {}))
            return False

        wait_until(seen, timeout=30, interval=1.0)
        yield running
    finally:
        running.stop()


def hookline_outcome(endpoint_id: str, event_id: str) -> str:
    """The Flower state a delivery must end in, read from Hookline's own stores."""
    if Gate().is_delivered(endpoint_id, event_id):
        return "SUCCESS"
    if DeadLetterQueue().get(f"{endpoint_id}/{event_id}") is not None:
        return "FAILURE"
    if store.client().zscore(DUE_KEY, f"{endpoint_id}/{event_id}") is not None:
        return "RETRY"
    return "unknown"


def test_flower_shows_each_delivery_as_hookline_ended_it(flower, worker, receiver):
    ok = new_endpoint(receiver, always(Reply(204)))
    flaky = new_endpoint(receiver, fail_first(1, Reply(500)))
    rejecting = new_endpoint(receiver, always(Reply(400)))
    limited = new_endpoint(receiver, always(Reply(204)), rate="1/h", burst=1)
    held = new_endpoint(receiver, always(Reply(204)))
    revoked = new_endpoint(receiver, in_order(Reply(500)), retry_policy=LONG)
    disabled = new_endpoint(receiver, always(Reply(503)), retry_policy=LONG)
    body = {"customer": SECRET}

    # task id -> (endpoint id, event id), for every delivery of the run
    tasks: dict[str, tuple[str, str]] = {}

    def sent(endpoint_id: str, event_id: str) -> str:
        tasks[event_id] = (endpoint_id, event_id)
        return event_id

    delivered = sent(ok.id, send_webhook(ok.id, "order.created", body))
    delayed = sent(ok.id, deliver.delay(ok.id, "order.created", body).id)
    by_keyword = sent(ok.id, deliver.delay(ok.id, "order.created", payload=body).id)
    retried = sent(flaky.id, send_webhook(flaky.id, "order.created", body))
    rejected = sent(rejecting.id, send_webhook(rejecting.id, "order.created", body))
    malformed = sent("invalid", deliver.delay("not an id!", "order.created", body).id)
    # The rate limit's one token goes to the first; the second is deferred. Two tasks run at
    # once on the threads pool take the token in either order: send the second once the first
    # is through.
    first_limited = sent(limited.id, send_webhook(limited.id, "order.created", body))
    wait_delivered(limited.id, first_limited)
    deferred = sent(limited.id, send_webhook(limited.id, "order.created", body))
    store.client().hset(keys.breaker_key(held.id),  # open, as settle.lua opens it
                        mapping={"state": "open", "open_until": 2**42})
    parked_by_consumer = sent(held.id, send_webhook(held.id, "order.created", body))
    to_revoke = sent(revoked.id, send_webhook(revoked.id, "order.created", body))
    to_disable = sent(disabled.id, send_webhook(disabled.id, "order.created", body))

    wait_delivered(ok.id, delivered)
    wait_delivered(flaky.id, retried)
    dead_letter(rejecting.id, rejected)
    for task_id in (deferred, parked_by_consumer, to_revoke, to_disable):
        wait_until(lambda t=task_id: hookline_outcome(*tasks[t]) == "RETRY",
                   what=lambda t=task_id: f"{t} is {hookline_outcome(*tasks[t])} in Hookline")
    # Flower saw the retries parked: RETRY, not SUCCESS, and not PENDING with no worker.
    for name, task_id in (("deferred", deferred), ("parked_by_consumer", parked_by_consumer),
                          ("to_revoke", to_revoke), ("to_disable", to_disable)):
        wait_until(lambda t=task_id: flower.state(t) == "RETRY", timeout=20,
                   what=lambda n=name, t=task_id: f"{n} is {flower.state(t)} in Flower")

    # An operator revokes a delivery waiting in the retry schedule; when its retry comes back
    # (made due now), the worker that knows the revocation dead-letters it: reason revoked.
    status, _ = flower.request(f"/api/task/revoke/{to_revoke}", method="POST")
    assert status == 200
    wait_until(lambda: any(to_revoke in ids for ids in
                           (worker_app.control.inspect(timeout=1).revoked() or {}).values()))
    store.client().zadd(DUE_KEY, {f"{revoked.id}/{to_revoke}": 0})
    entry = dead_letter(revoked.id, to_revoke)
    assert entry.reason == "revoked" and entry.payload == body
    assert "Discarding revoked task" in worker.output()

    # An operator disables an endpoint whose event waits for a retry: the CLI dead-letters
    # it and tells Flower (task-failed from the CLI's own process).
    succeeds("endpoint", "disable", disabled.id)
    assert dead_letter(disabled.id, to_disable).reason == "endpoint_disabled"

    # Every delivery's last state in Flower is its outcome in Hookline.
    expected = {task_id: hookline_outcome(*where) for task_id, where in tasks.items()}
    assert expected[delivered] == expected[delayed] == expected[by_keyword] == "SUCCESS"
    assert expected[retried] == "SUCCESS"
    assert expected[rejected] == expected[malformed] == expected[to_revoke] == "FAILURE"
    assert expected[to_disable] == "FAILURE"
    assert expected[deferred] == expected[parked_by_consumer] == "RETRY"

    def flower_states() -> dict[str, str | None]:
        listed = flower.json("/api/tasks?taskname=hookline.deliver")
        return {task_id: (listed.get(task_id) or {}).get("state") for task_id in tasks}

    def differences() -> dict[str, tuple[str, str | None]]:
        shown = flower_states()
        return {t: (expected[t], shown[t]) for t in tasks if shown[t] != expected[t]}

    wait_until(lambda: flower_states() == expected, timeout=20, interval=0.5,
               what=lambda: f"(Hookline, Flower) differ: {differences()}")
    info = flower.json(f"/api/task/info/{to_disable}")
    assert "endpoint_disabled" in info["exception"] and info["worker"].startswith("hookline-")
    assert "rejected" in flower.json(f"/api/task/info/{rejected}")["exception"]

    # No payload content anywhere in Flower: arguments show its size.
    everything = flower.request("/api/tasks")[1]
    assert SECRET not in everything
    for task_id in tasks:
        shown = flower.request(f"/api/task/info/{task_id}")[1]
        assert SECRET not in shown, shown
    assert "<payload: " in flower.json(f"/api/task/info/{delayed}")["args"]
    assert "<payload: " in flower.json(f"/api/task/info/{by_keyword}")["kwargs"]

    # The Workers page counts dead letters as failed.
    workers = flower.json("/workers?json=1")["data"]
    failed = sum(w.get("task-failed", 0) for w in workers if w["hostname"].startswith("session@"))
    assert failed >= 3  # rejected, malformed, revoked (disabled: the CLI's own process)

    # The Broker tab and the queue lengths answer with Hookline's transport.
    lengths = flower.json("/api/queues/length")["active_queues"]
    assert {"hookline", "hookline.retry"} <= {q["name"] for q in lengths}
    assert all(isinstance(q["messages"], int) for q in lengths)
    status, page = flower.request("/broker")
    assert status == 200 and "hookline.retry" in page and "not supported" not in page

    # The revoked event replays (a new task id: the revocation does not catch it) and is
    # delivered; the receiver now answers 204.
    succeeds("dlq", "replay", f"{revoked.id}/{to_revoke}")
    wait_delivered(revoked.id, to_revoke)
    assert DeadLetterQueue().get(f"{revoked.id}/{to_revoke}") is None
