"""What became of one event: a view over the attempt history, the idempotency markers, the retry
schedule and the dead-letter queue (``hookline event show``). It reads several stores, so it
sits one step above them; the stores never read each other."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from hookline.core.config import settings
from hookline.store import connection as store
from hookline.store.dead_letter_queue import CONFLICT_SUFFIX, DeadLetter
from hookline.store.delivery import DeliveryRecord
from hookline.store.history import AttemptRecord, attempt_records
from hookline.store.keys import (
    EVENT_KEY,
    dead_letter_shards,
    delivery_key,
    done_key,
    endpoint_shard,
    event_keys_pattern,
    glob_escaped,
    history_key,
    schedule_shards,
)


@dataclass(frozen=True)
class EventDelivery:
    """What became of one event at one endpoint, and its attempts."""

    endpoint_id: str
    event_id: str
    #: delivered, dead_lettered, scheduled (a retry waits in the schedule), in_flight (an
    #: attempt holds the lease) or pending (nothing recorded: waiting in a queue, or unknown).
    state: str
    attempts: list[AttemptRecord]
    dead_letter: DeadLetter | None = None
    #: Unix seconds (Redis time) when the scheduled retry is due.
    retry_due: float | None = None
    #: The latest copy sent under this event id with another content, dead-lettered
    #: (``conflict``); the event's own state is ``state``.
    conflict: DeadLetter | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint_id": self.endpoint_id,
            "event_id": self.event_id,
            "state": self.state,
            "retry_due": self.retry_due,
            "dead_letter": None if self.dead_letter is None else {
                key: value for key, value in json.loads(self.dead_letter.to_json()).items()
                if key != "payload"
            },
            "attempts": [asdict(record) for record in self.attempts],
            "conflict": None if self.conflict is None else {
                key: value for key, value in json.loads(self.conflict.to_json()).items()
                if key != "payload"
            },
        }


class EventView:
    """Reads what became of an event at each endpoint it reached."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def endpoints_of(self, event_id: str) -> list[str]:
        """Endpoints with a trace of ``event_id``: history, done marker, lease, dead letter or
        scheduled retry. Scans the keyspace: an operator's command, not a hot path."""
        found: set[str] = set()
        pattern = event_keys_pattern(event_id)
        for key in self.redis.scan_iter(match=pattern, count=1000):
            match = EVENT_KEY.match(key)
            if match and match["event"] == event_id:
                found.add(match["endpoint"])
        entry_pattern = f"*/{glob_escaped(event_id)}*"
        count = settings().state_shards
        hashes = [*(shard.entries for shard in dead_letter_shards(count)),
                  *(shard.meta for shard in schedule_shards(count))]
        for hash_key in hashes:
            for entry_id, _ in self.redis.hscan_iter(hash_key, match=entry_pattern, count=1000):
                endpoint_id, _, event = entry_id.partition("/")
                if event in (event_id, event_id + CONFLICT_SUFFIX):
                    found.add(endpoint_id)
        return sorted(found)

    def delivery(self, endpoint_id: str, event_id: str) -> EventDelivery:
        """The attempts of ``event_id`` at ``endpoint_id`` and what became of it."""
        entry_id = f"{endpoint_id}/{event_id}"
        count = settings().state_shards
        shard = endpoint_shard(endpoint_id, count)
        schedule, dlq = schedule_shards(count)[shard], dead_letter_shards(count)[shard]
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(history_key(endpoint_id, event_id), 0, -1)
        pipe.get(delivery_key(endpoint_id, event_id))
        pipe.get(done_key(endpoint_id, event_id))
        pipe.zscore(schedule.due, entry_id)
        pipe.hexists(schedule.meta, entry_id)
        pipe.hmget(dlq.entries, [entry_id, entry_id + CONFLICT_SUFFIX])
        records, text, done_before, due, scheduled, (own, conflict) = pipe.execute()
        record = DeliveryRecord.parse(text)
        # A lease's end is Redis time: compared with this reader's clock, within a second.
        leased = bool(record.lease_token) and record.lease_until / 1000.0 > time.time() - 1
        dead_letter = DeadLetter.from_json(own) if own else None
        if record.done or done_before:
            state = "delivered"
        elif dead_letter is not None:
            state = "dead_lettered"
        elif scheduled:
            state = "scheduled"
        elif leased:
            state = "in_flight"
        else:
            state = "pending"
        return EventDelivery(
            endpoint_id=endpoint_id,
            event_id=event_id,
            state=state,
            attempts=attempt_records(records, record),
            dead_letter=dead_letter,
            # A retry claimed by a releaser for another broker has left the due set.
            retry_due=due / 1000.0 if scheduled and due else None,
            conflict=DeadLetter.from_json(conflict) if conflict else None,
        )
