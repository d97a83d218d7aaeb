"""The fault run under load, CI-sized: ``python -m bench.chaos --quick`` (what ``make chaos``
runs, smaller): 600 events to a rate-limited receiver and a flapping one (200 / 503 / too
slow), one SIGKILL of a worker, a scale-out from one worker to three, one Redis restart (AOF).
Nothing is lost, every duplicate is explained by the kill or the restart, and no 1 s window at
the rate-limited receiver holds more than rate + burst (unless the workers sent those requests
over a second or more: compressed in transit).

The run has its own private ``redis-server``, receivers and workers on free ports, all in a
subprocess (``app`` reads its settings once per process, and this one's are the tests'), so
it never touches the tests' shared Redis; it takes about 30-60 s.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bench_runs import run_quick

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

#: Longest the quick run may take before it is stopped (it stops its processes on SIGTERM).
RUN_TIMEOUT = 150.0


@pytest.fixture(autouse=True)
def clean_redis() -> Iterator[None]:
    """Overrides the suite's autouse fixture: this test does not use the shared Redis."""
    yield


def test_quick_chaos_run_loses_nothing_and_keeps_the_rate_budget(tmp_path: Path) -> None:
    summary, output, seconds = run_quick("bench.chaos", tmp_path, RUN_TIMEOUT)
    print(f"\n{output}\nquick chaos run: {seconds:.0f}s")
    kinds = [fault["kind"] for fault in summary["faults"]]
    assert {"sigkill", "scale", "redis_restart"} <= set(kinds), kinds
    assert summary["events"] == 600
    assert summary["lost"] == 0, f"lost {summary['lost_ids']}:\n{output}"
    assert summary["marked_done_never_received"] == [], output
    assert summary["delivered"] + sum(summary["dead_lettered"].values()) == 600, output
    assert summary["duplicates"]["unexplained"] == 0, output
    assert summary["rate"]["windows_over_unexplained"] == 0, output
    assert summary["ok"] is True, output
