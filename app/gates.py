"""The gates every send passes: one Lua script before (admit), one after (settle).

Admit reads the endpoint, refuses an event already delivered (the idempotency ``done`` marker),
defers one another worker is sending (the in-flight lease) and takes the lease; settle records
the outcome. Each is one Redis round trip, and every key it touches shares the endpoint's hash
tag, so it runs on one Redis Cluster slot.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from app import store
from app.config import settings
from app.endpoints import Endpoint


class Verdict(enum.StrEnum):
    ADMITTED = "admitted"
    DUPLICATE = "duplicate"
    MISSING = "missing"
    DISABLED = "disabled"
    BUSY = "busy"
    POISON = "poison"


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    endpoint: Endpoint | None = None
    #: For BUSY: seconds until the other holder's lease expires.
    wait: float = 0.0
    detail: str = ""


def _keys(endpoint_id: str, event_id: str) -> list[str]:
    return [
        store.endpoint_key(endpoint_id),
        store.done_key(endpoint_id, event_id),
        store.lease_key(endpoint_id, event_id),
        store.starts_key(endpoint_id, event_id),
    ]


class Gate:
    """Admit and settle attempts for (endpoint, event) pairs."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()
        self._admit = self.redis.register_script(store.load_script("admit"))
        self._settle = self.redis.register_script(store.load_script("settle"))

    def admit(self, endpoint_id: str, event_id: str, token: str) -> Admission:
        config = settings()
        reply = self._admit(
            keys=_keys(endpoint_id, event_id),
            args=[
                token,
                math.ceil(config.lease_seconds * 1000),
                config.max_unsettled_starts,
                math.ceil(config.visibility_timeout * 4),
            ],
        )
        verdict = Verdict(reply[0])
        if verdict is Verdict.ADMITTED:
            fields = dict(zip(reply[1::2], reply[2::2], strict=True))
            return Admission(verdict, endpoint=Endpoint.from_hash(endpoint_id, fields))
        if verdict is Verdict.BUSY:
            return Admission(verdict, wait=int(reply[1]) / 1000.0)
        if verdict is Verdict.DISABLED:
            return Admission(verdict, detail=str(reply[1]))
        if verdict is Verdict.POISON:
            return Admission(verdict, detail=f"{reply[1]} attempts started and never finished")
        return Admission(verdict)

    def settle(
        self, endpoint_id: str, event_id: str, token: str, outcome: str, *, reason: str = ""
    ) -> bool:
        """Record ``outcome``: 'delivered', 'failed' or 'gone'. True if the lease was ours."""
        return bool(
            self._settle(
                keys=_keys(endpoint_id, event_id),
                args=[token, outcome, settings().done_ttl, reason],
            )
        )

    def is_delivered(self, endpoint_id: str, event_id: str) -> bool:
        return bool(self.redis.exists(store.done_key(endpoint_id, event_id)))
