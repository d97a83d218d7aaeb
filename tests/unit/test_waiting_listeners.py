"""The listeners told when an attempt starts waiting on its receiver are held weakly: a
channel's QoS registers one, and a reconnect replaces the channel (hookline/core/attempts.py)."""

from __future__ import annotations

import gc

from hookline.core import attempts


class Listener:
    def __init__(self) -> None:
        self.calls = 0

    def heard(self) -> None:
        self.calls += 1


def test_a_listener_is_told_each_time_and_registered_once():
    listener = Listener()
    before = attempts.listening()
    attempts.notify_when_waiting(listener.heard)
    attempts.notify_when_waiting(listener.heard)
    assert attempts.listening() == before + 1
    with attempts.waiting_on_receiver():
        assert attempts.waiting_on_receivers() >= 1
    assert listener.calls == 1


def test_a_listener_whose_object_is_gone_is_dropped_not_kept_alive():
    listener = Listener()
    before = attempts.listening()
    attempts.notify_when_waiting(listener.heard)
    assert attempts.listening() == before + 1
    del listener
    gc.collect()
    assert attempts.listening() == before
    with attempts.waiting_on_receiver():  # a dead listener is skipped, not called
        pass
    attempts.notify_when_waiting(Listener().heard)  # registering prunes the dead ones
    gc.collect()
    assert len(attempts._listeners) <= before + 1
