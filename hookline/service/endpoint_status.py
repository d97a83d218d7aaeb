"""One honest line on what an endpoint is doing now, e.g. "breaker open since 12:04 UTC; 312
deliveries held; next probe 12:09 UTC; the oldest dead-letters at max age in 47 h".

The line is made of the endpoint's state as Redis holds it (:class:`StatusFacts`: its
hash's enabled, disabled reason and time, pause, breaker state, open and probe times,
Retry-After block; the retry schedule's count of its deliveries and the oldest of them), never
of its settings: a retry policy says what would happen, not what is happening.
:func:`status_line` is pure (tests give it facts and a clock); :func:`endpoint_status` reads
the facts.

Public API::

    endpoint_status(actor, endpoint_id) -> EndpointStatus     # .facts, .line, .tone
    status_line(facts) -> str
    status_tone(facts) -> str        # ok, held, failing or disabled
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hookline.service.actor import Actor
from hookline.service.endpoints import require_endpoint
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.schedule import RetrySchedule

#: The endpoint hash's fields the facts are read from.
FIELDS = ("state", "failures", "open_until", "opened_at", "probe_until", "blocked_until",
          "last_success_at", "last_error", "last_error_at")
#: Scheduled deliveries read to find the oldest (an endpoint with more: the oldest of these).
OLDEST_READ = 500


@dataclass(frozen=True)
class StatusFacts:
    """What the line is made of. Times are Unix seconds (None: not so); ``now`` is Redis
    time when read by :func:`endpoint_status`."""

    now: float
    enabled: bool = True
    disabled_reason: str = ""
    disabled_at: float | None = None
    paused_at: float | None = None
    #: closed, open or half_open.
    breaker_state: str = "closed"
    failures: int = 0
    opened_at: float | None = None
    #: When an open breaker lets its probe through.
    open_until: float | None = None
    #: While half-open: when the probe out runs out.
    probe_until: float | None = None
    #: A Retry-After holds the endpoint back until then.
    blocked_until: float | None = None
    #: Deliveries of this endpoint in the retry schedule (retries, and deliveries held).
    scheduled: int = 0
    #: The oldest of them: when it was first attempted (or published, if never attempted).
    oldest_since: float | None = None
    #: True when ``oldest_since`` is the oldest of only the first :data:`OLDEST_READ` read.
    oldest_sampled: bool = False
    #: The endpoint's effective max age, seconds.
    max_age: float = 0.0
    last_success_at: float | None = None
    last_error: str = ""
    last_error_at: float | None = None

    @property
    def held_by(self) -> str:
        """Why deliveries are held without attempts ("": they are not): paused,
        breaker_open, breaker_probe or blocked."""
        if not self.enabled:
            return ""
        if self.paused_at is not None:
            return "paused"
        if self.breaker_state == "open" and (self.open_until or 0) > self.now:
            return "breaker_open"
        if self.breaker_state == "half_open" and (self.probe_until or 0) > self.now:
            return "breaker_probe"
        if (self.blocked_until or 0) > self.now:
            return "blocked"
        return ""


def clock(at: float, now: float) -> str:
    """``12:04 UTC`` on the same UTC day as ``now``, else with the date."""
    if time.gmtime(at)[:3] == time.gmtime(now)[:3]:
        return time.strftime("%H:%M UTC", time.gmtime(at))
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def span(seconds: float) -> str:
    """A duration as a person reads it: ``40 s``, ``12 min``, ``47 h``, ``3 days``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _oldest(facts: StatusFacts) -> str:
    """When the oldest scheduled delivery dead-letters at its max age."""
    if facts.oldest_since is None or not facts.max_age:
        return ""
    left = facts.oldest_since + facts.max_age - facts.now
    which = "the oldest read" if facts.oldest_sampled else "the oldest"
    if left <= 0:
        return f"{which} is past its max age: dead-lettered at its next turn"
    return f"{which} dead-letters at max age in {span(left)}"


def status_tone(facts: StatusFacts) -> str:
    """ok, held (paused, or waiting on a Retry-After), failing (breaker not closed, or
    failures in a row) or disabled."""
    if not facts.enabled:
        return "disabled"
    if facts.breaker_state != "closed" or facts.failures:
        return "failing"
    if facts.held_by:
        return "held"
    return "ok"


def status_line(facts: StatusFacts) -> str:
    """The line (module docstring), from the most telling fact to the least."""
    now = facts.now
    parts: list[str] = []
    held = _count(facts.scheduled, "delivery", "deliveries")
    if not facts.enabled:
        since = f" since {clock(facts.disabled_at, now)}" if facts.disabled_at else ""
        reason = f" ({facts.disabled_reason})" if facts.disabled_reason else ""
        parts.append(f"disabled{since}{reason}; new deliveries are dead-lettered")
        if facts.scheduled:
            parts.append(f"{held} still scheduled")
        return "; ".join(parts)
    hold = facts.held_by
    if hold == "paused":
        assert facts.paused_at is not None
        parts.append(f"paused since {clock(facts.paused_at, now)}")
        parts.append(f"{held} held until it is resumed")
    elif hold == "breaker_open":
        since = f" since {clock(facts.opened_at, now)}" if facts.opened_at else ""
        parts.append(f"breaker open{since}")
        parts.append(f"{held} held")
        assert facts.open_until is not None
        parts.append(f"next probe {clock(facts.open_until, now)}")
    elif hold == "breaker_probe":
        parts.append("breaker half-open: one probe attempt is out")
        parts.append(f"{held} held")
        assert facts.probe_until is not None
        parts.append(f"the probe times out at {clock(facts.probe_until, now)}")
    elif hold == "blocked":
        assert facts.blocked_until is not None
        parts.append(f"held back by the receiver's Retry-After until "
                     f"{clock(facts.blocked_until, now)}")
        parts.append(f"{held} held")
    else:
        if facts.breaker_state == "open":
            parts.append("breaker open: the next attempt is its probe")
        elif facts.breaker_state == "half_open":
            parts.append("breaker half-open: the next attempt is its probe")
        else:
            parts.append("delivering")
        if facts.failures:
            parts.append(_count(facts.failures, "failure", "failures") + " in a row")
        if facts.scheduled:
            parts.append(_count(facts.scheduled, "delivery", "deliveries") + " waiting to retry")
    if facts.scheduled:
        oldest = _oldest(facts)
        if oldest:
            parts.append(oldest)
    if not hold and not facts.failures:
        if facts.last_success_at is not None:
            parts.append(f"last delivered {clock(facts.last_success_at, now)}")
        elif facts.last_error_at is None:
            parts.append("no attempt yet")
    if facts.failures and facts.last_error:
        at = f" at {clock(facts.last_error_at, now)}" if facts.last_error_at else ""
        parts.append(f"last error {facts.last_error}{at}")
    return "; ".join(parts)


@dataclass(frozen=True)
class EndpointStatus:
    facts: StatusFacts
    line: str
    #: ok, held, failing or disabled (:func:`status_tone`).
    tone: str


def _seconds(value: str | None) -> float | None:
    """A field in milliseconds of Redis time as Unix seconds (None when missing or 0)."""
    return float(value) / 1000.0 if value and float(value) else None


def _oldest_scheduled(schedule: RetrySchedule, endpoint_id: str) -> tuple[float | None, bool]:
    """The first attempt (or publish) time of the oldest of the endpoint's first
    :data:`OLDEST_READ` scheduled deliveries, and whether there were more."""
    oldest: float | None = None
    for read, retry in enumerate(schedule.scheduled(endpoint_id), start=1):
        since = retry.first_attempt_at or retry.enqueued_at
        if isinstance(since, int | float) and (oldest is None or since < oldest):
            oldest = float(since)
        if read >= OLDEST_READ:
            return oldest, True
    return oldest, False


def endpoint_status(actor: Actor, endpoint_id: str) -> EndpointStatus:
    """The endpoint's status line (``NotFound`` outside the actor's scope)."""
    endpoint = require_endpoint(actor, endpoint_id)
    client: Any = store.client()
    values = client.hmget(keys.breaker_key(endpoint.id), FIELDS)
    data = dict(zip(FIELDS, values, strict=True))
    schedule = RetrySchedule(client)
    scheduled = schedule.count(endpoint.id)
    oldest, sampled = _oldest_scheduled(schedule, endpoint.id) if scheduled else (None, False)
    facts = StatusFacts(
        now=store.redis_time(client), enabled=endpoint.enabled,
        disabled_reason=endpoint.disabled_reason, disabled_at=endpoint.disabled_at,
        paused_at=endpoint.paused_at, breaker_state=data["state"] or "closed",
        failures=int(data["failures"] or 0), opened_at=_seconds(data["opened_at"]),
        open_until=_seconds(data["open_until"]), probe_until=_seconds(data["probe_until"]),
        blocked_until=_seconds(data["blocked_until"]), scheduled=scheduled,
        oldest_since=oldest, oldest_sampled=sampled, max_age=endpoint.policy().max_age,
        last_success_at=_seconds(data["last_success_at"]), last_error=data["last_error"] or "",
        last_error_at=_seconds(data["last_error_at"]))
    return EndpointStatus(facts=facts, line=status_line(facts), tone=status_tone(facts))
