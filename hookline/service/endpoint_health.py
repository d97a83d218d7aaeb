"""Endpoint health as an operator or a tenant sees it: attempts per minute (success rate, p50
and p95 latency) over the last day, the latest attempts, and, for the overview, the endpoints
disabled or failing and the last hour's totals.

Public API (``NotFound`` for an endpoint outside ``actor.app_scope``, as everywhere)::

    health_minutes(actor, endpoint_id, *, minutes=1440, now=None) -> list[MinuteHealth]
    latest_attempts(actor, endpoint_id, *, limit=50) -> list[SeenAttempt]
    troubled_endpoints(actor, *, limit=100) -> TroubledEndpoints    # unscoped: the overview's
    last_hour(actor, *, now=None) -> HourTotals | None              # None for a tenant

The minutes and attempts are the workers' health tallies (``hookline.worker.health``, written
every ``HOOKLINE_HEALTH_INTERVAL`` seconds): the current minute fills as they write. An
attempt's response excerpt was redacted by the engine before it was kept; it is scrubbed
again here against the endpoint's current URL (``hookline.core.redact.scrub``), so a secret
part of its URL never shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from hookline.core import redact
from hookline.service.actor import Actor
from hookline.service.endpoints import require_endpoint
from hookline.service.schedule import schedule_stats
from hookline.service.stats import attention_sample
from hookline.store import connection as store
from hookline.store import disabled, keys
from hookline.store.health import (
    ATTEMPTS_KEPT,
    FAILING_WINDOW,
    MINUTES_KEPT,
    HealthReader,
    MinuteHealth,
    SeenAttempt,
)

#: The outcomes of the workers' per-minute counts (``hookline.worker.tallies``) that the
#: overview's "failed" adds up: attempts that failed and were retried, and dead letters.
FAILED_OUTCOMES = ("retry_scheduled", "dead_lettered")


def health_minutes(actor: Actor, endpoint_id: str, *, minutes: int = MINUTES_KEPT,
                   now: float | None = None) -> list[MinuteHealth]:
    """The last ``minutes`` minutes of the endpoint's attempts (the current one included),
    oldest first: one pipelined read of at most 145 hashes."""
    endpoint = require_endpoint(actor, endpoint_id)
    minutes = max(1, min(int(minutes), MINUTES_KEPT))
    current = int((time.time() if now is None else now) // 60)
    return HealthReader(store.client()).minutes(endpoint.id, current - minutes + 1, current)


def latest_attempts(actor: Actor, endpoint_id: str, *, limit: int = ATTEMPTS_KEPT
                    ) -> list[SeenAttempt]:
    """The endpoint's latest attempts, newest first, their errors and excerpts scrubbed."""
    endpoint = require_endpoint(actor, endpoint_id)
    found = HealthReader(store.client()).attempts(endpoint.id, max(1, min(limit, ATTEMPTS_KEPT)))
    return [replace(seen, error=redact.scrub(seen.error, endpoint.url),
                    response=redact.scrub(seen.response, endpoint.url)) for seen in found]


@dataclass(frozen=True)
class HourTotals:
    """The whole deployment's last 60 minutes, as the workers counted them."""

    delivered: int
    #: Attempts that failed and were scheduled for a retry, and deliveries dead-lettered.
    failed: int
    retried: int
    dead_lettered: int


def last_hour(actor: Actor, *, now: float | None = None) -> HourTotals | None:
    """Delivered and failed in the last hour (None for a scoped actor: the counts are the
    whole deployment's)."""
    if actor.app_scope is not None:
        return None
    current = int((time.time() if now is None else now) // 60)
    pipe = store.client().pipeline(transaction=False)
    for minute in range(current - 59, current + 1):
        pipe.hmget(keys.stats_key(minute), ("delivered", *FAILED_OUTCOMES))
    sums = [0, 0, 0]
    for values in pipe.execute():
        for n, value in enumerate(values):
            sums[n] += int(value or 0)
    return HourTotals(delivered=sums[0], failed=sums[1] + sums[2], retried=sums[1],
                      dead_lettered=sums[2])


@dataclass(frozen=True)
class TroubledEndpoint:
    """An endpoint disabled or failing, and why."""

    endpoint_id: str
    #: disabled, or failing.
    state: str
    reason: str
    #: Disabled: when; failing: its latest failed attempt (Unix seconds).
    since: float | None = None
    #: The breaker's state (failing endpoints).
    breaker: str = ""


@dataclass(frozen=True)
class TroubledEndpoints:
    """Every disabled endpoint (the index: ``hookline.store.disabled``, the latest disabled
    first) and every endpoint failing now: its breaker not closed, a Retry-After holding it
    back, or its latest error newer than its latest success, among those with a failed
    attempt in the last hour (the health tallies' failing set) and the endpoints with the
    most retries scheduled. ``*_total`` counts them all; the lists hold at most ``limit``."""

    disabled: list[TroubledEndpoint] = field(default_factory=list)
    disabled_total: int = 0
    failing: list[TroubledEndpoint] = field(default_factory=list)
    failing_total: int = 0


#: The endpoint hash's fields that say whether (and why) an endpoint with failures is failing.
FAILING_FIELDS = ("url", "app", "enabled", "state", "failures", "last_error", "last_error_at",
                  "last_success_at", "blocked_until")


def _failing(actor: Actor, client: Any, candidates: dict[str, float], now: float
             ) -> list[TroubledEndpoint]:
    """The candidates still failing: breaker not closed, a Retry-After block, or the latest
    error newer than the latest success."""
    ids = sorted(candidates)
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for endpoint_id in ids:
        pipe.hmget(keys.endpoint_key(endpoint_id), FAILING_FIELDS)
    found = []
    for endpoint_id, values in zip(ids, pipe.execute(), strict=True):
        data = dict(zip(FAILING_FIELDS, values, strict=True))
        if not data["url"] or data["enabled"] == "0" or not actor.sees_app(data["app"] or None):
            continue  # gone, listed as disabled, or another application's
        state = data["state"] or "closed"
        error_at = float(data["last_error_at"] or 0)
        success_at = float(data["last_success_at"] or 0)
        blocked = float(data["blocked_until"] or 0) > now * 1000
        if state == "closed" and not blocked and error_at <= success_at:
            continue
        reason = data["last_error"] or ("held back by a Retry-After" if blocked else state)
        failures = int(data["failures"] or 0)
        if failures:
            reason = f"{reason} ({failures} failures in a row)"
        found.append(TroubledEndpoint(endpoint_id, "failing", reason,
                                      since=(error_at / 1000) or candidates[endpoint_id] or None,
                                      breaker=state))
    return sorted(found, key=lambda item: (-(item.since or 0), item.endpoint_id))


def troubled_endpoints(actor: Actor, *, limit: int = 100) -> TroubledEndpoints:
    """The overview's list of disabled and failing endpoints (module docstring); a scoped
    actor gets its application's only."""
    client = store.client()
    now = store.redis_time(client)
    rows = disabled.disabled(client, limit=limit)  # members left behind dropped as read
    listed = [TroubledEndpoint(row["id"], "disabled", row["disabled_reason"] or "no reason",
                               since=float(row["disabled_at"] or 0) or None)
              for row in rows if actor.sees_app(row["app"] or None)]
    disabled_total = disabled.count(client) if actor.app_scope is None else len(listed)
    candidates = dict(HealthReader(client).failing(now - FAILING_WINDOW))
    sample, _ = attention_sample(schedule_stats(actor))
    candidates.update((status.endpoint_id, 0.0) for status in sample
                      if status.endpoint_id not in candidates)
    failing = _failing(actor, client, candidates, now)
    return TroubledEndpoints(disabled=listed, disabled_total=max(disabled_total, len(listed)),
                             failing=failing[:limit], failing_total=len(failing))
