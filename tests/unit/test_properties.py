"""Property tests (hypothesis) for the pure parts: retry policy, Retry-After, rates, SSRF rules."""

from __future__ import annotations

import ipaddress
import math
from datetime import UTC, datetime
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from hookline.core.policy import (
    MAX_MULTIPLIER,
    PolicyError,
    RetryPolicy,
    compute_backoff,
    parse_rate,
    parse_retry_after,
)
from hookline.core.ssrf import check_address, why_refused

policies = st.builds(
    lambda initial, factor, multiplier, jitter: RetryPolicy(
        initial_backoff=initial, max_backoff=initial * factor, multiplier=multiplier,
        jitter=jitter),
    initial=st.floats(min_value=0.001, max_value=3600),
    factor=st.floats(min_value=1, max_value=100),
    multiplier=st.floats(min_value=1, max_value=MAX_MULTIPLIER),
    jitter=st.floats(min_value=0, max_value=1),
)


@given(policies, st.integers(min_value=1, max_value=10_000))
def test_nominal_backoff_is_monotone_up_to_the_cap(policy, attempt):
    now = compute_backoff(policy, attempt, rand=lambda: 0.0)
    later = compute_backoff(policy, attempt + 1, rand=lambda: 0.0)
    assert now <= later <= policy.max_backoff * (1 + 1e-9)
    assert math.isfinite(later)


@given(policies, st.integers(min_value=1, max_value=10_000), st.floats(min_value=0, max_value=1))
def test_jitter_stays_within_its_fraction(policy, attempt, draw):
    nominal = compute_backoff(policy, attempt, rand=lambda: 0.0)
    jittered = compute_backoff(policy, attempt, rand=lambda: draw)
    assert nominal * (1 - policy.jitter) - 1e-9 <= jittered <= nominal + 1e-9


@given(st.integers(min_value=0, max_value=10**9))
def test_retry_after_seconds_round_trip(seconds):
    assert parse_retry_after(str(seconds), now=0) == seconds


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
       st.floats(min_value=9e8, max_value=4e9))
def test_retry_after_dates_give_the_wait_never_negative(when, now):
    header = format_datetime(when.replace(microsecond=0, tzinfo=UTC), usegmt=True)
    wait = parse_retry_after(header, now=now)
    assert wait is not None and wait >= 0
    assert math.isclose(wait, max(0.0, when.replace(microsecond=0, tzinfo=UTC).timestamp() - now),
                        abs_tol=1e-6)


@given(st.text(max_size=30))
def test_retry_after_never_raises(text):
    wait = parse_retry_after(text, now=1e9)
    assert wait is None or wait >= 0


@given(st.integers(min_value=1, max_value=1000), st.sampled_from(["s", "m", "h"]))
def test_valid_rates_parse_to_the_interval(count, unit):
    seconds = {"s": 1, "m": 60, "h": 3600}[unit]
    assert math.isclose(parse_rate(f"{count}/{unit}"), seconds / count)


@given(st.text(max_size=20))
def test_rate_parsing_accepts_only_the_format(text):
    try:
        interval = parse_rate(text)
    except PolicyError:
        return
    count, unit = text.strip().split("/")
    assert count.isascii() and unit in ("s", "m", "h") and interval >= 0.001


@given(st.ip_addresses())
def test_ssrf_rules_pass_only_global_unicast(address):
    reason = why_refused(address)
    if reason is None:
        assert address.is_global and not address.is_multicast
        if isinstance(address, ipaddress.IPv6Address):
            assert address.ipv4_mapped is None


@given(st.ip_addresses(v=4))
def test_an_allowlisted_network_always_passes(address):
    check_address(address, [ipaddress.ip_network(f"{address}/32")])
