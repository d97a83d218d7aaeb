"""Endpoint health in Redis: attempts per minute (delivered, failed, a latency histogram) for
the last day, and each endpoint's latest attempts.

Written by the workers' health tally (``hookline.worker.health``), never by the scripts a
delivery runs: each worker process adds its attempts up in memory and writes them every
``HOOKLINE_HEALTH_INTERVAL`` seconds in one pipelined round trip for every endpoint it
touched (:func:`write`), so a delivery's Redis cost does not grow. Read by
``hookline.service.endpoint_health``. Keys (each endpoint's carry its hash tag, so an
endpoint's health lives in its slot on a Redis Cluster):

- ``hookline:{<ep>}:health:<slab>``: a hash per endpoint per :data:`SLAB_MINUTES` minutes
  (``<slab>`` the Unix minute it starts at), fields ``<m>d`` (attempts delivered in minute
  ``slab + m``), ``<m>f`` (failed: any other answer, or none) and ``<m>b<i>`` (attempts in
  latency bucket ``i``, ``hookline.core.latency``); HINCRBY adds every worker's counts up.
  It expires :data:`SLAB_TTL` after it starts: a day of minutes is kept.
- ``hookline:{<ep>}:health:attempts``: a list of JSON :class:`SeenAttempt`, newest first, the
  latest :data:`ATTEMPTS_KEPT` (LPUSH + LTRIM), expiring :data:`ATTEMPTS_TTL` after the latest.
- ``hookline:health:failing``: a sorted set, endpoint -> Unix seconds of its latest failed
  attempt that a flush wrote; members older than :data:`FAILING_WINDOW` are trimmed.

What one interval of a worker counted is lost if the worker is killed before it writes
(kill -9): the health counts nothing that anyone holds or that decides a delivery.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hookline.core import latency
from hookline.store.history import AttemptRecord

#: Minutes one health hash holds (a few fields each: the hash stays a compact listpack).
SLAB_MINUTES = 10
#: Minutes of health an endpoint page can show: a day.
MINUTES_KEPT = 24 * 60
#: Seconds a health hash lives from its first minute: its last minute is kept a day.
SLAB_TTL = (MINUTES_KEPT + SLAB_MINUTES + 1) * 60
#: Attempts kept per endpoint.
ATTEMPTS_KEPT = 50
#: Seconds an endpoint's attempt list outlives its latest write.
ATTEMPTS_TTL = 7 * 86400
#: An endpoint whose latest failed attempt is older than this (seconds) is not "failing".
FAILING_WINDOW = 3600
#: Endpoints by latest failed attempt (not hash-tagged: one key for all endpoints).
FAILING_KEY = "hookline:health:failing"


def slab_of(minute: int) -> int:
    """The first minute of the health hash that holds ``minute`` (Unix minutes)."""
    return minute - minute % SLAB_MINUTES


def slab_key(endpoint_id: str, slab: int) -> str:
    return f"hookline:{{{endpoint_id}}}:health:{slab}"


def attempts_key(endpoint_id: str) -> str:
    return f"hookline:{{{endpoint_id}}}:health:attempts"


@dataclass
class MinuteCounts:
    """One endpoint's attempts in one minute, as a worker adds them up."""

    delivered: int = 0
    failed: int = 0
    #: Latency bucket -> attempts (``hookline.core.latency``).
    buckets: Counter[int] = field(default_factory=Counter)

    def add(self, delivered: bool, seconds: float) -> None:
        if delivered:
            self.delivered += 1
        else:
            self.failed += 1
        self.buckets[latency.bucket_of(seconds)] += 1

    def merge(self, other: MinuteCounts) -> None:
        self.delivered += other.delivered
        self.failed += other.failed
        self.buckets.update(other.buckets)

    def fields(self, minute: int) -> dict[str, int]:
        """The health hash's fields this adds to, and by how much."""
        offset = minute - slab_of(minute)
        found = {f"{offset}d": self.delivered, f"{offset}f": self.failed}
        found.update((f"{offset}b{bucket}", n) for bucket, n in self.buckets.items())
        return {name: n for name, n in found.items() if n}


@dataclass(frozen=True)
class MinuteHealth:
    """One minute of an endpoint's attempts, every worker's summed; ``start`` Unix seconds."""

    start: float
    delivered: int = 0
    failed: int = 0
    buckets: dict[int, int] = field(default_factory=dict)

    @property
    def attempts(self) -> int:
        return self.delivered + self.failed

    @property
    def success_rate(self) -> float | None:
        return self.delivered / self.attempts if self.attempts else None

    @property
    def p50(self) -> float | None:
        return latency.percentile(self.buckets, 0.50)

    @property
    def p95(self) -> float | None:
        return latency.percentile(self.buckets, 0.95)


@dataclass(frozen=True)
class SeenAttempt(AttemptRecord):
    """One attempt as an endpoint's latest attempts keep it: the event's attempt record (the
    response excerpt already redacted and cut by the engine: ``hookline.delivery.engine``)
    and the event's id."""

    event_id: str = ""

    @classmethod
    def of(cls, event_id: str, record: AttemptRecord) -> SeenAttempt:
        return cls(attempt=record.attempt, at=record.at, outcome=record.outcome,
                   status=record.status, latency=record.latency, error=record.error,
                   response=record.response, event_id=event_id)

    def json_fields(self) -> dict[str, Any]:
        return {**super().json_fields(), "event_id": self.event_id}

    @classmethod
    def from_json(cls, text: str) -> SeenAttempt | None:  # type: ignore[override]
        """None for an entry that is not one (damaged, or from another version)."""
        try:
            data = json.loads(text)
            return cls(at=float(data["at"]), event_id=str(data["event_id"]),
                       attempt=int(data.get("attempt") or 0), outcome=str(data["outcome"]),
                       status=None if data.get("status") is None else int(data["status"]),
                       latency=float(data.get("latency") or 0),
                       error=str(data.get("error") or ""),
                       response=str(data.get("response") or ""))
        except (ValueError, TypeError, KeyError):
            return None


@dataclass
class HealthBatch:
    """What one worker process counted since its last write: per (endpoint, minute) counts,
    each endpoint's latest attempts (at most :data:`ATTEMPTS_KEPT`, oldest first) and its
    latest failure."""

    minutes: dict[tuple[str, int], MinuteCounts] = field(default_factory=dict)
    attempts: dict[str, list[SeenAttempt]] = field(default_factory=dict)
    failures: dict[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.minutes or self.attempts)

    def add(self, endpoint_id: str, seen: SeenAttempt) -> None:
        delivered = seen.outcome == "delivered"
        key = (endpoint_id, int(seen.at // 60))
        counts = self.minutes.get(key)
        if counts is None:
            counts = self.minutes[key] = MinuteCounts()
        counts.add(delivered, seen.latency)
        kept = self.attempts.setdefault(endpoint_id, [])
        kept.append(seen)
        if len(kept) > ATTEMPTS_KEPT:
            del kept[0]
        if not delivered:
            self.failures[endpoint_id] = max(seen.at, self.failures.get(endpoint_id, 0.0))

    def merge_older(self, older: HealthBatch, *, most_minutes: int, most_endpoints: int,
                    oldest_minute: int) -> int:
        """Put back ``older`` (a batch whose write failed) under this newer one, within the
        bounds: minutes before ``oldest_minute`` and past ``most_minutes`` pairs, and
        attempts of more than ``most_endpoints`` endpoints, are dropped. Returns how many
        (endpoint, minute) counts were dropped."""
        dropped = 0
        for key, counts in older.minutes.items():
            if key in self.minutes:
                self.minutes[key].merge(counts)
            elif key[1] >= oldest_minute and len(self.minutes) < most_minutes:
                self.minutes[key] = counts
            else:
                dropped += 1
        for endpoint_id, seen in older.attempts.items():
            newer = self.attempts.get(endpoint_id)
            if newer is not None:
                self.attempts[endpoint_id] = [*seen, *newer][-ATTEMPTS_KEPT:]
            elif len(self.attempts) < most_endpoints:
                self.attempts[endpoint_id] = seen
        for endpoint_id, at in older.failures.items():
            self.failures[endpoint_id] = max(at, self.failures.get(endpoint_id, 0.0))
        return dropped


def write(client: Any, batch: HealthBatch, *, trim_failing_before: float | None = None
          ) -> int:
    """Write ``batch`` in one pipelined round trip (no transaction: every key is its own
    endpoint's or the failing set). ``trim_failing_before``: also drop failing-set members
    older than that (Unix seconds). Returns the commands sent."""
    pipe = client.pipeline(transaction=False)
    slabs: set[tuple[str, int]] = set()
    for (endpoint_id, minute), counts in sorted(batch.minutes.items()):
        key = slab_key(endpoint_id, slab_of(minute))
        for name, n in counts.fields(minute).items():
            pipe.hincrby(key, name, n)
        slabs.add((endpoint_id, slab_of(minute)))
    for endpoint_id, slab in sorted(slabs):
        pipe.expireat(slab_key(endpoint_id, slab), slab * 60 + SLAB_TTL)
    for endpoint_id, seen in sorted(batch.attempts.items()):
        key = attempts_key(endpoint_id)
        pipe.lpush(key, *(item.to_json() for item in seen[-ATTEMPTS_KEPT:]))
        pipe.ltrim(key, 0, ATTEMPTS_KEPT - 1)
        pipe.expire(key, ATTEMPTS_TTL)
    if batch.failures:
        pipe.zadd(FAILING_KEY, batch.failures, gt=True)
    if trim_failing_before is not None:
        pipe.zremrangebyscore(FAILING_KEY, "-inf", f"({trim_failing_before}")
    sent = len(pipe)
    if sent:
        pipe.execute()
    return sent


def _minute_health(minute: int, data: dict[str, Any]) -> MinuteHealth:
    offset = minute - slab_of(minute)
    prefix = f"{offset}b"
    buckets = {int(name[len(prefix):]): int(n) for name, n in data.items()
               if name.startswith(prefix) and name[len(prefix):].isdigit()}
    return MinuteHealth(start=minute * 60.0, delivered=int(data.get(f"{offset}d") or 0),
                        failed=int(data.get(f"{offset}f") or 0), buckets=buckets)


class HealthReader:
    """Read what the workers' health tallies wrote."""

    def __init__(self, redis_client: Any) -> None:
        self.redis = redis_client

    def minutes(self, endpoint_id: str, first: int, last: int) -> list[MinuteHealth]:
        """Minutes ``first`` .. ``last`` (Unix minutes) of one endpoint, oldest first, each
        minute no attempt was written for empty: one HGETALL per slab, one round trip."""
        slabs = list(range(slab_of(first), slab_of(last) + 1, SLAB_MINUTES))
        pipe = self.redis.pipeline(transaction=False)
        for slab in slabs:
            pipe.hgetall(slab_key(endpoint_id, slab))
        found = dict(zip(slabs, pipe.execute(), strict=True))
        return [_minute_health(minute, found[slab_of(minute)])
                for minute in range(first, last + 1)]

    def attempts(self, endpoint_id: str, limit: int = ATTEMPTS_KEPT) -> list[SeenAttempt]:
        """The endpoint's latest attempts, newest first."""
        listed = self.redis.lrange(attempts_key(endpoint_id), 0, max(0, limit - 1))
        found = [SeenAttempt.from_json(text) for text in listed]
        return sorted((seen for seen in found if seen is not None),
                      key=lambda seen: seen.at, reverse=True)

    def failing(self, since: float) -> list[tuple[str, float]]:
        """Endpoints with a failed attempt written since ``since`` (Unix seconds), the latest
        failure first, with its time."""
        found = self.redis.zrevrangebyscore(FAILING_KEY, "+inf", since, withscores=True)
        return [(str(endpoint_id), float(at)) for endpoint_id, at in found]

