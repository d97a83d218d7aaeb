"""A benchmark driver's CI-sized run (``python -m bench.<name> --quick``) in a subprocess of its
own, for the fault tests that run one: ``app`` reads its settings once per process, and the
driver's are its private servers', not the tests'."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT


def run_quick(module: str, workdir: Path, timeout: float,
              *arguments: str) -> tuple[dict[str, Any], str, float]:
    """``python -m <module> --quick [arguments]`` with its work and results under ``workdir``:
    its summary (the results file), its output and how long it took. Past ``timeout`` seconds it is
    stopped (the driver stops what it started on SIGTERM) and the test fails."""
    results = workdir / "results.json"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--quick", "--workdir", str(workdir / "run"),
         "--results", str(results), *arguments],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
        pytest.fail(f"{module} --quick took over {timeout:.0f}s:\n{output}")
    assert results.exists(), f"no results written (exit {process.returncode}):\n{output}"
    return json.loads(results.read_text()), output, time.monotonic() - started
