"""Latency histograms with fixed log-spaced buckets (``hookline.core.latency``): every
duration lands in one bucket, counts add up, and a percentile read from them is within the
buckets' resolution of the true one."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from hookline.core import latency


def test_buckets_cover_every_duration_in_order() -> None:
    assert latency.bucket_of(0) == 0
    assert latency.bucket_of(-1) == 0
    assert latency.bucket_of(float("nan")) == 0
    assert latency.bucket_of(0.001) == 0
    assert latency.bucket_of(0.0011) == 1
    assert latency.bucket_of(1e6) == latency.OVERFLOW
    durations = [0.0005 * 1.07 ** n for n in range(200)]
    buckets = [latency.bucket_of(d) for d in durations]
    assert buckets == sorted(buckets)


def test_a_bucket_holds_the_durations_up_to_its_bound() -> None:
    for bucket, bound in enumerate(latency.BOUNDS):
        assert latency.bucket_of(bound) == bucket
        assert latency.bucket_of(bound * 1.0001) == bucket + 1


def test_nothing_counted_has_no_percentile() -> None:
    assert latency.percentile({}, 0.5) is None
    assert latency.percentile({3: 0}, 0.95) is None


@pytest.mark.parametrize("share", [0.5, 0.95, 0.99])
def test_percentiles_are_within_the_buckets_resolution(share: float) -> None:
    rng = random.Random(7)
    durations = sorted(rng.lognormvariate(math.log(0.08), 0.9) for _ in range(5000))
    counts = Counter(latency.bucket_of(d) for d in durations)
    true = durations[math.ceil(share * len(durations)) - 1]
    found = latency.percentile(counts, share)
    assert found is not None
    assert abs(math.log(found / true)) <= math.log(2) / 4 + 1e-9  # half a bucket: ~19 %


def test_counts_of_several_workers_add_up_to_the_same_percentiles() -> None:
    rng = random.Random(3)
    durations = [rng.uniform(0.01, 2.0) for _ in range(3000)]
    whole = Counter(latency.bucket_of(d) for d in durations)
    parts = [Counter(latency.bucket_of(d) for d in durations[n::3]) for n in range(3)]
    summed = parts[0] + parts[1] + parts[2]
    assert summed == whole
    assert latency.percentile(summed, 0.95) == latency.percentile(whole, 0.95)


def test_one_slow_attempt_in_twenty_is_the_p95_only_past_it() -> None:
    fast, slow = latency.bucket_of(0.05), latency.bucket_of(5.0)
    assert latency.percentile({fast: 19, slow: 1}, 0.95) == latency.bucket_value(fast)
    assert latency.percentile({fast: 18, slow: 2}, 0.95) == latency.bucket_value(slow)
    assert latency.bucket_value(slow) == pytest.approx(5.0, rel=0.2)
