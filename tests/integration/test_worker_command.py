"""``hookline worker``: one Celery worker per usable core, supervised (hookline/cli/worker.py).
Real processes on a database of their own: the workers share the deliveries and serve their
counters once, and stop together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from examples.receiver import Reply, always
from hookline.cli.main import main
from hookline.cli.worker import (
    MALLOC_DEFAULTS,
    celery_command,
    cgroup_cpu_limit,
    parse_processes,
    spool_path,
    usable_cores,
    worker_environment,
)
from hookline.store.delivery import delivered
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import ROOT, TEST_ENV, emptied, free_port, isolated_url, wait_until
from tests.integration.test_metrics import scrape, value

ISOLATED_URL = isolated_url(10)
ISOLATED_DB = "10"
#: The console script installed beside this interpreter.
HOOKLINE = str(Path(sys.executable).with_name("hookline"))


# -- pure parts ----------------------------------------------------------------------------


def test_usable_cores_follow_the_cgroup_quota(tmp_path: Path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    assert usable_cores(tmp_path) == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    assert usable_cores(tmp_path) == len(os.sched_getaffinity(0))
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(v1) == 0.5 and usable_cores(v1) == 1
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(v1) is None


def test_a_workers_malloc_settings_yield_to_the_environments_own():
    assert worker_environment({"PATH": "/bin"}) == {**MALLOC_DEFAULTS, "PATH": "/bin"}
    own = worker_environment({"GLIBC_TUNABLES": "", "MALLOC_ARENA_MAX": "4"})
    assert own == {"GLIBC_TUNABLES": "", "MALLOC_ARENA_MAX": "4"}
    image = (ROOT / "Dockerfile").read_text()  # the image's bare celery command gets the same
    assert all(f"{name}={value} " in image for name, value in MALLOC_DEFAULTS.items())


def test_process_counts_are_checked():
    assert parse_processes("auto") is None and parse_processes(" 3 ") == 3
    for bad in ("0", "-1", "two", "257", "1.5"):
        with pytest.raises(Exception, match="'auto' or a whole number"):
            parse_processes(bad)
    result = CliRunner().invoke(main, ["worker", "--processes", "zero"])
    assert result.exit_code == 2 and "'auto' or a whole number" in result.output
    result = CliRunner().invoke(main, ["worker", "--processes", "2", "-n", "mine@%h"])
    assert result.exit_code == 2 and "each worker names itself" in result.output


def test_each_worker_is_a_celery_node_of_its_own():
    command = celery_command("app", ["-l", "info"], 2)
    assert command[1:] == ["-m", "celery", "-A", "app", "worker", "-l", "info",
                           "-n", "hookline2@%h"]
    assert celery_command("app", ["-n", "mine@%h"], 1)[-2:] == ["-n", "mine@%h"]
    assert spool_path("/var/lib/hookline/dlq-spool.jsonl", 2) == (
        "/var/lib/hookline/dlq-spool-2.jsonl")


# -- the real thing ------------------------------------------------------------------------


def consumers(client: redis.Redis) -> int:
    """Consumers blocked on this test's database (the server's other clients are not ours)."""
    return sum(c.get("cmd") == "blmpop" and str(c.get("db")) == ISOLATED_DB
               for c in client.client_list())


@pytest.fixture
def isolated() -> Iterator[redis.Redis]:
    client = emptied(ISOLATED_URL)
    yield client
    emptied(ISOLATED_URL).close()
    client.close()


def test_two_workers_share_the_deliveries_serve_one_metrics_and_stop_together(receiver,
                                                                               isolated):
    endpoint = EndpointRegistry(isolated).add("multi", receiver.route("/multi",
                                                                       always(Reply(204))))
    port = free_port()
    log = ROOT / ".pytest-worker-command.log"
    supervisor = two_workers(log, metrics_port=port, concurrency=4)
    try:
        # Both workers consume: two blocked consumers on the doorbell.
        wait_until(lambda: consumers(isolated) >= 2,
                   timeout=60, what=lambda: log.read_text()[-2000:])
        names = {line.split("hookline", 1)[1].split("@", 1)[0]
                 for line in log.read_text().splitlines() if "@" in line and "ready." in line}
        assert names == {"1", "2"}, log.read_text()[-2000:]
        from celery import Celery

        broker = Celery(broker=ISOLATED_URL)
        events = [f"multi-{n}" for n in range(60)]
        for event_id in events:
            broker.send_task("hookline.deliver", args=[endpoint.id, "order.created", {"n": 1}],
                             kwargs={"event_id": event_id}, queue="hookline")
        broker.close()
        wait_until(lambda: all(delivered(isolated, [(endpoint.id, e) for e in events])), 60)
        # Each worker's own counters, added up on the one port the supervisor serves.
        wait_until(lambda: value(scrape(port), "hookline_deliveries_total", endpoint="multi",
                                 outcome="delivered", reason="") == len(events), 20)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        code = supervisor.wait(60)
    assert code == 0, log.read_text()[-3000:]
    # Both workers warm-shut down; none is left behind.
    assert log.read_text().count("Warm shutdown") >= 2
    wait_until(lambda: not consumers(isolated), 10)


def two_workers(log: Path, *, metrics_port: int, concurrency: int) -> subprocess.Popen[bytes]:
    """``hookline worker --processes 2`` on the isolated database, its output in ``log``."""
    env = {**os.environ, **TEST_ENV, "REDIS_URL": ISOLATED_URL, "PYTHONUNBUFFERED": "1",
           "HOOKLINE_METRICS_PORT": str(metrics_port)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with open(log, "w") as out:
        return subprocess.Popen(
            [HOOKLINE, "worker", "--app", "app", "--processes", "2", "-l", "info",
             "-c", str(concurrency), "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_worker_that_dies_stops_the_others(receiver, isolated):
    log = ROOT / ".pytest-worker-command-death.log"
    supervisor = two_workers(log, metrics_port=0, concurrency=2)
    try:
        wait_until(lambda: consumers(isolated) >= 2,
                   timeout=60, what=lambda: log.read_text()[-2000:])
        pid = next(line.split("(pids ", 1)[1].split(",", 1)[0]
                   for line in log.read_text().splitlines() if "(pids " in line)
        # glibc's malloc told the worker defaults (hookline.cli.worker.MALLOC_DEFAULTS)
        environ = dict(entry.split("=", 1) for entry in
                       Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in entry)
        assert environ["MALLOC_ARENA_MAX"] == MALLOC_DEFAULTS["MALLOC_ARENA_MAX"]
        # (glibc 2.36 cuts the original string it parsed, which /proc shows, after its first
        # tunable; the process's own environ keeps them all)
        first_tunable = MALLOC_DEFAULTS["GLIBC_TUNABLES"].split(":")[0]
        assert environ["GLIBC_TUNABLES"].split(":")[0] == first_tunable
        os.kill(int(pid), signal.SIGKILL)
        code = supervisor.wait(60)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
    assert code == 9, log.read_text()[-3000:]
    assert "stopping the others" in log.read_text()
    wait_until(lambda: not consumers(isolated), 30)
