"""The gates every send passes: one Lua script before (admit), one after (settle).

Admit, in order: an event id bound to another content is a conflict (the id is an
idempotency key, ``hookline.core.identity``); an event already delivered is not sent again
(the idempotency ``done`` marker); a removed or disabled endpoint gets nothing; an event
another worker is sending waits (the in-flight lease); an open circuit breaker, a half-open
one whose single probe is out, a Retry-After block or a spent rate budget defer the event (not
an attempt: it consumes no retry).
Settle records the outcome: done marker, breaker failure count and state, Retry-After block,
and the attempt in the event's history and the endpoint's recent record
(``hookline.store.history``).

Each is one Redis round trip on Redis server time, and every key it touches carries the
endpoint's hash tag, so it runs on one Redis Cluster slot. Workers share one view of each
receiver whatever their number.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hookline.core.config import settings
from hookline.core.endpoint import Endpoint, SealedRecordError
from hookline.core.logs import log_event
from hookline.core.messages import DELIVERY_QUEUE
from hookline.store import connection as store
from hookline.store import disabled, event_log, keys
from hookline.store.delivery import delivered
from hookline.store.history import (
    OUTCOME_LETTERS,
    RECENT_ATTEMPTS,
    AttemptRecord,
)
from hookline.store.lua import ADMIT, RELEASE_DEAD, SETTLE


class Verdict(enum.StrEnum):
    ADMITTED = "admitted"
    CONFLICT = "conflict"
    DUPLICATE = "duplicate"
    MISSING = "missing"
    DISABLED = "disabled"
    BUSY = "busy"
    DEFERRED = "deferred"
    POISON = "poison"
    CAPPED = "capped"
    #: Admitted, but the endpoint's secrets do not open (``SealedRecordError``): the lease is
    #: given back and nothing is sent.
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    endpoint: Endpoint | None = None
    #: For BUSY and DEFERRED: seconds until it is worth asking again.
    wait: float = 0.0
    #: For DEFERRED: breaker_open, breaker_probe, blocked, rate_limited or out_of_turn; for
    #: DISABLED and POISON: why.
    detail: str = ""
    #: For ADMITTED to an ordered endpoint: the delivery's place in its key's line.
    sequence: int | None = None
    #: For DEFERRED by the rate limit: the slot booked for this event (ms of Redis time).
    rate_slot: int = 0
    #: For ADMITTED: this attempt is the half-open breaker's single probe.
    probe: bool = False
    #: A breaker state this call moved the endpoint to ("half_open", "opened", "closed").
    transition: str = ""
    #: For ADMITTED: Redis time (ms) the gates were passed at, and this process's monotonic
    #: clock then (settle's time is that plus the attempt's duration: no TIME call there).
    redis_ms: int = 0
    monotonic: float = 0.0

    def redis_now_ms(self) -> int:
        """Redis time now, from the admit's and the time passed since (0 if unknown)."""
        if not self.redis_ms:
            return 0
        return self.redis_ms + round((time.monotonic() - self.monotonic) * 1000)


@dataclass(frozen=True)
class Settlement:
    #: The attempt still held its lease (False: it ran out and another attempt may be running).
    held_lease: bool
    transition: str = ""
    #: The outcome was refused, nothing written: the message had been restored to another
    #: worker (this process was declared dead meanwhile, hookline/transport/liveness.py).
    fenced: bool = False


@dataclass(frozen=True)
class Receipt:
    """What acknowledges the broker message an attempt runs for, folded into its settle: its
    member ``member`` of the broker's unacked records set ``records_key`` (the broker is this
    Redis). settle.lua takes the set after its own keys and the member after its own
    arguments: an outcome for a message whose member is gone is refused (``fenced``: it was
    restored to another worker), and a delivered one removes the member, acknowledging the
    message in the same atomic step. Plain data: the transport makes it
    (``hookline.transport.ledger``) and reads the :class:`Settlement`."""

    records_key: str
    member: bytes


@dataclass(frozen=True)
class BreakerStatus:
    """One endpoint's shared gate state, as ``hookline breaker status`` shows it."""

    endpoint_id: str
    state: str
    failures: int
    #: Unix seconds; None when not applicable.
    open_until: float | None
    blocked_until: float | None
    cooldown: float


#: The breaker's own fields in its hash (the rate limiter's, tat and book, share it).
BREAKER_FIELDS = ("state", "failures", "cooldown_ms", "open_until", "opened_at", "probe_until",
                  "probe_token", "blocked_until")


_SHARED: dict[str, Gate] = {}
#: Called with (endpoint id, event id, record) after every settled attempt that was not
#: fenced: in memory only (the worker's health tally, ``hookline.worker.health``). An
#: observer's error is logged, never raised into the delivery.
ATTEMPT_OBSERVERS: list[Callable[[str, str, AttemptRecord], None]] = []


def _observe(endpoint_id: str, event_id: str, record: AttemptRecord) -> None:
    for observer in ATTEMPT_OBSERVERS:
        try:
            observer(endpoint_id, event_id, record)
        except Exception as exc:
            log_event("attempt.observer_failed", level=logging.WARNING,
                      error=type(exc).__name__)


_DELIVERY_DOORBELL = keys.doorbell_key(DELIVERY_QUEUE)


def _keys(endpoint_id: str, event_id: str) -> dict[str, str]:
    # The endpoint's hash holds its breaker, limiter and recent record too (keys.breaker_key).
    return {"endpoint": keys.endpoint_key(endpoint_id),
            "record": keys.delivery_key(endpoint_id, event_id)}


class Gate:
    """Admit and settle attempts for (endpoint, event) pairs; read and reset breakers.

    ``doorbell``: admit and settle ring the consume doorbell when they free a slot or move an
    ordered line, which they can only where this Redis is the broker too (the default; the
    delivery engine passes ``BrokerFace.doorbell``). Otherwise each touches one slot."""

    def __init__(self, redis_client: Any = None, *, doorbell: bool = True) -> None:
        self.redis: Any = redis_client or store.client()
        self.doorbell = doorbell
        self._admit = ADMIT.register(self.redis)
        self._settle = SETTLE.register(self.redis)
        self._release_dead: Any = None
        self._event_log: event_log.EventLog | None = None

    def _log(self) -> event_log.EventLog:
        """The event log's writer, for a Redis Cluster's second step (see ``settle``)."""
        if self._event_log is None:
            self._event_log = event_log.EventLog(self.redis)
        return self._event_log

    @classmethod
    def shared(cls) -> Gate:
        """One gate per process for the transport's occasional calls (release_dead)."""
        gate = _SHARED.get("gate")
        if gate is None:
            gate = _SHARED["gate"] = cls()
        return gate

    def release_dead(self, endpoint_id: str, event_id: str, prefix: str) -> bool:
        """Release the lease a dead process's attempt (its attempt tokens start with
        ``prefix``) holds on the event, giving back the endpoint's in-flight count."""
        if self._release_dead is None:
            self._release_dead = RELEASE_DEAD.register(self.redis)
        return bool(self._release_dead(
            record=keys.delivery_key(endpoint_id, event_id),
            endpoint=keys.endpoint_key(endpoint_id), leases=keys.leases_key(endpoint_id),
            prefix=prefix))

    def admit(self, endpoint_id: str, event_id: str, token: str, *, rate_slot: int = 0,
              digest: str = "", ordering_key: str | None = None) -> Admission:
        """Pass the gates or say why not. ``digest`` (``hookline.core.identity``) binds the
        event id to its content: another content under a bound id is ``CONFLICT``."""
        config = settings()
        reply = self._admit.call(
            **_keys(endpoint_id, event_id), old_done=keys.done_key(endpoint_id, event_id),
            old_digest=keys.digest_key(endpoint_id, event_id),
            leases=keys.leases_key(endpoint_id),
            # an ordered key's line moves on a duplicate head (one slot otherwise)
            doorbell=_DELIVERY_DOORBELL if self.doorbell else None,
            token=token,
            lease_ms=math.ceil(config.lease_seconds(0) * 1000),
            max_starts=config.max_unsettled_starts,
            starts_ttl=math.ceil(config.visibility_timeout * 4),
            rate_slot=int(rate_slot or 0),
            read_timeout_ms=math.ceil(config.read_timeout * 1000),
            digest=digest,
            record_ttl=config.record_ttl,
            ordering_key=ordering_key or endpoint_id,
            event_id=event_id,
        )
        verdict = Verdict(reply[0])
        if verdict is Verdict.ADMITTED:
            fields = dict(zip(reply[4::2], reply[5::2], strict=True))
            head = fields.pop("order_head", None)
            try:
                endpoint = Endpoint.from_hash(endpoint_id, fields)
            except SealedRecordError as exc:
                self.release_dead(endpoint_id, event_id, token)  # this attempt's own lease
                return Admission(Verdict.UNREADABLE, detail=str(exc))
            return Admission(verdict, endpoint=endpoint,
                             sequence=int(head.rpartition("\n")[2]) if head else None,
                             transition=reply[1], probe=reply[2] == "1",
                             redis_ms=int(reply[3]), monotonic=time.monotonic())
        if verdict is Verdict.DEFERRED:
            return Admission(verdict, detail=reply[1], wait=int(reply[2]) / 1000.0,
                             rate_slot=int(reply[3]))
        if verdict is Verdict.BUSY:
            return Admission(verdict, wait=int(reply[1]) / 1000.0)
        if verdict is Verdict.DISABLED:
            disabled.mark(self.redis, endpoint_id, keep_first=True)  # see store/disabled.py
            return Admission(verdict, detail=str(reply[1]))
        if verdict is Verdict.CAPPED:
            return Admission(verdict, detail=f"{reply[1]} attempts in flight")
        if verdict is Verdict.POISON:
            return Admission(verdict, detail=f"{reply[1]} attempts started and never finished")
        return Admission(verdict)

    def settle(
        self,
        endpoint_id: str,
        event_id: str,
        token: str,
        outcome: str,
        *,
        retry_after: float | None = None,
        reason: str = "",
        record: AttemptRecord | None = None,
        digest: str = "",
        now_ms: int = 0,
        receipt: Receipt | None = None,
        ordering_key: str | None = None,
        event_type: str = "",
    ) -> Settlement:
        """Record ``outcome``: delivered, rejected, failed, throttled or gone (see settle.lua).

        ``retry_after`` (seconds, already capped) blocks the whole endpoint until then.
        ``record`` goes into the event's attempt history and the endpoint's recent record.
        ``digest``: the event's content digest, kept as long as the done marker on delivery.
        ``now_ms``: Redis time now (:meth:`Admission.redis_now_ms`), 0 to read it in the script.
        ``receipt``: what acknowledges the attempt's message, when the transport folds that
        into the settle (:class:`Receipt`): an outcome for a message restored to another
        worker is refused (``fenced``), and a delivered one acknowledges it in the same step
        (the returned :class:`Settlement` says which).
        ``ordering_key``: an ordered endpoint's delivery's key (the endpoint id by default): a
        delivered head lets the next of its key go, in the same step.
        ``event_type``: the event's, for its row in the event log (``hookline.store.event_log``,
        written here with ``record``: delivered, else retrying).
        """
        config = settings()
        age_ms, most = event_log.log_args()
        shard_prefix = event_log.inline_prefix(endpoint_id, config.state_shards)
        # the member (the fence), and '1' to remove it only for a delivered outcome: any other
        # leaves the message to Celery's ack or reject
        records, member, acknowledge = ((receipt.records_key, receipt.member,
                                         "1" if outcome == "delivered" else "0")
                                        if receipt is not None else (None, "", ""))
        reply = self._settle.call(
            **_keys(endpoint_id, event_id), history=keys.history_key(endpoint_id, event_id),
            leases=keys.leases_key(endpoint_id),
            # the doorbell only where the broker is this Redis (one slot otherwise)
            doorbell=_DELIVERY_DOORBELL if self.doorbell else keys.endpoint_key(endpoint_id),
            records=records,
            token=token,
            outcome=outcome,
            record_ttl=config.record_ttl,
            reason=reason,
            retry_after_ms=math.ceil((retry_after or 0) * 1000),
            breaker_threshold=config.breaker_threshold,
            cooldown_ms=math.ceil(config.breaker_cooldown * 1000),
            max_cooldown_ms=math.ceil(config.breaker_max_cooldown * 1000),
            attempt_record=record.to_json() if record else "",
            event_id=event_id,
            letter=OUTCOME_LETTERS.get(outcome, "?"),
            last_error="" if outcome == "delivered" or record is None else record.summary(),
            history_attempts=config.history_attempts,
            history_ttl=config.history_lifetime,
            recent_attempts=RECENT_ATTEMPTS,
            digest=digest,
            now_ms=int(now_ms or 0),
            history_in_record="1" if config.history_in_record else "0",
            member=member, acknowledge=acknowledge,
            ordering_key=ordering_key or "",
            log_prefix=event_log.endpoint_prefix(endpoint_id) if record is not None else "",
            log_shard_prefix=shard_prefix, endpoint_id=endpoint_id, event_type=event_type,
            attempt_number=record.attempt if record else 0,
            status=(record.status or 0) if record else 0, log_age_ms=age_ms, log_rows=most,
        )
        held, transition, fenced = reply[:3]
        if record is not None and not fenced and not shard_prefix:
            self._log().index_after_settle(endpoint_id, event_id, outcome, event_type, reply)
        if outcome == "gone" and not fenced:
            disabled.mark(self.redis, endpoint_id)  # settle.lua disabled it (store/disabled.py)
        if record is not None and not fenced:
            _observe(endpoint_id, event_id, record)
        return Settlement(held_lease=bool(held), transition=transition, fenced=bool(fenced))

    def in_flight(self, endpoint_id: str, *, waiting: bool = True) -> tuple[int, int]:
        """``(attempts in flight, deliveries waiting for their share or the cap)`` of one
        endpoint across all workers. The waiting ones live beside the broker's queues, so
        they are counted only with ``waiting``, where the broker is this Redis (the caller
        says: ``BrokerFace.fair_waiting``); 0 otherwise."""
        inflight = int(self.redis.hget(keys.endpoint_key(endpoint_id), "inflight") or 0)
        count = int(self.redis.llen(keys.fair_waiting_key(endpoint_id))) if waiting else 0
        return inflight, count

    def is_delivered(self, endpoint_id: str, event_id: str) -> bool:
        return delivered(self.redis, [(endpoint_id, event_id)])[0]

    def redis_now_ms(self) -> int:
        """Redis time, milliseconds. TIME is keyless: read on its own, never in a pipeline
        (a cluster pipeline cannot route it)."""
        return int(store.redis_time(self.redis) * 1000)

    def breaker_status(self, endpoint_id: str, *, now_ms: int | None = None) -> BreakerStatus:
        """``now_ms``: Redis time (:meth:`redis_now_ms`), read here when not given."""
        data = self.redis.hgetall(keys.breaker_key(endpoint_id))
        now_ms = self.redis_now_ms() if now_ms is None else now_ms
        return _breaker_status(endpoint_id, data, now_ms)

    def breaker_statuses(self, endpoint_ids: list[str], *,
                         now_ms: int | None = None) -> list[BreakerStatus]:
        """The breakers of ``endpoint_ids`` in their order, read in one pipelined round trip
        (a breaker each, its own fields only) against one Redis time: a listing of thousands
        of endpoints costs one wait for Redis, not one per endpoint."""
        if not endpoint_ids:
            return []
        now_ms = self.redis_now_ms() if now_ms is None else now_ms
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in endpoint_ids:
            pipe.hmget(keys.breaker_key(endpoint_id), STATUS_FIELDS)
        return [_breaker_status(endpoint_id, dict(zip(STATUS_FIELDS, values, strict=True)),
                                now_ms)
                for endpoint_id, values in zip(endpoint_ids, pipe.execute(), strict=True)]

    def reset_breaker(self, endpoint_id: str) -> None:
        """Close the breaker and lift any Retry-After block: the operator vouches for it. The
        rate limiter's fields in the same hash stay: a reset grants no extra burst."""
        self.redis.hdel(keys.breaker_key(endpoint_id), *BREAKER_FIELDS)


#: The fields a :class:`BreakerStatus` is made of.
STATUS_FIELDS = ("state", "failures", "open_until", "blocked_until", "cooldown_ms")


def _breaker_status(endpoint_id: str, data: dict[str, Any], now_ms: int) -> BreakerStatus:
    """A breaker's status from its hash's fields (a missing one: None or absent)."""

    def future(field: str) -> float | None:
        value = float(data.get(field) or 0)
        return value / 1000.0 if value > now_ms else None

    return BreakerStatus(
        endpoint_id=endpoint_id,
        state=data.get("state") or "closed",
        failures=int(data.get("failures") or 0),
        open_until=future("open_until"),
        blocked_until=future("blocked_until"),
        cooldown=float(data.get("cooldown_ms") or 0) / 1000.0,
    )
