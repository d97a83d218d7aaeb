"""The event log tells the truth after crashes: a worker killed with SIGKILL mid-run and Redis
restarted from its AOF mid-run, with real workers and a real receiver. Once every event has
ended delivered or dead-lettered, each one's row in the log says so (delivered / dead), one
row per event per endpoint, whatever attempt's write was cut short.
"""

from __future__ import annotations

import shutil
import signal

import pytest

from examples.receiver import Reply, always, fail_first
from hookline.store import delivery
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.event_log_pages import EventLogPages, LogFilter
from tests.conftest import PrivateRedis, wait_until
from tests.support.queue import enqueue

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")

FAST_RETRIES = {"initial_backoff": 1, "max_backoff": 2, "jitter": 0.5}
DOOMED_RETRIES = {**FAST_RETRIES, "max_attempts": 2}


def fates(client, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """What became of each settled pair: delivered or dead (unsettled ones left out)."""
    done = delivery.delivered(client, pairs)
    dead = DeadLetterQueue(client).get_many(f"{endpoint}/{event}" for endpoint, event in pairs)
    found = {}
    for pair, ok in zip(pairs, done, strict=True):
        if ok:
            found[pair] = "delivered"
        elif f"{pair[0]}/{pair[1]}" in dead:
            found[pair] = "dead"
    return found


def log_statuses(client, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    pages = EventLogPages(client)
    return {pair: (row.status if (row := pages.get(*pair)) else None) for pair in pairs}


def test_after_a_sigkill_and_a_redis_restart_every_rows_status_matches_its_fate(
        tmp_path, receiver, start_worker):
    server = PrivateRedis(tmp_path)
    client = server.start()
    try:
        registry = EndpointRegistry(client)
        steady = registry.add("steady", receiver.route(
            "/steady", always(Reply(204, delay=0.05))))
        flaky = registry.add("flaky", receiver.route(
            "/flaky", fail_first(1, Reply(503, delay=0.05))), retry_policy=FAST_RETRIES)
        doomed = registry.add("doomed", receiver.route(
            "/doomed", always(Reply(503, delay=0.02))), retry_policy=DOOMED_RETRIES)
        env = {"REDIS_URL": server.url, "HOOKLINE_BREAKER_THRESHOLD": "1000",
               "CELERY_VISIBILITY_TIMEOUT": "20"}
        first = start_worker("log-crash-1", concurrency=16, extra_env=env)
        pairs = [(steady.id, e) for e in enqueue(client, steady.id, 200, prefix="s")]
        pairs += [(flaky.id, e) for e in enqueue(client, flaky.id, 200, prefix="f")]
        pairs += [(doomed.id, e) for e in enqueue(client, doomed.id, 100, prefix="d")]
        assert receiver.wait_for(lambda got: len(got) >= 100, timeout=30)
        first.process.send_signal(signal.SIGKILL)  # mid-work: attempts in flight
        first.process.wait(60)
        second = start_worker("log-crash-2", concurrency=16, extra_env=env)
        assert receiver.wait_for(lambda got: len(got) >= 350, timeout=60)
        server.shutdown()  # mid-run again: Redis away, then back from its AOF
        wait_until(lambda: second.output().count("worker.heartbeat_failed") >= 3, timeout=30)
        client = server.start()
        wait_until(lambda: len(fates(client, pairs)) == len(pairs), timeout=180,
                   what=lambda: f"{len(fates(client, pairs))} of {len(pairs)} settled")
        expected = fates(client, pairs)
        assert set(expected.values()) == {"delivered", "dead"}
        wait_until(lambda: log_statuses(client, pairs) == expected, timeout=30,
                   what=lambda: {pair: (status, expected[pair]) for pair, status
                                 in log_statuses(client, pairs).items()
                                 if status != expected[pair]})
        # One row per event per endpoint in the log's pages too, and none left retrying.
        listed = []
        after = None
        while True:
            page = EventLogPages(client).page(LogFilter(), limit=200, after=after)
            listed.extend(row.entry_id for row in page.rows)
            if page.after is None:
                break
            after = page.after
        assert sorted(listed) == sorted(f"{endpoint}/{event}" for endpoint, event in pairs)
    finally:
        server.stop()
