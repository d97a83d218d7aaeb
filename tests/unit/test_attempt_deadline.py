"""The attempt watchdog (hookline.delivery.http.AttemptDeadline): finished attempts leave its
heap as they end, so it holds about the attempts in flight and sleeps until the deadline of
one still running; a deadline that passes still strikes."""

from __future__ import annotations

from hookline.delivery.http import AttemptDeadline
from tests.conftest import wait_until


def test_finished_attempts_leave_the_heap_and_a_running_one_still_strikes():
    watchdog = AttemptDeadline()
    long_running = watchdog.arm(2.0)  # not yet struck when the loop below ends, under load
    for _ in range(500):
        assert watchdog.disarm(watchdog.arm(30.0)) is False
    # Only the running attempt's entry, and the ones queued behind it, are left.
    assert len(watchdog._heap) <= 501
    assert not watchdog.expired(long_running)
    wait_until(lambda: watchdog.expired(long_running), timeout=5)
    # Once it struck, the finished attempts behind it go too, without their 30 s passing.
    watchdog.disarm(watchdog.arm(30.0))
    wait_until(lambda: not watchdog._heap, timeout=5)
    assert watchdog.disarm(long_running) is True


def test_attempts_that_end_in_order_keep_the_heap_empty():
    watchdog = AttemptDeadline()
    tickets = [watchdog.arm(30.0) for _ in range(50)]
    for ticket in tickets:
        watchdog.disarm(ticket)
    assert watchdog._heap == []
