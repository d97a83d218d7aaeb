"""The retry schedule as an operator or a tenant sees it: how many retries wait, for which
endpoints, and which are due soonest.

Public API::

    schedule_stats(actor) -> ScheduleStats          # total, by_endpoint, oldest_due, lag
    due_counts(actor, *, cursor=None, limit=50) -> Page[EndpointDue]   # busiest first
    soonest_retries(actor, *, endpoint=None, cursor=None, limit=50) -> Page[ScheduledRetry]
    list_retries(actor, *, endpoint=None, limit=100) -> RetryList      # retries, more, now
    waiting_jobs(actor, *, limit=20) -> list[WaitingJob]   # bulk replay jobs' next runs

Times are Redis time (Unix seconds). A scoped actor sees only its application's endpoints'
retries; another endpoint is NotFound. A bulk replay job waiting for its next batch parks its
next run in the schedule under a stand-in endpoint (``CONTINUATIONS``): it is no endpoint's
retry, so the totals, due counts and soonest retries leave it out and ``waiting_jobs`` lists
it (the oldest due and the release lag still count it: the releaser releases it too).
Payloads are in ``ScheduledRetry`` (the CLI's ``--json`` prints them): a face that must not
show them leaves them out.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from hookline.core.errors import InvalidField
from hookline.service.actor import Actor
from hookline.service.endpoints import all_endpoints, require_endpoint, require_known_endpoint
from hookline.service.pages import Page, bounded_limit
from hookline.store.connection import redis_time
from hookline.store.replay_jobs import CONTINUATIONS, ReplayJobs
from hookline.store.schedule import RetrySchedule, ScheduledRetry, ScheduleStats, retry_endpoint
from hookline.store.scheduled import PAGE


@dataclass(frozen=True)
class EndpointDue:
    """One endpoint's scheduled retries: how many, and when the earliest is due (None: all
    are being released)."""

    endpoint_id: str
    count: int
    oldest_due: float | None


@dataclass(frozen=True)
class WaitingJob:
    """A bulk replay job waiting in the schedule for its next batch: its id and when its next
    run is due (0: being released)."""

    job_id: str
    next_run: float


@dataclass(frozen=True)
class RetryList:
    """The soonest-due retries, whether more are scheduled than were listed, and Redis time
    when they were read (what "due in 12s" is measured against)."""

    retries: list[ScheduledRetry]
    more: bool
    now: float = 0.0


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    if not (cursor.isascii() and cursor.isdigit()):
        raise InvalidField("cursor", f"cursor {cursor[:40]!r} is not a schedule position")
    return int(cursor)


def _visible_counts(actor: Actor, schedule: RetrySchedule,
                    stats: ScheduleStats) -> dict[str, int]:
    if actor.app_scope is None:
        return {endpoint_id: count for endpoint_id, count in stats.by_endpoint.items()
                if endpoint_id != CONTINUATIONS}
    own = {item.id for item in all_endpoints(actor)}
    return {endpoint_id: count for endpoint_id, count in stats.by_endpoint.items()
            if endpoint_id in own}


def _oldest_due(schedule: RetrySchedule, endpoint_id: str) -> float | None:
    """The earliest due time of one endpoint's retries (its index, a page at a time)."""
    shard = schedule.shard_of(endpoint_id)
    ids = list(schedule.redis.sscan_iter(shard.by_endpoint(endpoint_id), count=PAGE))
    oldest = None
    for start in range(0, len(ids), PAGE):
        for due in schedule.redis.zmscore(shard.due, ids[start:start + PAGE]):
            if due is not None and (oldest is None or due < oldest):
                oldest = due
    return None if oldest is None else oldest / 1000.0


def _oldest_dues(schedule: RetrySchedule, endpoint_ids: list[str]) -> list[float | None]:
    """:func:`_oldest_due` of each of ``endpoint_ids`` (a page of them) in two pipelined
    round trips: their index sets, then the due times of what they hold."""
    if not endpoint_ids:
        return []
    shards = [schedule.shard_of(endpoint_id) for endpoint_id in endpoint_ids]
    pipe = schedule.redis.pipeline(transaction=False)
    for endpoint_id, shard in zip(endpoint_ids, shards, strict=True):
        pipe.smembers(shard.by_endpoint(endpoint_id))
    members = [sorted(found) for found in pipe.execute()]
    pipe = schedule.redis.pipeline(transaction=False)
    chunks: list[int] = []
    for ids, shard in zip(members, shards, strict=True):
        starts = range(0, len(ids), PAGE)
        chunks.append(len(starts))
        for start in starts:
            pipe.zmscore(shard.due, ids[start:start + PAGE])
    scores = iter(pipe.execute() if any(chunks) else [])
    oldest: list[float | None] = []
    for count in chunks:
        dues = [due for _ in range(count) for due in next(scores) if due is not None]
        oldest.append(min(dues) / 1000.0 if dues else None)
    return oldest


def schedule_stats(actor: Actor) -> ScheduleStats:
    """``hookline stats``' schedule lines: every retry, or a scoped actor's own."""
    schedule = RetrySchedule()
    stats = schedule.stats()
    counts = _visible_counts(actor, schedule, stats)
    if actor.app_scope is None:
        return ScheduleStats(total=stats.total - stats.by_endpoint.get(CONTINUATIONS, 0),
                             by_endpoint=counts, oldest_due=stats.oldest_due, lag=stats.lag)
    dues = [due for due in (_oldest_due(schedule, endpoint_id) for endpoint_id in counts)
            if due is not None]
    oldest = min(dues, default=None)
    lag = max(0.0, stats.oldest_due + stats.lag - oldest) if (
        oldest is not None and stats.oldest_due is not None) else 0.0
    return ScheduleStats(total=sum(counts.values()), by_endpoint=counts, oldest_due=oldest,
                         lag=lag)


def due_counts(actor: Actor, *, cursor: str | None = None,
               limit: int = 50) -> Page[EndpointDue]:
    """Endpoints with scheduled retries, the most first (ties by id), a page at a time, each
    with its oldest due. The counts are the schedule's per-endpoint counters (one hash
    read, ranked with a bounded heap); the oldest due reads the page's endpoints' own
    retries only, in two pipelined round trips for the whole page."""
    schedule = RetrySchedule()
    counts = _visible_counts(actor, schedule, schedule.stats())
    start, limit = _offset(cursor), bounded_limit(limit)
    ranked = heapq.nsmallest(start + limit, counts.items(),
                             key=lambda item: (-item[1], item[0]))
    page = ranked[start:start + limit]
    dues = _oldest_dues(schedule, [endpoint_id for endpoint_id, _ in page])
    items = [EndpointDue(endpoint_id, count, due)
             for (endpoint_id, count), due in zip(page, dues, strict=True)]
    following = str(start + limit) if start + limit < len(counts) else None
    return Page(items=items, next_cursor=following)


def _soonest_everywhere(schedule: RetrySchedule, upto: int) -> list[str]:
    """The ids of the ``upto`` soonest-due retries across the shards (ZRANGE of each), the
    jobs' next runs left out (each shard's head read that many further)."""
    waiting = int(schedule.redis.hget(schedule.shard_of(CONTINUATIONS).counts,
                                      CONTINUATIONS) or 0)
    heads: list[tuple[float, str]] = []
    for shard in schedule.shards:
        heads += [(score, retry_id) for retry_id, score in
                  schedule.redis.zrange(shard.due, 0, upto + waiting - 1, withscores=True)
                  if retry_endpoint(retry_id) != CONTINUATIONS]
    return [retry_id for _, retry_id in heapq.nsmallest(upto, heads)]


def soonest_retries(actor: Actor, *, endpoint: str | None = None, cursor: str | None = None,
                    limit: int = 50) -> Page[ScheduledRetry]:
    """The retries due soonest (of ``endpoint``), a page at a time. Without an endpoint an
    unscoped actor's page reads the heads of the due sets only; one endpoint's page (and a
    scoped actor's) reads that endpoint's retries."""
    schedule = RetrySchedule()
    start, limit = _offset(cursor), bounded_limit(limit)
    if endpoint is None and actor.app_scope is None:
        ids = _soonest_everywhere(schedule, start + limit + 1)
        found = {retry.id: retry for shard in schedule.shards
                 for retry in schedule._read(shard, ids)}
        ordered = [found[retry_id] for retry_id in ids if retry_id in found]
    else:
        endpoint_ids = ([require_endpoint(actor, endpoint).id] if endpoint is not None
                        else [item.id for item in all_endpoints(actor)])
        ordered = heapq.nsmallest(start + limit + 1,
                                  (retry for endpoint_id in endpoint_ids
                                   for retry in schedule.scheduled(endpoint_id)),
                                  key=lambda retry: (retry.due, retry.id))
    page = ordered[start:start + limit]
    following = str(start + limit) if len(ordered) > start + limit else None
    return Page(items=page, next_cursor=following)


def list_retries(actor: Actor, *, endpoint: str | None = None, limit: int = 100) -> RetryList:
    """``hookline schedule list``: the ``limit`` soonest due (a retry being released, due 0,
    first), reading every scheduled retry (of ``endpoint``) to sort them."""
    schedule = RetrySchedule()
    if endpoint is not None and actor.app_scope is not None:
        require_endpoint(actor, endpoint)
    elif endpoint is not None:  # known: registered, or a retry of it still scheduled
        require_known_endpoint(endpoint, or_named_by=schedule.count)
    if actor.app_scope is None or endpoint is not None:
        source = schedule.scheduled(endpoint)
        retries = heapq.nsmallest(limit + 1, source, key=lambda retry: (retry.due, retry.id))
    else:
        own = [item.id for item in all_endpoints(actor)]
        retries = heapq.nsmallest(limit + 1, (retry for endpoint_id in own
                                              for retry in schedule.scheduled(endpoint_id)),
                                  key=lambda retry: (retry.due, retry.id))
    return RetryList(retries=retries[:limit], more=len(retries) > limit,
                     now=redis_time(schedule.redis) if retries else 0.0)


def waiting_jobs(actor: Actor, *, limit: int = 20) -> list[WaitingJob]:
    """The bulk replay jobs whose next run waits in the schedule, soonest first (a scoped
    actor: its application's); at most ``limit``."""
    schedule = RetrySchedule()
    runs = sorted(schedule.scheduled(CONTINUATIONS), key=lambda retry: (retry.due, retry.id))
    if actor.app_scope is not None:
        records = ReplayJobs(schedule.redis)
        runs = [run for run in runs if _job_of(records, run.event_id, actor.app_scope)]
    return [WaitingJob(job_id=run.event_id, next_run=run.due)
            for run in runs[:bounded_limit(limit)]]


def _job_of(records: ReplayJobs, job_id: str, app: str) -> bool:
    """Whether job ``job_id`` exists and was started for application ``app``."""
    found = records.get(job_id)
    return found is not None and found.app == app
