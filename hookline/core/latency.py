"""Latency histograms with fixed, log-spaced buckets: what the endpoint health chart's p50 and
p95 are read from. Pure: no Redis, no Celery.

Bucket ``i`` holds attempts that took more than ``BOUNDS[i-1]`` and at most ``BOUNDS[i]``
seconds (bucket 0: at most ``BOUNDS[0]``; the last, :data:`OVERFLOW`: more than the largest
bound). Bounds grow by a factor of sqrt(2) from 1 ms to 65.5 s, so a percentile read from
the counts (the bucket's geometric middle) is within about 19 % of the true value. Fixed
buckets add up: the workers' counts for one minute are summed in Redis by HINCRBY, and
percentiles come from the sum.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

#: Upper bounds of the buckets, seconds: 2^(i/2) ms for i = 0..32 (1 ms .. 65.5 s).
BOUNDS: tuple[float, ...] = tuple(2 ** (i / 2) / 1000 for i in range(33))
#: The bucket of attempts slower than the largest bound.
OVERFLOW = len(BOUNDS)


def bucket_of(seconds: float) -> int:
    """The bucket an attempt that took ``seconds`` counts in."""
    if not seconds > 0:  # 0, negative or NaN: the fastest bucket
        return 0
    return bisect.bisect_left(BOUNDS, seconds)


def bucket_value(bucket: int) -> float:
    """The value a percentile falling in ``bucket`` is reported as, seconds: the geometric
    middle of its bounds (bucket 0: half its bound; the overflow: its lower bound)."""
    if bucket <= 0:
        return BOUNDS[0] / 2
    if bucket >= OVERFLOW:
        return BOUNDS[-1]
    return math.sqrt(BOUNDS[bucket - 1] * BOUNDS[bucket])


def percentile(counts: Mapping[int, int], share: float) -> float | None:
    """The ``share`` (0 < share <= 1) percentile, seconds, of the attempts counted in
    ``counts`` (bucket -> attempts); None when nothing was counted."""
    total = sum(n for n in counts.values() if n > 0)
    if total == 0:
        return None
    rank = max(1, math.ceil(share * total))
    seen = 0
    for bucket in sorted(counts):
        seen += max(0, counts[bucket])
        if seen >= rank:
            return bucket_value(bucket)
    return bucket_value(max(counts))  # pragma: no cover - rank <= total always stops above
