"""The retry policy and outcome table: pure functions, fixed random source."""

import math
import time

import pytest

from hookline.core.policy import (
    MAX_AGE_LIMIT,
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF_LIMIT,
    MAX_MULTIPLIER,
    Outcome,
    PolicyError,
    RetryPolicy,
    classify,
    compute_backoff,
    parse_rate,
    parse_retry_after,
    retry_countdown,
)


def no_jitter() -> float:
    return 0.0


def full_jitter() -> float:
    return 1.0


def test_backoff_sequence_grows_by_the_multiplier_until_the_cap():
    policy = RetryPolicy(initial_backoff=5, multiplier=3, max_backoff=300, jitter=0.5)
    delays = [compute_backoff(policy, n, rand=no_jitter) for n in range(1, 8)]
    assert delays == [5, 15, 45, 135, 300, 300, 300]


def test_jitter_shortens_a_delay_by_at_most_its_fraction():
    policy = RetryPolicy(initial_backoff=10, multiplier=2, max_backoff=100, jitter=0.25)
    assert compute_backoff(policy, 2, rand=full_jitter) == pytest.approx(15.0)
    assert compute_backoff(policy, 2, rand=lambda: 0.5) == pytest.approx(17.5)
    assert compute_backoff(policy, 2, rand=no_jitter) == 20.0


def test_attempt_ten_thousand_does_not_overflow():
    policy = RetryPolicy(initial_backoff=1, multiplier=10, max_backoff=3600, jitter=0)
    assert compute_backoff(policy, 10_000) == 3600.0
    assert math.isfinite(compute_backoff(RetryPolicy(multiplier=MAX_MULTIPLIER), 10_000))


def test_multiplier_one_gives_a_constant_delay():
    policy = RetryPolicy(initial_backoff=7, multiplier=1, max_backoff=60, jitter=0)
    assert {compute_backoff(policy, n) for n in (1, 2, 50)} == {7.0}


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"multiplier": 0.5}, "multiplier"),
        ({"multiplier": math.inf}, "multiplier"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"initial_backoff": 100, "max_backoff": 10}, "initial_backoff"),
        ({"max_backoff": 10**9}, "max_backoff"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_age": math.nan}, "max_age"),
        ({"multiplier": MAX_MULTIPLIER + 1}, "multiplier"),
        ({"max_attempts": MAX_ATTEMPTS_LIMIT + 1}, "max_attempts"),
        ({"max_attempts": 10**12}, "max_attempts"),
        ({"max_age": MAX_AGE_LIMIT + 1}, "max_age"),
        ({"max_age": 1e300}, "max_age"),
    ],
)
def test_invalid_policy_names_the_setting(settings, named):
    with pytest.raises(PolicyError, match=named):
        RetryPolicy(**settings)


def test_override_rejects_unknown_fields():
    with pytest.raises(PolicyError, match="unknown retry setting"):
        RetryPolicy().replace({"max_tries": 3})


def test_default_window_is_about_a_day():
    policy = RetryPolicy()
    # 34 delays: 5 s doubling to 2,560 s, then 24 at the 1 h cap.
    assert policy.schedule()[:3] == [5, 10, 20]
    assert policy.window() == 5115 + 24 * 3600


def test_window_is_bounded_by_max_age():
    assert RetryPolicy(max_age=600).window() == 600


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.DELIVERED), (201, Outcome.DELIVERED), (204, Outcome.DELIVERED),
        (408, Outcome.RETRY), (425, Outcome.RETRY), (429, Outcome.RETRY),
        (500, Outcome.RETRY), (502, Outcome.RETRY), (503, Outcome.RETRY), (599, Outcome.RETRY),
        (410, Outcome.GONE),
        (301, Outcome.REJECTED), (302, Outcome.REJECTED), (400, Outcome.REJECTED),
        (401, Outcome.REJECTED), (404, Outcome.REJECTED), (422, Outcome.REJECTED),
        (100, Outcome.REJECTED),
    ],
)
def test_outcome_table(status, outcome):
    assert classify(status) is outcome


def test_retry_after_in_seconds_and_as_http_date():
    assert parse_retry_after("120", now=0) == 120.0
    now = 1_700_000_000.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:14:20 GMT", now=now) == pytest.approx(60.0)


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5e3", "Mon, 99 Foo 2023"])
def test_invalid_retry_after_is_ignored(value):
    assert parse_retry_after(value, now=0) is None


def test_http_date_in_the_past_means_no_wait():
    assert parse_retry_after("Tue, 14 Nov 2023 22:14:20 GMT", now=2_000_000_000) == 0.0


def test_countdown_is_never_shorter_than_retry_after_but_capped():
    policy = RetryPolicy(initial_backoff=1, multiplier=2, max_backoff=10, jitter=0)
    assert retry_countdown(policy, 1, retry_after=None) == 1
    assert retry_countdown(policy, 1, retry_after=30, retry_after_cap=60) == 30
    assert retry_countdown(policy, 1, retry_after=3600, retry_after_cap=60) == 60
    assert retry_countdown(policy, 4, retry_after=2, retry_after_cap=60) == 8


@pytest.mark.parametrize(("text", "interval"), [("50/s", 0.02), ("3000/m", 0.02), ("1/s", 1.0),
                                                ("36/h", 100.0), (" 10/s ", 0.1)])
def test_rate_strings_give_the_emission_interval(text, interval):
    assert parse_rate(text) == pytest.approx(interval)


@pytest.mark.parametrize("text", ["", "50", "50/d", "0/s", "-1/s", "1.5/s", "fast", "/s", "50/",
                                  "\u00b2/s", "\u0665/s", "050/s"])
def test_invalid_rate_strings_are_refused_with_the_format(text):
    with pytest.raises(PolicyError, match="N/s, N/m or N/h"):
        parse_rate(text)


def test_rates_finer_than_a_millisecond_are_refused():
    assert parse_rate("1000/s") == 0.001
    with pytest.raises(PolicyError, match="1000/s"):
        parse_rate("5000/s")


@pytest.mark.parametrize("overrides", [
    {"max_attempts": MAX_ATTEMPTS_LIMIT, "multiplier": 1, "initial_backoff": 0.001,
     "max_backoff": 3600},
    {"max_attempts": MAX_ATTEMPTS_LIMIT, "initial_backoff": 0, "max_backoff": 0},
    {"max_attempts": MAX_ATTEMPTS_LIMIT, "multiplier": 1.0000001, "initial_backoff": 1e-300,
     "max_backoff": MAX_BACKOFF_LIMIT, "max_age": MAX_AGE_LIMIT},
])
def test_the_retry_window_of_the_most_extreme_policy_is_quick_and_bounded(overrides):
    """``hookline endpoint show`` computes it: it once summed max_attempts delays one by one."""
    policy = RetryPolicy().replace(overrides)
    started = time.perf_counter()
    window = policy.window()
    assert time.perf_counter() - started < 0.1
    assert 0 <= window <= policy.max_age


def test_the_window_sums_the_capped_tail_at_once():
    policy = RetryPolicy(initial_backoff=1, multiplier=2, max_backoff=8, jitter=0,
                         max_attempts=6, max_age=10**6)
    assert policy.window() == 1 + 2 + 4 + 8 + 8 == sum(policy.schedule())
