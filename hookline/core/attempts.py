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
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import MethodType

_lock = threading.Lock()
_waiting = 0
#: Called (with no arguments) when an attempt starts waiting on its receiver: the consumer,
#: starved of runnable room, takes the next message at once (hookline/transport/unacked.py).
#: Held weakly: a listener is a channel's QoS, and a reconnect replaces the channel. Held
#: strongly, each replaced channel stayed for the life of the process, with its unacked
#: messages' table, its ledger and its connection pools (a worker grew at every Redis fault).
#: A tuple replaced whole under the lock, so the hot path reads it without one.
_listeners: tuple[weakref.ref[Callable[[], None]], ...] = ()


def notify_when_waiting(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever an attempt starts waiting on a receiver (once registered),
    for as long as it lives: a bound method's object or a function is not kept alive by this
    (registering also drops the listeners that no longer live)."""
    global _listeners
    held: weakref.ref[Callable[[], None]] = (
        weakref.WeakMethod(listener) if isinstance(listener, MethodType)
        else weakref.ref(listener))
    with _lock:
        live = tuple(ref for ref in _listeners if ref() is not None)
        _listeners = live if held in live else (*live, held)


def listening() -> int:
    """How many listeners are registered and live."""
    return sum(1 for ref in _listeners if ref() is not None)


def waiting_on_receivers() -> int:
    """Attempts of this process between sending a request and having its answer."""
    return _waiting


@contextmanager
def waiting_on_receiver() -> Iterator[None]:
    """Counts the block it wraps (the request and the wait for the answer) as waiting."""
    global _waiting
    with _lock:
        _waiting += 1
    for ref in _listeners:
        listener = ref()
        if listener is not None:
            listener()
    try:
        yield
    finally:
        with _lock:
            _waiting -= 1
