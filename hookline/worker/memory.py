"""Giving a worker's free heap memory back to the system.

glibc's malloc keeps the pages of freed blocks in its arenas. A worker whose load comes in
bursts (a backlog after an outage, a bulk replay) grows to the burst's high-water mark, and the
pages freed afterwards stay resident in holes between live blocks, which ``free`` does not
return: the soak (``bench/soak.py``) saw a worker's RSS creep by 2-12% an hour while its Python
objects and blocks stayed flat and the free bytes inside malloc's arenas grew.

Every ``HOOKLINE_MALLOC_TRIM_INTERVAL`` seconds (60; 0: never) a daemon thread calls
``malloc_trim(0)``, which hands back every free page of every arena, in the middle of the heap
too (glibc 2.8 and later). Ruby calls it after each full GC for the same reason. A call holds
each arena's lock while it walks it (a few milliseconds for a worker's heap); it frees nothing
in use. Where the C library has no ``malloc_trim`` (musl, macOS), nothing is started.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Callable

_started_in: int | None = None


def trimmer() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        found = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if found is not None:
        found.argtypes, found.restype = [ctypes.c_size_t], ctypes.c_int
    return found


def started_in_parent() -> bool:
    """Whether a trimming thread was started before this process was forked."""
    return _started_in is not None and _started_in != os.getpid()


def start(interval: float) -> threading.Thread | None:
    """Trim this process's heap every ``interval`` seconds from a daemon thread (once per
    process: a forked child starts its own). None when off or where there is no trim."""
    global _started_in
    trim = trimmer() if interval > 0 else None
    if trim is None or _started_in == os.getpid():
        return None
    _started_in = os.getpid()

    def run() -> None:
        while True:
            time.sleep(interval)
            trim(0)

    thread = threading.Thread(target=run, name="hookline-malloc-trim", daemon=True)
    thread.start()
    return thread
