"""Binding an event id to its content at enqueue (``send_webhook``): one Redis round trip that
also checks that the endpoint exists, so enqueueing costs no more trips than before.

The binding is the ``d`` field of the event's delivery record (``hookline.store.delivery``:
the content digest of ``hookline.core.identity``), kept as long as the done marker; the
worker's admit script applies the same rule to deliveries published without this check
(``hookline.deliver``).
"""

from __future__ import annotations

import enum
import threading
from typing import Any

from hookline.core.config import settings
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.lua import CLAIM


class Claim(enum.StrEnum):
    #: No such endpoint.
    MISSING = "missing"
    #: The id is bound to another content.
    CONFLICT = "conflict"
    #: The id is bound to this content already (a repeated send: one delivery).
    SAME = "same"
    #: The id was free (and is now bound, unless only checked).
    NEW = "new"


#: The task message header that asks Hookline's Redis transport to claim the event id in the
#: publish itself (claim_push.lua: one round trip for send_webhook), its value the digest.
CLAIM_HEADER = "hookline_claim"


class ClaimRefused(Exception):
    """Raised from the publish when the claim carried by :data:`CLAIM_HEADER` was refused
    (unknown endpoint, id bound to another content): nothing was pushed."""

    def __init__(self, claim: Claim) -> None:
        super().__init__(f"event claim refused: {claim.value}")
        self.claim = claim


def claim_keys(endpoint_id: str, event_id: str) -> dict[str, str]:
    """The keys claim.lua and claim_push.lua read and write first, by their names."""
    return {"endpoint": keys.endpoint_key(endpoint_id),
            "record": keys.delivery_key(endpoint_id, event_id),
            "old_digest": keys.digest_key(endpoint_id, event_id)}


class EventClaims:
    """Check, and bind, event ids to their content digests."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()
        self._claim = CLAIM.register(self.redis)

    def claim(self, endpoint_id: str, event_id: str, digest: str, *, bind: bool = True
              ) -> Claim:
        """One round trip: the endpoint exists, and ``event_id`` is free or bound to ``digest``
        (``bind``: bind a free id now; otherwise only check)."""
        reply = self._claim(**claim_keys(endpoint_id, event_id), digest=digest,
                            record_ttl=settings().record_ttl, bind="1" if bind else "0")
        return Claim(reply)


_lock = threading.Lock()
_claims: EventClaims | None = None


def claims(redis_client: Any = None) -> EventClaims:
    """An :class:`EventClaims` on ``redis_client`` (default: this process's client), built once
    per client rather than at every enqueue."""
    global _claims
    client = redis_client or store.client()
    current = _claims
    if current is not None and current.redis is client:
        return current
    with _lock:
        _claims = EventClaims(client)
        return _claims
