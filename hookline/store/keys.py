"""Every Redis key Hookline uses, named in one place.

Keys an endpoint owns carry the endpoint id as a hash tag (``hookline:{ep_1}:...``), so a Lua
script that touches one endpoint's keys stays in one Redis Cluster slot; the retry schedule's
keys share ``{schedule}``, the dead-letter queue's ``{dlq}`` (``{schedule:<n>}`` and ``{dlq:<n>}``
per shard with ``HOOKLINE_STATE_SHARDS`` above 1: see the end of this module). Scripts get every
key they touch through ``KEYS``, built here.
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

#: The set of all endpoint ids.
ENDPOINT_INDEX = "hookline:endpoints"
#: The ids of the ordered endpoints (a set, kept by ``hookline.store.endpoints`` on add, update
#: and remove): what ``hookline stats`` and the metrics read the lines of, without reading every
#: endpoint. One key: an ordered endpoint needs the broker on Hookline's Redis, never a cluster.
ORDERED_ENDPOINTS = "hookline:ordered_endpoints"
#: The broker's doorbells, one list of wake-up tokens per queue (:func:`doorbell_key`), one
#: token pushed per message; an idle consumer blocks on them (BLMPOP), so a token wakes one
#: consumer of the queue (hookline/transport/redis.py; Hookline 0.2.0's stream is not read).
DOORBELL_KEY = "hookline:broker:tokens"


def doorbell_key(queue: str) -> str:
    """The doorbell of the broker queue named ``queue`` (all its priority lists share it)."""
    return f"{DOORBELL_KEY}:{queue}"


# -- worker liveness and fair shares (the broker's Redis: hookline/transport/liveness.py) ------

#: Live consuming processes: sorted set, registration token -> its latest heartbeat (ms of
#: Redis time).
WORKERS_LIVE_KEY = "hookline:workers:live"
#: Processes declared dead whose messages are still being restored: token -> when declared.
WORKERS_DEAD_KEY = "hookline:workers:dead"
#: Per live process: its slots (how many messages it may hold), and what it says of itself
#: (host, pid, started): two hashes by token.
WORKERS_SLOTS_KEY = "hookline:workers:slots"
WORKERS_INFO_KEY = "hookline:workers:info"
#: The registry's own clock and counters (hash): ``beat`` (latest heartbeat of anyone, ms),
#: ``resumed`` (when heartbeats came back after a gap: no process is declared dead within a
#: window of that), ``declared`` and ``restored`` (processes declared dead, messages restored).
WORKERS_CLOCK_KEY = "hookline:workers:clock"
#: Endpoints with deliveries waiting for their share of the slots (set of endpoint ids).
FAIR_WAITING_KEY = "hookline:fair:waiting"


def fair_waiting_key(endpoint_id: str) -> str:
    """An endpoint's deliveries waiting for its share or its cap (a list; each entry is the
    broker list the message came from, a newline, and the message)."""
    return f"hookline:fair:waiting:{endpoint_id}"

# -- one endpoint (hash tag: the endpoint id) ------------------------------------------------


def endpoint_key(endpoint_id: str) -> str:
    return f"hookline:{{{endpoint_id}}}:endpoint"


def leases_key(endpoint_id: str) -> str:
    """Attempts in flight: token -> end of its lease, ms (``hookline.store.leases``)."""
    return f"hookline:{{{endpoint_id}}}:leases"


def delivery_key(endpoint_id: str, event_id: str) -> str:
    """One event's delivery state at one endpoint, in one string (``hookline.store.delivery``):
    the content digest the event id is bound to, the done marker, the in-flight lease, the
    count of attempts started and not settled, and (``HOOKLINE_HISTORY_RETENTION`` at least the
    record's lifetime, the default) the attempt history. Admit and settle each read it with
    one GET and write it with one SET."""
    return f"hookline:{{{endpoint_id}}}:delivery:{event_id}"


def done_key(endpoint_id: str, event_id: str) -> str:
    """Hookline 0.2's done marker (now in :func:`delivery_key`): still honoured by admit and
    enqueue, so an upgrade sends no event again that 0.2 delivered."""
    return f"hookline:{{{endpoint_id}}}:done:{event_id}"


def digest_key(endpoint_id: str, event_id: str) -> str:
    """Hookline 0.2's content binding of an event id (now in :func:`delivery_key`): still
    honoured by admit and enqueue (``hookline.core.identity``)."""
    return f"hookline:{{{endpoint_id}}}:digest:{event_id}"


def breaker_key(endpoint_id: str) -> str:
    """Where an endpoint's shared gate state lives: its circuit breaker (``state``,
    ``failures``, ``cooldown_ms``, ``open_until``, ``opened_at``, ``probe_until``,
    ``probe_token``), Retry-After block (``blocked_until``), rate limiter (GCRA ``tat`` and
    ``book``, ms of Redis time) and recent record (``outcomes``, ``last_error``...,
    ``hookline.store.history``). They are fields of the endpoint's own hash
    (:func:`endpoint_key`), so admit reads an endpoint's configuration and gates with one
    HGETALL; the hash's ``url`` field is what says the endpoint exists."""
    return endpoint_key(endpoint_id)


def old_breaker_key(endpoint_id: str) -> str:
    """Hookline 0.2's breaker and limiter: no longer read; deleted with the endpoint."""
    return f"hookline:{{{endpoint_id}}}:breaker"


def rate_key(endpoint_id: str) -> str:
    """Hookline 0.2.0's rate limiter: no longer read; deleted with the endpoint."""
    return f"hookline:{{{endpoint_id}}}:rate"


def history_key(endpoint_id: str, event_id: str) -> str:
    """The kept attempts of one event at one endpoint (a list of JSON records) when
    ``HOOKLINE_HISTORY_RETENTION`` is shorter than the delivery record's lifetime (otherwise
    they live in :func:`delivery_key`)."""
    return f"hookline:{{{endpoint_id}}}:history:{event_id}"


def recent_key(endpoint_id: str) -> str:
    """Hookline 0.2's recent outcomes (now in :func:`breaker_key`'s hash): read when that
    has none, deleted with the endpoint."""
    return f"hookline:{{{endpoint_id}}}:recent"


#: An event's per-endpoint keys (delivery record, history list, 0.2's done marker and content
#: digest), parsed back into their parts.
EVENT_KEY = re.compile(
    r"^hookline:\{(?P<endpoint>[^}]+)\}:(?:delivery|history|done|digest):(?P<event>.+)$")


def glob_escaped(text: str) -> str:
    """``text`` with SCAN/KEYS glob characters escaped."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def event_keys_pattern(event_id: str) -> str:
    """A SCAN pattern matching every endpoint's keys of one event (an operator's command)."""
    return f"hookline:{{*}}:*:{glob_escaped(event_id)}"


def occurrence_key(endpoint_id: str, occurrence_id: str) -> str:
    """Set once an operational event (``hookline.core.operational_events``) about the endpoint was
    reported, so that the same occurrence seen twice is reported once (expires on its own)."""
    return f"hookline:{{{endpoint_id}}}:occurred:{occurrence_id}"


def order_heads_key(endpoint_id: str) -> str:
    """An ordered endpoint's heads: ordering key -> ``<event id>\n<sequence>`` of the one
    delivery of that key that may be out (piece_order.lua names the three from the hash's)."""
    return f"hookline:{{{endpoint_id}}}:order_heads"


def order_seq_key(endpoint_id: str) -> str:
    """An ordered endpoint's last sequence number given, per ordering key."""
    return f"hookline:{{{endpoint_id}}}:order_seq"


def order_line_key(endpoint_id: str, ordering_key: str) -> str:
    """The deliveries of one ordering key waiting behind its head, oldest first."""
    return f"hookline:{{{endpoint_id}}}:order_line:{ordering_key}"


def endpoint_owned_keys(endpoint_id: str) -> list[str]:
    """The keys that die with an endpoint (``endpoint remove``): one slot, one DEL."""
    return [endpoint_key(endpoint_id), old_breaker_key(endpoint_id), rate_key(endpoint_id),
            recent_key(endpoint_id), order_heads_key(endpoint_id), order_seq_key(endpoint_id),
            leases_key(endpoint_id)]


# -- applications (hash tag: ``app:<app id>``) ----------------------------------------------

#: The set of all application ids.
APP_INDEX = "hookline:apps"
#: The event catalog (a hash: type name -> JSON of its description and schema).
CATALOG_KEY = "hookline:{catalog}:types"


def app_tag(app_id: str) -> str:
    """The hash tag of an application's keys: its app, endpoint index and published events
    share one Redis Cluster slot, so publishing is one atomic script."""
    return f"app:{app_id}"


def app_key(app_id: str) -> str:
    return f"hookline:{{{app_tag(app_id)}}}:app"


def app_endpoints_key(app_id: str) -> str:
    """The ids of an application's endpoints (a set, kept by the endpoint registry)."""
    return f"hookline:{{{app_tag(app_id)}}}:endpoints"


#: Published events whose fan-out is not known to be queued and finished: a sorted set, member
#: ``[app id, event id]`` (JSON), scored with when to look at it again (Unix seconds). Marked
#: before the event is recorded; the workers' releasers re-queue the fan-out of one still
#: unfinished when its time comes (a publisher that died between recording the event and
#: queueing its fan-out task), and forget finished ones (``hookline.delivery.fanout``).
FANOUTS_PENDING_KEY = "hookline:{fanouts}:pending"


def published_key(app_id: str, event_id: str) -> str:
    """One published event of an application and its fan-out's progress (a hash)."""
    return f"hookline:{{{app_tag(app_id)}}}:published:{event_id}"


def published_pattern(event_id: str) -> str:
    """A SCAN pattern matching a published event's record in whichever application."""
    return f"hookline:{{app:*}}:published:{glob_escaped(event_id)}"


#: A published event's record key, parsed back into its parts.
PUBLISHED_KEY = re.compile(r"^hookline:\{app:(?P<app>[^}]+)\}:published:(?P<event>.+)$")


# -- the retry schedule (hash tag {schedule}) ------------------------------------------------

DUE_KEY = "hookline:{schedule}:due"
MESSAGES_KEY = "hookline:{schedule}:messages"
META_KEY = "hookline:{schedule}:meta"
COUNTS_KEY = "hookline:{schedule}:counts"
WAKE_KEY = "hookline:{schedule}:wake"
RELEASING_KEY = "hookline:{schedule}:releasing"
#: The keys park, release and unpark share, in the order the scripts take them.
SCHEDULE_KEYS = [DUE_KEY, MESSAGES_KEY, META_KEY, COUNTS_KEY]


def schedule_endpoint_key(endpoint_id: str) -> str:
    """The ids of one endpoint's scheduled retries (a set), so a 410 or a disable finds them
    without a scan of the whole schedule."""
    return f"hookline:{{schedule}}:by_endpoint:{endpoint_id}"


# -- the dead-letter queue (hash tag {dlq}) --------------------------------------------------

DLQ_KEY = "hookline:{dlq}:entries"
DLQ_INDEX_KEY = "hookline:{dlq}:by_time"
DLQ_REASON_KEY = "hookline:{{dlq}}:by_reason:{}"


# -- shards of the global structures (HOOKLINE_STATE_SHARDS) ---------------------------------
#
# On a Redis Cluster one hash tag is one slot, so one master: the retry schedule, the
# dead-letter queue and the endpoint index are each split over ``count`` hash tags that spread
# over the masters. A retry and a dead letter go to the shard of their endpoint (one
# endpoint's retries, its schedule index and its count share a slot, so the per-endpoint cap
# stays exact). With one shard (a single Redis) the keys are the ones above, unchanged.


@functools.cache
def shard_tags(name: str, count: int) -> tuple[str, ...]:
    """The hash tags of ``count`` shards of structure ``name``: ``name`` itself for one shard;
    otherwise ``name:<n>``, shard i's tag chosen in the i-th of ``count`` equal slot ranges,
    so that a cluster whose masters hold contiguous slot ranges (as ``redis-cli --cluster
    create`` assigns them) gets an even share of the shards on every master."""
    if count == 1:
        return (name,)
    tags = []
    for shard in range(count):
        low = shard * REDIS_CLUSTER_HASH_SLOTS // count
        high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // count
        n = 0
        while not low <= key_slot(f"{name}:{n}".encode()) < high:
            n += 1
        tags.append(f"{name}:{n}")
    return tuple(tags)


def endpoint_shard(endpoint_id: str, count: int) -> int:
    """The shard of an endpoint's retries and dead letters."""
    return 0 if count == 1 else zlib.crc32(endpoint_id.encode()) % count


def entry_shard(entry_id: str, count: int) -> int:
    """The shard of a retry or dead-letter id (``<endpoint id>/<event id>``)."""
    return endpoint_shard(entry_id.split("/", 1)[0], count)


@dataclass(frozen=True)
class ScheduleKeys:
    """One shard of the retry schedule."""

    tag: str

    @property
    def due(self) -> str:
        return f"hookline:{{{self.tag}}}:due"

    @property
    def messages(self) -> str:
        return f"hookline:{{{self.tag}}}:messages"

    @property
    def meta(self) -> str:
        return f"hookline:{{{self.tag}}}:meta"

    @property
    def counts(self) -> str:
        return f"hookline:{{{self.tag}}}:counts"

    @property
    def wake(self) -> str:
        return f"hookline:{{{self.tag}}}:wake"

    @property
    def releasing(self) -> str:
        return f"hookline:{{{self.tag}}}:releasing"

    @property
    def shared(self) -> list[str]:
        """due, messages, meta, counts: the keys park, release and unpark take first."""
        return [self.due, self.messages, self.meta, self.counts]

    def by_endpoint(self, endpoint_id: str) -> str:
        return f"hookline:{{{self.tag}}}:by_endpoint:{endpoint_id}"


@dataclass(frozen=True)
class DeadLetterKeys:
    """One shard of the dead-letter queue."""

    tag: str

    @property
    def entries(self) -> str:
        return f"hookline:{{{self.tag}}}:entries"

    @property
    def by_time(self) -> str:
        return f"hookline:{{{self.tag}}}:by_time"

    def by_reason(self, reason: str) -> str:
        return f"hookline:{{{self.tag}}}:by_reason:{reason}"

    def by_endpoint(self, endpoint_id: str) -> str:
        """One endpoint's entries by time (kept with the other indexes, in their transaction)."""
        return f"hookline:{{{self.tag}}}:by_endpoint:{endpoint_id}"

    def by_endpoint_reason(self, endpoint_id: str, reason: str) -> str:
        """One endpoint's entries of one reason by time: a page filtered by both reads only
        what it shows (the reason first: endpoint ids hold no ``:``, reasons neither)."""
        return f"hookline:{{{self.tag}}}:by_endpoint_reason:{reason}:{endpoint_id}"

    def by_status(self, label: str) -> str:
        """One last status's entries by time; ``statuses`` is the set of labels with one."""
        return f"hookline:{{{self.tag}}}:by_status:{label}"

    @property
    def statuses(self) -> str:
        return f"hookline:{{{self.tag}}}:statuses"

    @property
    def status_indexed(self) -> str:
        return f"hookline:{{{self.tag}}}:status_indexed"

    @property
    def endpoint_indexed(self) -> str:
        """Set once the shard's per-endpoint indexes hold every entry (``hookline dlq reindex``,
        or the first read that needs them); ``status_indexed`` for the per-status ones."""
        return f"hookline:{{{self.tag}}}:endpoint_indexed"


def schedule_shards(count: int) -> tuple[ScheduleKeys, ...]:
    return tuple(ScheduleKeys(tag) for tag in shard_tags("schedule", count))


def dead_letter_shards(count: int) -> tuple[DeadLetterKeys, ...]:
    return tuple(DeadLetterKeys(tag) for tag in shard_tags("dlq", count))


def endpoint_index_keys(count: int) -> tuple[str, ...]:
    """The endpoint index's shards (sets of endpoint ids); one shard: ``ENDPOINT_INDEX``."""
    if count == 1:
        return (ENDPOINT_INDEX,)
    return tuple(f"hookline:{{{tag}}}:index" for tag in shard_tags("endpoints", count))


def endpoint_index_key(endpoint_id: str, count: int) -> str:
    return endpoint_index_keys(count)[endpoint_shard(endpoint_id, count)]


# -- the audit log and the per-minute stats (hookline/service/) -------------------------------

#: The audit log: who did what, when, from which session (a stream capped near
#: ``AUDIT_MAXLEN`` entries; hookline.service.audit).
AUDIT_KEY = "hookline:audit"
#: Entries the audit log keeps, about (XADD MAXLEN ~).
AUDIT_MAXLEN = 100_000
#: Seconds a minute's stats hash lives: two days of "deliveries over time".
STATS_TTL = 48 * 3600


def stats_key(minute: int) -> str:
    """The outcome counts of one minute (a hash: outcome -> count, every worker process's
    summed), ``minute`` the Unix time of its first second divided by 60."""
    return f"hookline:stats:{minute}"


# -- replication (hookline/store/replication.py) ---------------------------------------------

#: Written before a WAIT, so that WAIT counts every write finished before it.
REPLICATION_FENCE_KEY = "hookline:replication-fence"


# -- bulk replay jobs (hookline.store.replay_jobs; hash tag: the job) ------------------------

#: Every bulk replay job by when it was started (a sorted set: job id -> Unix seconds).
REPLAY_JOBS_KEY = "hookline:replay_jobs"


def replay_job_key(job_id: str) -> str:
    """One bulk replay job: its query, state, cursor, start time and runner lease (a hash)."""
    return f"hookline:{{replay_job:{job_id}}}:job"


def replay_job_entries_key(job_id: str) -> str:
    """The job's snapshot: the matching entries when it started, in replay order (a list of
    JSON ``[entry id, dead-lettered at, seconds after the start it is due]``)."""
    return f"hookline:{{replay_job:{job_id}}}:entries"


def replay_job_replayed_key(job_id: str) -> str:
    """The entry ids the job replayed (a set: a batch done again after a crash counts once)."""
    return f"hookline:{{replay_job:{job_id}}}:replayed"


def replay_job_skipped_key(job_id: str) -> str:
    """The entry ids the job did not replay: gone or dead-lettered again since the snapshot,
    not a valid event, or the retry schedule full (a set)."""
    return f"hookline:{{replay_job:{job_id}}}:skipped"


# -- portal links (hookline.service.portal; hash tag: the portal, so one MGET checks both) --

#: Longest life of a portal link, seconds; a revocation is kept this long (then every link it
#: could refuse has expired by itself).
PORTAL_MAX_TTL = 30 * 86400


def portal_revoked_link_key(link_id: str) -> str:
    """Present: the portal link ``link_id`` is revoked (a string, expiring after
    :data:`PORTAL_MAX_TTL`)."""
    return f"hookline:{{portal}}:revoked:{link_id}"


def portal_revoked_app_key(app_id: str) -> str:
    """The Unix time before which every portal link to ``app_id`` is refused (a string,
    expiring after :data:`PORTAL_MAX_TTL`)."""
    return f"hookline:{{portal}}:revoked_app:{app_id}"
