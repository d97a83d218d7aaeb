"""How many of this process's attempts wait on a receiver right now (a thread-safe count).

The worker's consumer (hookline/transport/unacked.py ``QoS.can_consume``) takes a new message
only while fewer than ``HOOKLINE_RUNNABLE_ATTEMPTS`` of the messages it holds are *not* waiting on a
receiver: a process holds as many attempts as it has slots when receivers are slow (each waits
on the network, costing a thread's stack and no CPU), and no more runnable ones than a core
can serve when they answer at once (more threads contending for the interpreter lock only
cost CPU).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_waiting = 0
#: Called (with no arguments) when an attempt starts waiting on its receiver: the consumer,
#: starved of runnable room, takes the next message at once (hookline/transport/unacked.py).
_listeners: list[Callable[[], None]] = []


def notify_when_waiting(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever an attempt starts waiting on a receiver (once registered)."""
    if listener not in _listeners:
        _listeners.append(listener)


def waiting_on_receivers() -> int:
    """Attempts of this process between sending a request and having its answer."""
    return _waiting


@contextmanager
def waiting_on_receiver() -> Iterator[None]:
    """Counts the block it wraps (the request and the wait for the answer) as waiting."""
    global _waiting
    with _lock:
        _waiting += 1
    for listener in _listeners:
        listener()
    try:
        yield
    finally:
        with _lock:
            _waiting -= 1
