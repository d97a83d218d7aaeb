"""Retry policy and outcome classification: pure functions, no Redis, no HTTP.

The backoff formula is one function (:func:`compute_backoff`) that tests call with a fixed random
source, as Dramatiq's ``common.compute_backoff`` does.
"""

from __future__ import annotations

import enum
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from hookline.core.errors import HooklineError

#: No backoff may exceed this, whatever the settings say (one week, in seconds): a bound that
#: keeps every computed due time a small finite float.
MAX_BACKOFF_LIMIT = 7 * 24 * 3600.0
#: Most attempts a policy may allow: more is a retry storm, not a policy, and the schedule
#: shown by ``hookline endpoint show`` is computed from it.
MAX_ATTEMPTS_LIMIT = 1000
#: Largest growth factor per attempt: past it the second retry already meets the cap.
MAX_MULTIPLIER = 100.0
#: Longest a policy may keep retrying one event (90 days, in seconds); the ``done`` markers
#: live this long plus the replay horizon.
MAX_AGE_LIMIT = 90 * 86400.0


class PolicyError(HooklineError, ValueError):
    """A retry setting is out of range; the message names the setting."""


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed delivery is tried again.

    :param initial_backoff: delay before the second attempt, in seconds (default 5).
    :param multiplier: growth factor per attempt, finite and >= 1 (default 2).
    :param max_backoff: ceiling of any one delay, in seconds (default 3,600).
    :param jitter: fraction in [0, 1] by which a delay is shortened at random (default 0.2), so
        retries of many events failed together spread out instead of arriving as one burst.
    :param max_attempts: attempts in all, the first included (default 35: with the other
        defaults, about 25 hours of retries, like Svix's ~28).
    :param max_age: seconds after the first attempt past which no retry is scheduled
        (default 172,800: two days).
    """

    initial_backoff: float = 5.0
    multiplier: float = 2.0
    max_backoff: float = 3600.0
    jitter: float = 0.2
    max_attempts: int = 35
    max_age: float = 172800.0

    def __post_init__(self) -> None:
        _check_finite("initial_backoff", self.initial_backoff, minimum=0.0)
        _check_finite("multiplier", self.multiplier, minimum=1.0, maximum=MAX_MULTIPLIER)
        _check_finite("max_backoff", self.max_backoff, minimum=0.0, maximum=MAX_BACKOFF_LIMIT)
        _check_finite("jitter", self.jitter, minimum=0.0, maximum=1.0)
        _check_finite("max_age", self.max_age, minimum=0.0, maximum=MAX_AGE_LIMIT)
        if self.initial_backoff > self.max_backoff:
            raise PolicyError(
                f"initial_backoff ({self.initial_backoff}) must not exceed "
                f"max_backoff ({self.max_backoff})"
            )
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise PolicyError(f"max_attempts must be an integer, got {self.max_attempts!r}")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise PolicyError(f"max_attempts must be from 1 to {MAX_ATTEMPTS_LIMIT}, got "
                              f"{self.max_attempts}")

    def replace(self, overrides: Mapping[str, Any]) -> RetryPolicy:
        """This policy with some fields changed (an endpoint's override), validated again."""
        unknown = set(overrides) - set(POLICY_FIELDS)
        if unknown:
            raise PolicyError(
                f"unknown retry setting(s) {sorted(unknown)}; known: {', '.join(POLICY_FIELDS)}"
            )
        return RetryPolicy(**{**asdict(self), **overrides})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def schedule(self) -> list[float]:
        """Nominal delays (no jitter) between successive attempts."""
        return [compute_backoff(self, n, rand=lambda: 0.0) for n in range(1, self.max_attempts)]

    def window(self) -> float:
        """Seconds from the first to the last attempt without jitter, bounded by ``max_age``:
        summed only until the delays reach their cap or the age its bound (a few dozen
        steps whatever the policy)."""
        total = 0.0
        for attempt in range(1, self.max_attempts):
            delay = compute_backoff(self, attempt, rand=lambda: 0.0)
            if delay >= self.max_backoff:  # every later delay is the cap
                total += delay * (self.max_attempts - attempt)
                break
            total += delay
            if total >= self.max_age:
                break
        return min(total, self.max_age)


POLICY_FIELDS = tuple(RetryPolicy.__dataclass_fields__)


def _check_finite(
    name: str, value: Any, *, minimum: float, maximum: float | None = None
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise PolicyError(f"{name} must be finite, got {value!r}")
    if value < minimum:
        raise PolicyError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise PolicyError(f"{name} must be <= {maximum}, got {value!r}")


def compute_backoff(
    policy: RetryPolicy, attempt: int, *, rand: Callable[[], float] = random.random
) -> float:
    """Delay in seconds after failed attempt number ``attempt`` (1 = the first attempt).

    ``initial * multiplier ** (attempt - 1)``, capped at ``max_backoff``, then shortened by up to
    ``jitter`` of itself at random. The cap is checked in log space first, so the power is only
    taken when it is below the cap: attempt 10,000 does not overflow.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    delay = policy.max_backoff
    if policy.initial_backoff == 0:
        delay = 0.0
    elif policy.multiplier == 1:
        delay = policy.initial_backoff
    else:
        exponent = (attempt - 1) * math.log(policy.multiplier)
        if exponent < math.log(policy.max_backoff / policy.initial_backoff):
            delay = policy.initial_backoff * policy.multiplier ** (attempt - 1)
    delay = min(delay, policy.max_backoff)
    return delay * (1.0 - policy.jitter * rand())


class Outcome(enum.StrEnum):
    """What one HTTP attempt means for the event."""

    DELIVERED = "delivered"
    RETRY = "retry"
    GONE = "gone"
    REJECTED = "rejected"


#: Statuses that are worth trying again besides 5xx: timeout, too early, throttled.
RETRYABLE_STATUSES = frozenset({408, 425, 429})


def classify(status: int) -> Outcome:
    """The outcome of an HTTP response status (DESIGN.md's table)."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status == 410:
        return Outcome.GONE
    if status in RETRYABLE_STATUSES or 500 <= status < 600:
        return Outcome.RETRY
    return Outcome.REJECTED


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), or None.

    Invalid or negative values give None: the retry policy alone decides then.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def retry_countdown(
    policy: RetryPolicy,
    attempt: int,
    *,
    retry_after: float | None = None,
    retry_after_cap: float = 3600.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """Countdown after failed attempt ``attempt``: the policy's backoff, never shorter than the
    receiver's Retry-After, which is itself capped so a receiver cannot park an event for years."""
    delay = compute_backoff(policy, attempt, rand=rand)
    if retry_after is not None:
        delay = max(delay, min(retry_after, retry_after_cap))
    return delay


#: The limiter works in milliseconds of Redis time: 1000/s is the finest rate it can space.
MIN_RATE_INTERVAL = 0.001
#: Rate units accepted after the slash, in seconds.
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: str) -> float:
    """The emission interval in seconds of a rate such as ``50/s``, ``3000/m`` or ``100/h``.

    Raises :class:`PolicyError` with the accepted format for anything else.
    """
    count, _, unit = str(text).strip().partition("/")
    if unit not in RATE_UNITS or not re.fullmatch(r"[1-9][0-9]{0,8}", count):
        raise PolicyError(
            f"rate {text!r} is invalid: use N/s, N/m or N/h with N a positive integer "
            "(e.g. 50/s, 3000/m)"
        )
    interval = RATE_UNITS[unit] / int(count)
    if interval < MIN_RATE_INTERVAL:
        raise PolicyError(f"rate {text!r} is above the largest limit Hookline enforces, 1000/s")
    return interval
