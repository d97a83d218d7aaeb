"""Published events and their fan-out's progress (``hookline.publish``).

One hash per published event under its application's hash tag
(``hookline:{app:<id>}:published:<event id>``): the event's type, payload, channels and
deadline, the receivers fixed at publish (endpoint ids, in the order their deliveries are
enqueued) and the cursor: how many of them have had their delivery enqueued. Recording it is
one atomic script that refuses a used id with other content and records nothing new for the
same content; the cursor only moves forward. Kept as long as a done marker
(``HOOKLINE_MAX_AGE`` + ``HOOKLINE_REPLAY_HORIZON``), the payload only until the fan-out ends.
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass
from typing import Any

from hookline.core.config import settings
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.lua import ADVANCE_FANOUT, PUBLISH_EVENT, PUSH_FANOUT


class Recorded(enum.StrEnum):
    #: No such application.
    MISSING = "missing"
    #: The event id was published with other content.
    CONFLICT = "conflict"
    #: Published already with this content: nothing new recorded.
    SAME = "same"
    #: Recorded now.
    NEW = "new"


@dataclass(frozen=True)
class PublishedEvent:
    """A published event's record. ``payload`` is its compact JSON, or None once the fan-out
    has ended (every delivery carries its own copy)."""

    app_id: str
    event_id: str
    event_type: str
    payload: str | None
    channels: tuple[str, ...]
    deadline: float | None
    receivers: tuple[str, ...]
    cursor: int
    published_at: float
    finished_at: float | None
    #: The ordering key given at publish (ordered endpoints' lines).
    ordering_key: str | None = None
    #: The ordered receivers, whose deliveries ``publish`` enqueues itself, in publish order
    #: (``lined_done`` once it has; the fan-out task does it when a publisher died first).
    lined: tuple[str, ...] = ()
    lined_done: bool = False

    @property
    def finished(self) -> bool:
        return self.cursor >= len(self.receivers) and (self.lined_done or not self.lined)

    def to_fields(self) -> dict[str, str]:
        return {
            "type": self.event_type,
            "payload": self.payload or "",
            "channels": json.dumps(list(self.channels)),
            "deadline": "" if self.deadline is None else repr(self.deadline),
            "receivers": json.dumps(list(self.receivers)),
            "total": str(len(self.receivers)),
            "cursor": str(self.cursor),
            "published_at": repr(self.published_at),
            "ordering_key": self.ordering_key or "",
            "lined": json.dumps(list(self.lined)),
        }

    @classmethod
    def from_hash(cls, app_id: str, event_id: str, data: dict[str, str]) -> PublishedEvent:
        return cls(
            app_id=app_id,
            event_id=event_id,
            event_type=data["type"],
            payload=data.get("payload") or None,
            channels=tuple(json.loads(data.get("channels") or "[]")),
            deadline=float(data["deadline"]) if data.get("deadline") else None,
            receivers=tuple(json.loads(data.get("receivers") or "[]")),
            cursor=int(data.get("cursor") or 0),
            published_at=float(data.get("published_at") or 0),
            finished_at=float(data["finished_at"]) if data.get("finished_at") else None,
            ordering_key=data.get("ordering_key") or None,
            lined=tuple(json.loads(data.get("lined") or "[]")),
            lined_done=data.get("lined_done") == "1",
        )

    def public(self) -> dict[str, Any]:
        return {"app": self.app_id, "event_id": self.event_id, "event_type": self.event_type,
                "channels": list(self.channels), "deadline": self.deadline,
                "receivers": [*self.lined, *self.receivers], "enqueued": self.cursor + (
                    len(self.lined) if self.lined_done else 0),
                "published_at": self.published_at, "finished_at": self.finished_at}


@dataclass(frozen=True)
class Outcome:
    """What :meth:`FanoutLog.record` found: ``cursor`` and ``total`` when recorded."""

    result: Recorded
    cursor: int = 0
    total: int = 0


class FanoutLog:
    """Published events' records (see the module docstring)."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()
        self._record = PUBLISH_EVENT.register(self.redis)
        self._advance = ADVANCE_FANOUT.register(self.redis)
        self._push = PUSH_FANOUT.register(self.redis)

    def record(self, event: PublishedEvent, digest: str) -> Outcome:
        """Record ``event`` unless its id is taken (one round trip)."""
        flat = [item for pair in event.to_fields().items() for item in pair]
        reply = self._record(
            app=keys.app_key(event.app_id),
            published=keys.published_key(event.app_id, event.event_id), digest=digest,
            ttl=settings().done_ttl, fields=flat)
        result = Recorded(reply[0])
        if result in (Recorded.SAME, Recorded.NEW):
            return Outcome(result, int(reply[1] or 0), int(reply[2] or 0))
        return Outcome(result)

    def get(self, app_id: str, event_id: str) -> PublishedEvent | None:
        data = self.redis.hgetall(keys.published_key(app_id, event_id))
        return PublishedEvent.from_hash(app_id, event_id, data) if data else None

    def mark_lined(self, app_id: str, event_id: str) -> None:
        """Record that the ordered receivers' deliveries are enqueued."""
        self.redis.hset(keys.published_key(app_id, event_id), "lined_done", "1")

    def advance(self, app_id: str, event_id: str, cursor: int, total: int) -> int:
        """Record that the first ``cursor`` receivers' deliveries are enqueued."""
        return int(self._advance(published=keys.published_key(app_id, event_id),
                                 cursor=cursor, total=total, now=repr(time.time())))

    def push(self, app_id: str, event_id: str, cursor: int, total: int, messages: list[str],
             *, queue: str) -> int:
        """Push ``messages`` (broker messages of the receivers from ``cursor`` on) onto
        ``queue`` in this Redis and move the cursor past them, atomically, unless the cursor
        is no longer ``cursor``; returns the cursor now recorded."""
        return int(self._push(
            published=keys.published_key(app_id, event_id), queue=queue,
            doorbell=keys.doorbell_key(queue), cursor=cursor, total=total,
            now=repr(time.time()), messages=messages))

    # -- fan-outs not known to be finished (keys.FANOUTS_PENDING_KEY) ----------------------

    @staticmethod
    def _member(app_id: str, event_id: str) -> str:
        return json.dumps([app_id, event_id], separators=(",", ":"))

    def mark_pending(self, app_id: str, event_id: str, look_at: float) -> None:
        """Note that the fan-out of ``event_id`` must be looked at ``look_at`` (Unix seconds)
        unless it has finished by then (one round trip; kept when already marked earlier)."""
        self.redis.zadd(keys.FANOUTS_PENDING_KEY, {self._member(app_id, event_id): look_at},
                        nx=True)

    def forget_pending(self, app_id: str, event_id: str) -> None:
        self.redis.zrem(keys.FANOUTS_PENDING_KEY, self._member(app_id, event_id))

    def due_pending(self, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """Up to ``limit`` (app id, event id) whose time to be looked at has come."""
        found = []
        for member in self.redis.zrangebyscore(keys.FANOUTS_PENDING_KEY, "-inf", now,
                                               start=0, num=limit):
            try:
                app_id, event_id = json.loads(member)
            except (ValueError, TypeError):
                self.redis.zrem(keys.FANOUTS_PENDING_KEY, member)  # not ours: dropped
                continue
            found.append((str(app_id), str(event_id)))
        return found

    def postpone_pending(self, app_id: str, event_id: str, look_at: float) -> bool:
        """Move the fan-out's next look to ``look_at`` if no other releaser did already;
        True for the one that moved it (it re-queues the fan-out)."""
        return bool(self.redis.zadd(keys.FANOUTS_PENDING_KEY,
                                    {self._member(app_id, event_id): look_at},
                                    xx=True, gt=True, ch=True))

    def find(self, event_id: str) -> list[PublishedEvent]:
        """Every application's record of ``event_id``: a keyspace scan (an operator's
        command, not a hot path)."""
        found = []
        for key in self.redis.scan_iter(match=keys.published_pattern(event_id), count=1000):
            match = keys.PUBLISHED_KEY.match(key)
            if match and match["event"] == event_id:
                record = self.get(match["app"], event_id)
                if record is not None:
                    found.append(record)
        return found
