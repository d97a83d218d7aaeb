"""Bulk replay of exactly a filtered set of dead letters, as a throttled background job.

Public API (the actor first; ``NotFound`` for a job that does not exist or is another
application's; starting and cancelling refuse a read-only actor and are audited)::

    start_bulk_replay(actor, query, *, rate=None) -> str    # the job id
    job(actor, job_id) -> ReplayJob      # .state running|cancelled|done|failed, .total,
                                         # .replayed, .skipped, .finished, .params, .started_at,
                                         # .delivered (see settle)
    jobs(actor, *, limit=20) -> list[ReplayJob]             # newest first
    cancel(actor, job_id) -> ReplayJob

Starting a job snapshots the ids of exactly the entries ``query`` matches now (the count the
dry run showed, ``hookline.service.dead_letters.count``, unless the queue changed between the
two), each with when it is due: an endpoint's entries are spaced by ``rate`` when given,
else by the endpoint's own rate limit, else by ``DEFAULT_REPLAY_RATE`` when more than
``THROTTLE_ABOVE`` are selected (else at once), as ``hookline dlq replay`` spaces them. A
worker runs it (``hookline.delivery.replay_job``): same webhook-ids, batch by batch, cancel
seen between batches, resumed after a crash with no entry replayed twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import replace

from hookline.core.policy import parse_rate
from hookline.delivery.replay import DEFAULT_REPLAY_RATE, THROTTLE_ABOVE
from hookline.delivery.replay_job import enqueue_replay_job
from hookline.service import audit
from hookline.service.actor import Actor, NotFound
from hookline.service.dead_letters import DeadLetterQuery, scope_endpoints
from hookline.store import delivery
from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_index import Position, endpoint_of
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.replay_jobs import ReplayJob, ReplayJobs, SnapshotEntry


def _intervals(endpoint_ids: Iterable[str], total: int, rate: str | None,
               registry: EndpointRegistry) -> dict[str, float | None]:
    """Seconds between two replayed events of each endpoint (None: all at once)."""
    if rate is not None:
        given = parse_rate(rate)
        return dict.fromkeys(endpoint_ids, given)
    default = parse_rate(DEFAULT_REPLAY_RATE) if total > THROTTLE_ABOVE else None
    found: dict[str, float | None] = {}
    for endpoint_id in endpoint_ids:
        endpoint = registry.get(endpoint_id)
        found[endpoint_id] = parse_rate(endpoint.rate) if endpoint and endpoint.rate \
            else default
    return found


def snapshot(positions: list[Position], rate: str | None,
             registry: EndpointRegistry | None = None) -> list[SnapshotEntry]:
    """The job's entries in replay order, each due its place in its endpoint's line times the
    endpoint's interval after the start (``positions`` oldest first)."""
    intervals = _intervals({endpoint_of(p.entry_id) for p in positions}, len(positions), rate,
                           registry or EndpointRegistry())
    places: dict[str, int] = {}
    entries = []
    for position in positions:
        endpoint_id = endpoint_of(position.entry_id)
        interval = intervals[endpoint_id]
        place = places.get(endpoint_id, 0)
        places[endpoint_id] = place + 1
        entries.append(SnapshotEntry(position.entry_id, position.at,
                                     None if interval is None else place * interval))
    entries.sort(key=lambda entry: (entry.offset or 0.0, entry.dead_lettered_at,
                                    entry.entry_id))
    return entries


def _described(params: dict[str, str]) -> str:
    """A job's filters and rate as its audit entry says them, as typed (``endpoint=shop,
    rate=1/s``; a page escapes them, nothing URL-encodes them); "all" without any."""
    return ", ".join(f"{name}={value}" for name, value in params.items()) or "all"


def start_bulk_replay(actor: Actor, query: DeadLetterQuery, *, rate: str | None = None,
                      pages: DeadLetterPages | None = None,
                      jobs_store: ReplayJobs | None = None) -> str:
    """Snapshot what ``query`` matches, record the job and queue its task; returns its id."""
    actor.require_act("replay dead letters in bulk")
    if rate is not None:
        parse_rate(rate)  # a bad rate is refused before anything is recorded
    pages = pages or DeadLetterPages()
    positions = list(pages.positions(query.selection(), scope_endpoints(actor, query)))
    job_id = uuid.uuid4().hex
    jobs_store = jobs_store or ReplayJobs(pages.redis)
    params = query.to_params()
    if rate is not None:
        params["rate"] = rate
    started = time.time()
    created = jobs_store.create(job_id, snapshot(positions, rate), actor=actor.name,
                                session=actor.session, params=params, app=actor.app_scope,
                                started_at=started)
    audit.record(actor, "dead_letter.bulk_replay", job_id,
                 f"{created.total} dead letter(s) matching {_described(params)}",
                 app=actor.app_scope)
    if created.total == 0:
        jobs_store.finish(job_id, "done")
    else:
        enqueue_replay_job(job_id)
    return job_id


#: Snapshot entries past the settled mark looked at per read of a job.
SETTLE_LOOK = 500


def job(actor: Actor, job_id: str, *, jobs_store: ReplayJobs | None = None) -> ReplayJob:
    """A job's progress (``total``, ``replayed``, ``skipped``, ``state``), and how many of
    the entries it handed over are delivered so far (``delivered``: :func:`settle`)."""
    jobs_store = jobs_store or ReplayJobs()
    found = jobs_store.get(job_id) if job_id.isalnum() else None
    if found is None or (actor.app_scope is not None and found.app != actor.app_scope):
        raise NotFound("replay job", job_id)
    return settle(found, jobs_store) if found.settled < found.cursor else found


def settle(found: ReplayJob, jobs_store: ReplayJobs, look: int = SETTLE_LOOK) -> ReplayJob:
    """Move the job's settled mark over the handed-over entries that have settled, in
    snapshot (due) order: delivered, skipped, or dead-lettered again since the snapshot. At
    most ``look`` entries per call, and it stops at the first one still on its way, so a
    read of a large job stays bounded; the mark is kept in the job for the next read."""
    entries = jobs_store.batch(found.id, found.settled,
                               min(look, found.cursor - found.settled))
    pairs = [(endpoint_of(entry.entry_id), entry.entry_id.partition("/")[2])
             for entry in entries]
    done = delivery.delivered(jobs_store.redis, pairs)
    skipped = jobs_store.skipped_already(found.id, [entry.entry_id for entry in entries])
    settled, delivered, queue = found.settled, found.delivered, DeadLetterQueue()
    for entry, sent, passed in zip(entries, done, skipped, strict=True):
        if not (sent or passed or _dead_lettered_again(queue, entry)):
            break
        settled, delivered = settled + 1, delivered + sent
    if settled == found.settled:
        return found
    jobs_store.note_settled(found.id, settled, delivered)
    return replace(found, settled=settled, delivered=delivered)


def _dead_lettered_again(queue: DeadLetterQueue, entry: SnapshotEntry) -> bool:
    again = queue.get(entry.entry_id)
    return again is not None and again.dead_lettered_at > entry.dead_lettered_at


def jobs(actor: Actor, *, limit: int = 20, jobs_store: ReplayJobs | None = None
         ) -> list[ReplayJob]:
    """The most recent jobs, newest first (a scoped actor: its application's)."""
    recent = (jobs_store or ReplayJobs()).recent(limit=max(1, min(limit, 100)))
    return [found for found in recent
            if actor.app_scope is None or found.app == actor.app_scope]


def cancel(actor: Actor, job_id: str, *, jobs_store: ReplayJobs | None = None) -> ReplayJob:
    """Stop a running job at its next batch (what it already handed to the retry schedule,
    due within a few seconds, still goes out). A finished job is left as it is."""
    actor.require_act(f"cancel replay job {job_id}")
    jobs_store = jobs_store or ReplayJobs()
    job(actor, job_id, jobs_store=jobs_store)
    if jobs_store.cancel(job_id):
        audit.record(actor, "dead_letter.bulk_replay_cancel", job_id, app=actor.app_scope)
    return job(actor, job_id, jobs_store=jobs_store)
