"""What a process that does not stop is doing: its threads' Python stacks, read by py-spy
(a dev dependency), for the message of a test that waited on it in vain."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def stacks_of(pid: int) -> str:
    """``py-spy dump`` of ``pid`` and its children, or why it could not be read."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        dumped = subprocess.run([spy, "dump", "--subprocesses", "--pid", str(pid)],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"(no stacks: {error})"
    return dumped.stdout + dumped.stderr
