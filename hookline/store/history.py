"""Attempt history: what each attempt of an event got back, and each endpoint's recent record.

Both are written by ``settle.lua`` in the round trip that already records an attempt's outcome,
so keeping them costs no extra Redis call per attempt. Keys carry the endpoint's hash tag:

- the event's attempts, JSON :class:`AttemptRecord` oldest first, the latest
  ``HOOKLINE_HISTORY_ATTEMPTS``: in the event's delivery record (``hookline.store.delivery``)
  with the default ``HOOKLINE_HISTORY_RETENTION`` (as long as that record, which settle
  writes anyway: no extra command); with a shorter retention, in the list
  ``hookline:{ep}:history:<event>``, which expires that many seconds after the latest attempt.
- the endpoint's recent record, fields of its breaker hash (``hookline:{ep}:breaker``, which
  settle reads anyway; Hookline 0.2 kept them in ``hookline:{ep}:recent``, still read when the
  breaker has none): ``outcomes`` holds one letter per attempt (newest last, the latest
  :data:`RECENT_ATTEMPTS`), then ``last_error``, ``last_error_at``, ``last_error_event`` and
  ``last_success_at`` (milliseconds of Redis time). It lives as long as the endpoint.

:meth:`AttemptHistory.delivery` adds what became of the event (delivered, scheduled for retry,
dead-lettered) for ``hookline event show``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hookline.store import connection as store
from hookline.store.delivery import DeliveryRecord
from hookline.store.keys import breaker_key, delivery_key, history_key, recent_key

#: Attempts an endpoint's success rate is computed over.
RECENT_ATTEMPTS = 100
#: The letter ``outcomes`` records for each settle outcome.
OUTCOME_LETTERS = {"delivered": "d", "failed": "f", "throttled": "t", "rejected": "r",
                   "gone": "g"}
_LETTER_OUTCOMES = {letter: outcome for outcome, letter in OUTCOME_LETTERS.items()}


def excerpt(text: str, limit: int) -> str:
    """The first ``limit`` bytes of ``text`` (UTF-8), never splitting a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of one event, as the history keeps it."""

    attempt: int
    #: Unix seconds (worker clock) when the attempt ended.
    at: float
    #: What settle recorded: delivered, failed, throttled (429), rejected or gone (410).
    outcome: str
    #: None when no response arrived.
    status: int | None
    #: Seconds from sending the request to the end of the (capped) body.
    latency: float
    error: str = ""
    #: The first bytes of the response body.
    response: str = ""

    def summary(self) -> str:
        """``HTTP 503`` or the error, as ``endpoint show`` gives the last error."""
        if self.status is not None:
            return f"HTTP {self.status}"
        return self.error or self.outcome

    def to_json(self) -> str:
        return json.dumps(self.json_fields(), separators=(",", ":"), ensure_ascii=False)

    def json_fields(self) -> dict[str, Any]:
        # The fields by hand, in their order: dataclasses.asdict deep-copies each value, a
        # measurable share of a delivery's CPU.
        return {"attempt": self.attempt, "at": round(self.at, 3), "outcome": self.outcome,
                "status": self.status, "latency": round(self.latency, 4), "error": self.error,
                "response": self.response}

    @classmethod
    def from_json(cls, text: str) -> AttemptRecord:
        data = json.loads(text)
        return cls(**{name: data.get(name) for name in cls.__dataclass_fields__
                      if name in data})


@dataclass(frozen=True)
class RecentAttempts:
    """An endpoint's latest attempts (at most :data:`RECENT_ATTEMPTS`), for ``endpoint show``."""

    endpoint_id: str
    #: One letter per attempt, oldest first (see :data:`OUTCOME_LETTERS`).
    outcomes: str = ""
    last_error: str = ""
    #: Unix seconds (Redis time), None when none was recorded.
    last_error_at: float | None = None
    last_error_event: str = ""
    last_success_at: float | None = None

    @property
    def attempts(self) -> int:
        return len(self.outcomes)

    @property
    def success_rate(self) -> float | None:
        """Share of these attempts that were delivered; None before the first attempt."""
        if not self.outcomes:
            return None
        return self.outcomes.count(OUTCOME_LETTERS["delivered"]) / len(self.outcomes)

    def counts(self) -> dict[str, int]:
        """Attempts by outcome, e.g. ``{"delivered": 97, "failed": 3}``."""
        found: dict[str, int] = {}
        for letter in self.outcomes:
            outcome = _LETTER_OUTCOMES.get(letter, "unknown")
            found[outcome] = found.get(outcome, 0) + 1
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "success_rate": None if self.success_rate is None else round(self.success_rate, 4),
            "by_outcome": self.counts(),
            "last_error": self.last_error or None,
            "last_error_at": self.last_error_at,
            "last_error_event": self.last_error_event or None,
            "last_success_at": self.last_success_at,
        }


#: The recent record's fields in the breaker hash.
RECENT_FIELDS = ("outcomes", "last_error", "last_error_at", "last_error_event",
                 "last_success_at")


def attempt_records(listed: list[str], record: DeliveryRecord) -> list[AttemptRecord]:
    """An event's attempts from the history list (a shorter retention, or Hookline 0.2) and
    its delivery record, oldest first."""
    return [AttemptRecord.from_json(text) for text in [*listed, *record.attempts]]


def _milliseconds(value: str | None) -> float | None:
    return int(value) / 1000.0 if value else None


class AttemptHistory:
    """Read the attempt history and recent records that ``Gate.settle`` writes."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def attempts(self, endpoint_id: str, event_id: str) -> list[AttemptRecord]:
        """The kept attempts of ``event_id`` at ``endpoint_id``, oldest first."""
        return self.attempts_of(endpoint_id, [event_id])[event_id]

    def attempts_of(self, endpoint_id: str, event_ids: list[str]
                    ) -> dict[str, list[AttemptRecord]]:
        """:meth:`attempts` of several events at one endpoint, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for event_id in event_ids:
            pipe.lrange(history_key(endpoint_id, event_id), 0, -1)
            pipe.get(delivery_key(endpoint_id, event_id))
        replies = pipe.execute()
        return {event_id: attempt_records(replies[2 * n], DeliveryRecord.parse(replies[2 * n + 1]))
                for n, event_id in enumerate(event_ids)}

    def latest_of(self, pairs: list[tuple[str, str]]) -> list[AttemptRecord | None]:
        """The latest kept attempt of each ``(endpoint id, event id)`` (None: none kept), in
        one round trip whatever their number."""
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id, event_id in pairs:
            pipe.lindex(history_key(endpoint_id, event_id), -1)
            pipe.get(delivery_key(endpoint_id, event_id))
        replies = pipe.execute() if pairs else []
        found: list[AttemptRecord | None] = []
        for listed, record in zip(replies[::2], replies[1::2], strict=True):
            records = attempt_records([listed] if listed else [], DeliveryRecord.parse(record))
            found.append(records[-1] if records else None)
        return found

    def recent(self, endpoint_id: str) -> RecentAttempts:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(breaker_key(endpoint_id), RECENT_FIELDS)
        pipe.hmget(recent_key(endpoint_id), RECENT_FIELDS)
        current, legacy = pipe.execute()
        data = dict(zip(RECENT_FIELDS, current if current[0] is not None else legacy,
                        strict=True))
        return RecentAttempts(
            endpoint_id=endpoint_id,
            outcomes=data["outcomes"] or "",
            last_error=data["last_error"] or "",
            last_error_at=_milliseconds(data.get("last_error_at")),
            last_error_event=data["last_error_event"] or "",
            last_success_at=_milliseconds(data.get("last_success_at")),
        )
