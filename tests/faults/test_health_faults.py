"""Endpoint health through faults, with real workers, a real receiver and a Redis of the test's
own: a worker killed with SIGKILL mid-run, Redis shut down and restarted (from its AOF)
mid-run, and a worker paused (SIGSTOP) mid-work. Deliveries go on as before; the health
tallies lose at most what the killed worker counted since its last write, never count an
attempt that was not made, keep writing after Redis is back, and a worker that stops writes
what it holds, without hanging."""

from __future__ import annotations

import shutil
import signal
import time

import pytest

from examples.receiver import Reply, always
from hookline.store.endpoints import EndpointRegistry
from hookline.store.health import HealthReader
from tests.conftest import PrivateRedis, wait_until
from tests.support.queue import delivered, enqueue

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")


def counted(reader: HealthReader, endpoint_id: str, since_minute: int) -> int:
    now = int(time.time() // 60)
    return sum(m.attempts for m in reader.minutes(endpoint_id, since_minute, now + 1))


def test_health_survives_a_sigkill_a_redis_restart_and_a_paused_worker(
        tmp_path, receiver, start_worker):
    server = PrivateRedis(tmp_path)
    client = server.start()
    try:
        endpoint = EndpointRegistry(client).add(
            "steady", receiver.route("/steady", always(Reply(200, delay=0.02))))
        env = {"REDIS_URL": server.url, "HOOKLINE_HEALTH_INTERVAL": "0.3",
               "HOOKLINE_LIVENESS_WINDOW": "2", "HOOKLINE_HEARTBEAT_INTERVAL": "0.5",
               "CELERY_VISIBILITY_TIMEOUT": "20"}
        start_minute = int(time.time() // 60)
        first = start_worker("health-kill", concurrency=8, extra_env=env)
        batch1 = enqueue(client, endpoint.id, 150, prefix="a")
        assert receiver.wait_for(lambda got: len(got) >= 40, timeout=30)
        first.process.send_signal(signal.SIGKILL)  # mid-work: counts not yet written are lost
        first.process.wait(30)
        killed_at = time.time()
        second = start_worker("health-second", concurrency=8, extra_env=env)
        third = start_worker("health-third", concurrency=8, extra_env=env)
        wait_until(lambda: delivered(client, endpoint.id, batch1) == 150, timeout=60)

        # Redis away and back (its AOF): the flushers log, keep their counts, write again.
        server.shutdown()
        wait_until(lambda: "worker.heartbeat_failed" in second.output(), timeout=30)
        client = server.start()
        batch2 = enqueue(client, endpoint.id, 100, prefix="b")
        assert receiver.wait_for(lambda got: len({r.webhook_id for r in got} & set(batch2))
                                 >= 20, timeout=30)
        # A worker paused mid-work: the other takes over, the paused one resumes.
        second.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(3)
        finally:
            second.process.send_signal(signal.SIGCONT)
        wait_until(lambda: delivered(client, endpoint.id, batch2) == 100, timeout=60)

        # Both survivors stop cleanly (SIGTERM), writing what they hold, in bounded time.
        for worker in (second, third):
            started = time.monotonic()
            worker.stop(signal.SIGTERM, timeout=30)
            assert time.monotonic() - started < 25
            assert "Traceback" not in worker.output()
        requests = receiver.requests_to("/steady")
        after_kill = [r for r in requests if r.at > killed_at + 0.5]
        reader = HealthReader(client)
        total = counted(reader, endpoint.id, start_minute)
        # Every attempt after the kill was counted (fenced ones and any the paused worker had
        # in flight aside: at most its 8 slots); none counted that the receiver did not see.
        assert len(after_kill) - 8 <= total <= len(requests)
        latest = reader.attempts(endpoint.id)
        assert len(latest) == 50
        assert {a.status for a in latest} == {200}
        assert latest[0].event_id in set(batch1) | set(batch2)
    finally:
        server.stop()
