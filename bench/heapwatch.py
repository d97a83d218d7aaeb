"""A worker's heap, watched: what its RSS is made of, sampled while it runs.

    python -m bench.heapwatch <celery's arguments>     (the soak starts its workers so)

Runs Celery's command line in this process, with a daemon thread that appends one JSON line
to ``$HEAPWATCH_FILE`` every ``$HEAPWATCH_EVERY`` seconds (60):

- ``rss``: the process's resident memory;
- ``blocks``: Python's allocated blocks (``sys.getallocatedblocks``), live Python objects and
  buffers: what a leak of Python objects grows;
- ``malloc``: bytes glibc's malloc has handed out and not had back (``mallinfo2``: small
  blocks plus mmapped ones), where C extensions (hiredis, OpenSSL, the socket buffers) keep
  theirs; ``malloc_free``: bytes free inside its arenas, kept by the process (fragmentation);
- ``objects`` and ``types``: the number of objects the collector tracks, and the 15 most
  numerous types; ``methods``: the 12 most numerous bound methods, by their owner's class and
  name (a callback registered again and again shows here).

The watcher looks at each object by its exact type (``type(o)``), never by ``isinstance`` or
an attribute of the object itself: those go through ``__class__`` and ``__dict__``, which
Celery's lazy proxies (``current_app``, ``celery.app``'s own module) answer by importing and
evaluating what they stand for, from this thread, while the main thread is still importing
Celery (a worker then died at start with ``cannot import name 'Celery'``).

A leak grows ``blocks`` or ``malloc`` with ``rss``; a high-water mark (a backlog after a fault
held more at once, and the allocators keep the pages) grows ``rss`` in steps while they stay
flat. ``bench.soak`` reports the slope of each.

``HEAPWATCH_TRACEMALLOC=N`` also traces Python's allocations with N frames (``tracemalloc``,
which costs the worker CPU and memory of its own: a diagnosis, not a measurement). Each sample
then adds ``traced``, the bytes traced; and every ``$HEAPWATCH_TRACE_EVERY`` seconds (300)
after the first ``$HEAPWATCH_TRACE_AFTER`` (900), ``traced_growth``: the 12 call stacks whose
allocations grew most since the first of those snapshots. They name what holds memory that
Python's allocator passed on to malloc, which ``blocks`` counts but does not size.
``HEAPWATCH_TRACE_PEAK=1`` adds ``traced_peak`` at each sample whose traced bytes pass the
highest so far by a tenth (after the first ``$HEAPWATCH_TRACE_AFTER``): the 12 call stacks that
hold most at that moment, which names what a burst (the backlog after a fault) holds at once
(each takes a snapshot: minutes for a worker's heap traced 10 frames deep).

``HEAPWATCH_REDIS=1`` adds ``redis_pools``: redis-py's connection pools, by class, port,
database and holder, with the connections each has made, holds idle and has in use
(:func:`redis_pools`).

``HEAPWATCH_CLASSES=QUALNAME,...`` adds ``classes``: for each name, how many classes of that
qualified name live, their instances (``Channel``: the broker's channels, which a reconnect
replaces) and what holds the first eight, ``$HEAPWATCH_DEPTH`` (3) referrers deep
(:func:`classes_held`).

``HEAPWATCH_NO_HIREDIS=1`` runs the worker without hiredis (redis-py's own reply parser, in
Python), to tell hiredis's share of ``malloc`` from the rest in one A/B run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import sys
import threading
import time
import tracemalloc
from collections import Counter
from types import FrameType, FunctionType, MethodType
from typing import Any

#: Seconds between two samples.
EVERY = float(os.environ.get("HEAPWATCH_EVERY", "60"))


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo() -> Any:
    """glibc's ``mallinfo2`` (None elsewhere: the sample leaves the fields out)."""
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    function.restype = _MallInfo2
    return function


def sample(mallinfo: Any = None) -> dict[str, Any]:
    """One sample of this process's heap (module docstring)."""
    with open("/proc/self/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    objects = gc.get_objects()
    types = Counter(type(o).__name__ for o in objects)
    methods = Counter(f"{type(o.__self__).__qualname__}.{o.__func__.__name__}"
                      for o in objects if type(o) is MethodType)
    found: dict[str, Any] = {"t": time.time(), "rss": rss, "blocks": sys.getallocatedblocks(),
                             "objects": len(objects), "types": dict(types.most_common(15)),
                             "methods": dict(methods.most_common(12))}
    if os.environ.get("HEAPWATCH_REDIS"):
        found["redis_pools"] = redis_pools(objects)
    if os.environ.get("HEAPWATCH_CLASSES"):
        found["classes"] = {name: classes_held(objects, name)
                            for name in os.environ["HEAPWATCH_CLASSES"].split(",")}
    del objects
    if mallinfo is not None:
        info = mallinfo()
        found["malloc"] = info.uordblks + info.hblkhd
        found["malloc_free"] = info.fordblks
    return found


def redis_pools(objects: list[Any]) -> dict[str, list[int]]:
    """redis-py's connection pools among ``objects``, by class, port and database and by what
    holds each (the class of the object whose attribute it is): ``[pools, connections made,
    connections idle in them, connections in use]``. A pool made again at each reconnect while
    the old one is still held, or connections made and never given back, show as counts that
    grow fault by fault (made minus idle minus in use: connections the pool counts and does
    not hold)."""
    from redis.connection import ConnectionPool

    found: dict[str, list[int]] = {}
    for pool in (o for o in objects if issubclass(type(o), ConnectionPool)):
        kwargs = pool.connection_kwargs
        holders = sorted({f"{_holder(owner)}.{type(owner).__qualname__}"
                          for owner in _owners(pool)})
        name = (f"{type(pool).__name__} :{kwargs.get('port')}/{kwargs.get('db')} "
                f"in {','.join(holders) or '?'}")
        row = found.setdefault(name, [0, 0, 0, 0])
        row[0] += 1
        row[1] += getattr(pool, "_created_connections", 0)
        row[2] += len(getattr(pool, "_available_connections", ()))
        row[3] += len(getattr(pool, "_in_use_connections", ()))
    return found


def classes_held(objects: list[Any], qualname: str) -> dict[str, Any]:
    """The classes among ``objects`` whose qualified name is ``qualname``, and their instances
    (a class a library makes again at each reconnect, or the channels a reconnect replaces):
    how many of each, and what holds each of the first eight, ``$HEAPWATCH_DEPTH`` (3)
    referrers deep."""
    found = [o for o in objects if issubclass(type(o), type) and o.__qualname__ == qualname]
    instances = [o for o in objects if type(o) in found]
    ignore = {id(objects), id(found), id(instances)}
    depth = int(os.environ.get("HEAPWATCH_DEPTH", "3"))
    chains = []
    for n in range(min(len(instances), 8)):
        chains.append(_chain(instances[n], depth, ignore))
    return {"classes": len(found), "instances": len(instances), "held_by": chains}


def _chain(thing: Any, depth: int, ignore: set[int]) -> list[str]:
    """What refers to ``thing``, and what to that, ``depth`` deep (the first six of each; not
    this watcher's own lists and frames)."""
    lines: list[str] = []
    if depth == 0:
        return lines
    referrers = []
    for held in gc.get_referrers(thing):
        if id(held) not in ignore and not (
                type(held) is FrameType and held.f_code.co_filename == __file__):
            referrers.append(held)
    first = referrers[:6]
    ignore = ignore | {id(referrers), id(first)}
    for held in first:
        name = type(held).__qualname__
        if type(held) in (FunctionType, MethodType):
            name += " " + held.__qualname__
        elif issubclass(type(held), dict):
            keys = []
            for key, value in held.items():
                if value is thing:
                    keys.append(str(key))
            name += "[" + ",".join(keys)[:60] + "]"
        lines.append(name)
        lines.extend("  " + line for line in _chain(held, depth - 1, ignore))
    return lines


def _owners(thing: Any) -> list[Any]:
    """The objects that hold ``thing`` as an attribute (or in a list, dict or set they hold)."""
    found: list[Any] = []
    for held in gc.get_referrers(thing):
        if issubclass(type(held), (dict, list, set, tuple)):
            found.extend(o for o in gc.get_referrers(held) if _owner(o))
        elif _owner(held):
            found.append(held)
    return found


def _owner(thing: Any) -> bool:
    """Whether ``thing`` counts as a holder: an object with attributes, not a frame, a
    function or redis-py's own bookkeeping (its connections and notification handlers)."""
    kind = type(thing)
    return (kind.__dictoffset__ != 0 and not issubclass(kind, _NOT_OWNERS)
            and not (kind.__module__.startswith("redis.") and kind.__name__ != "Redis"))


_NOT_OWNERS = (dict, list, set, tuple, FrameType, FunctionType, MethodType)


def _holder(thing: Any) -> str:
    """The class of what holds ``thing`` (``?`` where nothing does, or several kinds do)."""
    kinds = {type(o).__qualname__ for o in _owners(thing)}
    return kinds.pop() if len(kinds) == 1 else "?" if not kinds else "+".join(sorted(kinds))


class Tracer:
    """Python's allocations, traced, and the stacks whose share grew (module docstring)."""

    def __init__(self, frames: int, after: float, every: float) -> None:
        tracemalloc.start(frames)
        self.started, self.after, self.every = time.time(), after, every
        self.baseline: dict[Any, int] | None = None
        self.last = 0.0
        self.peaks = bool(os.environ.get("HEAPWATCH_TRACE_PEAK"))
        self.highest = 0

    def sample(self) -> dict[str, Any]:
        traced = tracemalloc.get_traced_memory()[0]
        found: dict[str, Any] = {"traced": traced}
        now = time.time()
        if now - self.started < self.after:
            return found
        if self.peaks and traced > self.highest * 1.1:
            self.highest = traced
            top = sorted(self._sizes().items(), key=lambda pair: pair[1], reverse=True)[:12]
            found["traced_peak"] = [{"bytes": size, "where": [_frame(f) for f in where]}
                                    for where, size in top]
        if now - self.last < self.every:
            return found
        self.last = now
        sizes = self._sizes()
        if self.baseline is None:
            self.baseline = sizes
            return found
        baseline = self.baseline
        grown = sorted(((size - baseline.get(where, 0), where) for where, size in sizes.items()),
                       key=lambda pair: pair[0], reverse=True)[:12]
        found["traced_growth"] = [{"bytes": size, "where": [_frame(f) for f in where]}
                                  for size, where in grown if size > 0]
        return found

    @staticmethod
    def _sizes() -> dict[Any, int]:
        """Bytes held now by each call stack (not this watcher's own)."""
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__),
             tracemalloc.Filter(False, __file__, all_frames=True)])
        return {stat.traceback: stat.size for stat in snapshot.statistics("traceback")}


def _frame(frame: Any) -> str:
    """``file:line``, with the site-packages or checkout prefix taken off."""
    name = frame.filename
    for marker in ("site-packages/", os.path.dirname(os.__file__) + "/",
                   os.path.dirname(os.path.dirname(__file__)) + "/"):
        if marker in name:
            name = name.split(marker, 1)[1]
    return f"{name}:{frame.lineno}"


def _watch(path: str, every: float) -> None:
    mallinfo = _mallinfo()
    frames = int(os.environ.get("HEAPWATCH_TRACEMALLOC", "0"))
    tracer = Tracer(frames, float(os.environ.get("HEAPWATCH_TRACE_AFTER", "900")),
                    float(os.environ.get("HEAPWATCH_TRACE_EVERY", "300"))) if frames else None
    while True:
        found = sample(mallinfo)
        if tracer is not None:
            found.update(tracer.sample())
        line = json.dumps(found)
        with open(path, "a") as out:
            out.write(line + "\n")
        time.sleep(every)


def read(path: str) -> list[dict[str, Any]]:
    """The samples a watched worker wrote (none if it wrote no file)."""
    try:
        with open(path) as lines:
            return [json.loads(line) for line in lines if line.strip()]
    except FileNotFoundError:
        return []


def main() -> None:
    if os.environ.get("HEAPWATCH_NO_HIREDIS"):
        # Before redis-py is imported: it then finds no hiredis, and parses replies in Python.
        sys.modules["hiredis"] = None  # type: ignore[assignment]
    path = os.environ.get("HEAPWATCH_FILE")
    if path:
        threading.Thread(target=_watch, args=(path, EVERY), name="heapwatch",
                         daemon=True).start()
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
