"""A worker returns its free heap pages to the system (hookline.worker.memory): glibc's
malloc_trim really gives back the pages a burst left free between live blocks, the thread is
started once per process, and not at all when the setting is 0."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from hookline.worker import memory

pytestmark = pytest.mark.skipif(memory.trimmer() is None, reason="no glibc malloc_trim")

#: A burst: 80 MB of 2 KB blocks (from the heap, below malloc's mmap threshold), of which
#: one in 64 stays alive, so the heap's top cannot shrink and free() keeps the pages.
BURST = r"""
import json, sys
from hookline.worker.memory import trimmer

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

blocks = [bytes(2000) + str(n).encode() for n in range(40_000)]
kept = blocks[::64]
del blocks
before = rss()
trimmer()(0)
print(json.dumps({"before": before, "after": rss(), "kept": len(kept)}))
"""


def test_a_trim_gives_back_the_pages_a_burst_left_free() -> None:
    done = subprocess.run([sys.executable, "-c", BURST], capture_output=True, text=True,
                          check=True, timeout=60)
    found = json.loads(done.stdout)
    # ~80 MB freed, ~2 MB still alive: most of it goes back (each live block pins its page).
    assert found["before"] - found["after"] > 50 * 2**20, found


def test_the_thread_starts_once_per_process_and_never_when_off(monkeypatch) -> None:
    monkeypatch.setattr(memory, "_started_in", None)
    assert memory.start(0) is None
    thread = memory.start(3600)
    assert thread is not None and thread.daemon and thread.name == "hookline-malloc-trim"
    assert memory.start(3600) is None
    assert thread in threading.enumerate()
    assert not memory.started_in_parent()
