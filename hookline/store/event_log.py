"""The event log: recent events at each endpoint, one row per event per endpoint with its
latest status (delivered, retrying, held, dead), for the console's and the portal's Events page.

Written where the change already happens, in the same Redis step where one exists:
``settle.lua`` logs every attempt (delivered, else retrying: no extra round trip); a dead
letter (``DeadLetterQueue``) and a delivery parked behind a held endpoint (the worker's
deferral, the transport's park) log theirs with ``log_event.lua``, one call more on those
rarer paths. The row's time is the latest change (Redis time); it also keeps when the event
was first seen.

Keys (``piece_log.lua`` has the layout), named here rather than in ``keys`` since they are
this store's alone:

- per endpoint (its hash tag): ``hookline:{ep}:log`` (event id -> ms of the latest change) and
  ``hookline:{ep}:log_rows`` (event id -> row);
- per shard (``HOOKLINE_STATE_SHARDS``, the endpoint's shard, hash tag ``{log}`` or
  ``{log:<n>}``): ``ix:<letter>:<type>``, one sorted set of ``<endpoint>/<event>`` per status
  and event type, and ``types``. A page across endpoints merges these (heapq) on read.

On a single Redis the scripts write the shard's index in the same step; on a Redis Cluster
the shard is in another slot, so the caller indexes the row there in a second call, and a
reader skips an index entry whose row says otherwise (moved on, trimmed): the row decides.

Retention (``HOOKLINE_EVENT_LOG_RETENTION``, ``HOOKLINE_EVENT_LOG_PER_ENDPOINT``): each write
trims its endpoint's rows past the count and older than the retention, and its index older
than the retention; an endpoint's keys expire a retention after its latest write; a reader
never shows a row older than the retention.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.store import connection as store
from hookline.store.keys import endpoint_shard, shard_tags

#: The statuses, by the letter a row stores.
STATUS_LETTERS = {"delivered": "d", "retrying": "r", "held": "h", "dead": "x"}
LETTER_STATUSES = {letter: status for status, letter in STATUS_LETTERS.items()}
STATUSES = tuple(STATUS_LETTERS)


def endpoint_prefix(endpoint_id: str) -> str:
    """The prefix of an endpoint's log keys (``log``, ``log_rows``)."""
    return f"hookline:{{{endpoint_id}}}:"


def log_key(endpoint_id: str) -> str:
    return f"{endpoint_prefix(endpoint_id)}log"


def rows_key(endpoint_id: str) -> str:
    return f"{endpoint_prefix(endpoint_id)}log_rows"


@dataclass(frozen=True)
class LogShard:
    """One shard of the event log's indexes."""

    tag: str

    @property
    def prefix(self) -> str:
        return f"hookline:{{{self.tag}}}:"

    @property
    def types(self) -> str:
        return f"{self.prefix}types"

    def index(self, status: str, event_type: str) -> str:
        return f"{self.prefix}ix:{STATUS_LETTERS[status]}:{event_type}"


@functools.cache
def log_shards(count: int) -> tuple[LogShard, ...]:
    return tuple(LogShard(tag) for tag in shard_tags("log", count))


@dataclass(frozen=True)
class LogRow:
    """One event at one endpoint, as the log shows it."""

    endpoint_id: str
    event_id: str
    status: str
    event_type: str
    attempts: int
    #: The last attempt's HTTP status, None when it had no response (or there was none).
    last_status: int | None
    #: Unix seconds (Redis time): first seen, and the latest change (the row's order).
    first_seen: float
    changed_at: float

    @property
    def entry_id(self) -> str:
        return f"{self.endpoint_id}/{self.event_id}"


def parse_row(endpoint_id: str, event_id: str, text: str | bytes | None) -> LogRow | None:
    """A row from its stored JSON, None when missing or unreadable."""
    if not text:
        return None
    try:
        letter, attempts, code, event_type, first, latest = json.loads(text)
        return LogRow(endpoint_id=endpoint_id, event_id=event_id,
                      status=LETTER_STATUSES[letter], event_type=str(event_type),
                      attempts=int(attempts), last_status=int(code) or None,
                      first_seen=int(first) / 1000.0, changed_at=int(latest) / 1000.0)
    except (ValueError, TypeError, KeyError):
        return None


def inline_prefix(endpoint_id: str, count: int) -> str:
    """The prefix of the endpoint's index shard, for a script on the endpoint's slot to write
    the index in the same step; '' on a Redis Cluster (:meth:`EventLog.index` does it then)."""
    if settings().state_is_cluster:
        return ""
    return log_shards(count)[endpoint_shard(endpoint_id, count)].prefix


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def log_text(value: str) -> str:
    """``value`` as the log stores it: a malformed event's lone surrogate (which Redis's UTF-8
    cannot carry; the dead letter keeps the original) as its escape, ``\\udcff``."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def log_args() -> tuple[int, int]:
    """The retention in ms and the most rows per endpoint, from the settings."""
    config = settings()
    return math.ceil(config.event_log_retention * 1000), config.event_log_per_endpoint


class EventLog:
    """Write the log's rows where no script of the step does (held, dead letters, a cluster's
    index step); the reading side is ``hookline.store.event_log_pages``.

    ``shards`` (default ``HOOKLINE_STATE_SHARDS``): how many index shards the log is split
    over."""

    def __init__(self, redis_client: Any = None, *, shards: int | None = None) -> None:
        self.redis: Any = redis_client or store.client()
        self.shards = log_shards(shards or settings().state_shards)
        self._script = self.redis.register_script(store.load_script("log_event"))

    def shard_of(self, endpoint_id: str) -> LogShard:
        return self.shards[endpoint_shard(endpoint_id, len(self.shards))]

    def inline_prefix(self, endpoint_id: str) -> str:
        return inline_prefix(endpoint_id, len(self.shards))

    def record(self, endpoint_id: str, event_id: str, status: str, *, event_type: str = "",
               attempts: int | None = None, last_status: int | None = None,
               at_ms: int = 0) -> None:
        """Log ``status`` for the event at the endpoint at ``at_ms`` (ms of Redis time; 0:
        now). ``event_type`` '' and ``attempts`` or ``last_status`` None keep the row's."""
        age_ms, most = log_args()
        endpoint_id, event_id = log_text(endpoint_id), log_text(event_id)
        event_type = log_text(event_type)
        shard_prefix = self.inline_prefix(endpoint_id)
        args: list[str | int] = ["row", endpoint_prefix(endpoint_id), shard_prefix,
                endpoint_id, event_id, STATUS_LETTERS[status], event_type,
                -1 if attempts is None else attempts,
                -1 if last_status is None else last_status, at_ms, age_ms, most]
        reply = self._script(keys=[log_key(endpoint_id)], args=args)
        if not shard_prefix:
            self.index(endpoint_id, event_id, status, str(reply[0]), int(reply[1]),
                       previous=(reply[2], reply[3]))

    def record_held(self, deliveries: Sequence[tuple[str, str, str]]) -> None:
        """Log ``(endpoint id, event id, event type or '')`` deliveries parked behind their
        held endpoint (paused, breaker open, Retry-After) as held: one pipelined round trip on
        a single Redis."""
        if settings().state_is_cluster:
            for endpoint_id, event_id, event_type in deliveries:
                self.record(endpoint_id, event_id, "held", event_type=event_type)
            return
        age_ms, most = log_args()
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id, event_id, event_type in deliveries:
            self._script(keys=[log_key(endpoint_id)], client=pipe, args=[
                "row", endpoint_prefix(endpoint_id), self.inline_prefix(endpoint_id),
                endpoint_id, event_id, STATUS_LETTERS["held"], event_type, -1, -1, 0,
                age_ms, most])
        pipe.execute()

    def record_dead(self, entries: Sequence[Any], *, pipe: Any = None) -> None:
        """Log dead letters (``dead_letter_queue.DeadLetter``: endpoint, event, type, attempts, last
        status) as dead: queued on ``pipe``, a transaction on a single Redis (the dead letter's
        own, so both are one step), else each in a call of its own (a Redis Cluster). A
        ``conflict`` (another content under a bound id, not sent) is not the event's fate."""
        for entry in entries:
            if entry.reason == "conflict":
                continue
            if pipe is not None and not settings().state_is_cluster:
                age_ms, most = log_args()
                endpoint_id = log_text(entry.endpoint_id)
                self._script(keys=[log_key(endpoint_id)], client=pipe, args=[
                    "row", endpoint_prefix(endpoint_id), self.inline_prefix(endpoint_id),
                    endpoint_id, log_text(entry.event_id), STATUS_LETTERS["dead"],
                    log_text(entry.event_type), entry.attempts, entry.last_status or 0, 0,
                    age_ms, most])
            else:  # after the dead letter's own transaction: its failure is not the letter's
                try:
                    self.record(entry.endpoint_id, entry.event_id, "dead",
                                event_type=entry.event_type, attempts=entry.attempts,
                                last_status=entry.last_status or 0)
                except redis.RedisError as exc:
                    log_event("event_log.failed", level=logging.WARNING,
                              endpoint_id=entry.endpoint_id, event_id=entry.event_id,
                              error=type(exc).__name__)

    def index_after_settle(self, endpoint_id: str, event_id: str, outcome: str,
                           event_type: str, reply: Sequence[Any]) -> None:
        """A Redis Cluster's second step after settle.lua logged an attempt (``reply``: its
        answer, the time and the previous index entry). A failure is logged, never the
        settle's: the row is written, and a reader never shows an entry its row denies."""
        try:
            self.index(endpoint_id, event_id,
                       "delivered" if outcome == "delivered" else "retrying", event_type,
                       int(reply[3]), previous=(reply[4], reply[5]))
        except redis.RedisError as exc:
            log_event("event_log.index_failed", level=logging.WARNING, endpoint_id=endpoint_id,
                      event_id=event_id, error=type(exc).__name__)

    def index(self, endpoint_id: str, event_id: str, status: str, event_type: str,
              at_ms: int, *, previous: tuple[Any, Any] = ("", "")) -> None:
        """Index a row written on the endpoint's slot in its shard (a Redis Cluster's second
        step; a single Redis does it in the row's script), and remove its ``previous`` entry
        (the letter and type the row script returned)."""
        shard = self.shard_of(endpoint_id)
        age_ms, most = log_args()
        self._script(keys=[shard.types], args=[
            "index", "", shard.prefix, endpoint_id, event_id, STATUS_LETTERS[status],
            event_type, 0, 0, at_ms, age_ms, most, _text(previous[0]), _text(previous[1])])
