"""Counting requests in time windows (rate-limit conformance)."""

from __future__ import annotations


def busiest_window(times: list[float], width: float = 1.0) -> int:
    """Most requests in any window [t, t + width) starting at a request."""
    times = sorted(times)
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= width:
            start += 1
        most = max(most, end - start + 1)
    return most
