"""Bulk replay jobs: the snapshot of the dead letters a replay acts on, and its progress.

A job is started with the exact entries that matched its filter then (the snapshot: a list,
in replay order, of ``[entry id, dead-lettered at, due offset]``), and is run by a worker's
task (``hookline.delivery.replay_job``) that takes a lease on it, works through the snapshot
in batches from ``cursor``, and records each batch: the entry ids replayed and skipped go to
two sets (so a batch done again after a crash counts each entry once) and the cursor moves, in
one transaction on the job's slot. ``state`` is ``running`` until the end (``done``), an
operator's cancel (``cancelled``, seen between two batches) or an error (``failed``).

Keys (``hookline.store.keys``): ``replay_job_key`` (the record, a hash), its ``entries``,
``replayed`` and ``skipped`` (all under the job's hash tag) and ``REPLAY_JOBS_KEY`` (every job
by start time). A finished job is kept ``FINISHED_TTL`` seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from hookline.store import connection as store
from hookline.store import keys
from hookline.store.schedule import RetrySchedule

#: A job's states; every state but ``running`` is final.
STATES = ("running", "cancelled", "done", "failed")
#: Seconds a finished job stays readable.
FINISHED_TTL = 7 * 86400
#: Snapshot entries written per RPUSH.
WRITE_CHUNK = 1000
#: The retry schedule's stand-in "endpoint" for the jobs' next runs, parked there while a
#: job waits for its next batch (``hookline.delivery.replay_job``): ``~`` is not allowed in
#: an endpoint id, so no real endpoint's retries share its index, its count or its retry ids.
CONTINUATIONS = "~replay-jobs"


def next_run_id(job_id: str) -> str:
    """The retry id a job's parked next run has in the schedule (one per job)."""
    return f"{CONTINUATIONS}/{job_id}"
#: Times a lease or state change is tried again when the record changed under it.
ATTEMPTS = 20


@dataclass(frozen=True)
class SnapshotEntry:
    """One entry of a job: its id, when it was dead-lettered (the version of it the job
    replays) and how many seconds after the job's start it is due (None: at once)."""

    entry_id: str
    dead_lettered_at: float
    offset: float | None

    def to_json(self) -> str:
        return json.dumps([self.entry_id, self.dead_lettered_at, self.offset])

    @classmethod
    def from_json(cls, text: str | bytes) -> SnapshotEntry:
        entry_id, at, offset = json.loads(text)
        return cls(str(entry_id), float(at), None if offset is None else float(offset))


@dataclass(frozen=True)
class ReplayJob:
    """A job's record and progress: ``total`` entries in the snapshot, ``replayed`` and
    ``skipped`` so far, ``cursor`` the next snapshot position to work on."""

    id: str
    state: str
    total: int
    replayed: int
    skipped: int
    cursor: int
    actor: str
    session: str
    started_at: float
    params: dict[str, str] = field(default_factory=dict)
    app: str = ""
    finished_at: float | None = None
    detail: str = ""
    #: Snapshot positions before this one have settled (delivered, skipped or dead-lettered
    #: again), ``delivered`` of them delivered (``hookline.service.replay_jobs.settle``).
    settled: int = 0
    delivered: int = 0

    @property
    def finished(self) -> bool:
        return self.state != "running"

    @property
    def settling(self) -> bool:
        """Whether what the job handed over is still going out (its page keeps refreshing)."""
        return self.state == "running" or self.settled < self.cursor


class ReplayJobs:
    """Create, read, advance, cancel and finish bulk replay jobs."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def create(self, job_id: str, snapshot: Iterable[SnapshotEntry], *, actor: str,
               session: str, params: dict[str, str], app: str | None = None,
               started_at: float | None = None) -> ReplayJob:
        """Write the snapshot, then the record (a job exists once its record does)."""
        started_at = time.time() if started_at is None else started_at
        entries_key = keys.replay_job_entries_key(job_id)
        total, chunk = 0, []
        pipe = self.redis.pipeline(transaction=False)
        for entry in snapshot:
            chunk.append(entry.to_json())
            if len(chunk) >= WRITE_CHUNK:
                pipe.rpush(entries_key, *chunk)
                total, chunk = total + len(chunk), []
        if chunk:
            pipe.rpush(entries_key, *chunk)
            total += len(chunk)
        pipe.execute()
        self.redis.hset(keys.replay_job_key(job_id), mapping={
            "state": "running", "total": total, "cursor": 0, "actor": actor,
            "session": session, "started_at": repr(started_at), "params": json.dumps(params),
            "app": app or "", "runner": "", "lease_until": "0"})
        self.redis.zadd(keys.REPLAY_JOBS_KEY, {job_id: started_at})
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> ReplayJob | None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(keys.replay_job_key(job_id))
        pipe.scard(keys.replay_job_replayed_key(job_id))
        pipe.scard(keys.replay_job_skipped_key(job_id))
        data, replayed, skipped = pipe.execute()
        if not data:
            return None
        data = {_text(name): _text(value) for name, value in data.items()}
        finished_at = data.get("finished_at")
        return ReplayJob(
            id=job_id, state=data["state"], total=int(data["total"]), replayed=int(replayed),
            skipped=int(skipped), cursor=int(data["cursor"]), actor=data.get("actor", ""),
            session=data.get("session", ""), started_at=float(data["started_at"]),
            params=json.loads(data.get("params") or "{}"), app=data.get("app", ""),
            finished_at=float(finished_at) if finished_at else None,
            detail=data.get("detail", ""), settled=int(data.get("settled") or 0),
            delivered=int(data.get("delivered") or 0))

    def recent(self, *, limit: int = 20) -> list[ReplayJob]:
        """The newest jobs first (ones whose record expired are forgotten)."""
        ids = [_text(job_id) for job_id in self.redis.zrevrange(keys.REPLAY_JOBS_KEY, 0,
                                                                 limit - 1)]
        jobs = []
        for job_id in ids:
            job = self.get(job_id)
            if job is None:
                self.redis.zrem(keys.REPLAY_JOBS_KEY, job_id)
            else:
                jobs.append(job)
        return jobs

    def batch(self, job_id: str, start: int, count: int) -> list[SnapshotEntry]:
        rows = self.redis.lrange(keys.replay_job_entries_key(job_id), start, start + count - 1)
        return [SnapshotEntry.from_json(row) for row in rows]

    def note_settled(self, job_id: str, settled: int, delivered: int) -> None:
        """Record how far the job's entries have settled (one HSET: the two agree)."""
        self.redis.hset(keys.replay_job_key(job_id),
                        mapping={"settled": settled, "delivered": delivered})

    def skipped_already(self, job_id: str, entry_ids: Sequence[str]) -> list[bool]:
        """For each id, whether this job skipped it."""
        return self._in_set(keys.replay_job_skipped_key(job_id), entry_ids)

    def replayed_already(self, job_id: str, entry_ids: Sequence[str]) -> list[bool]:
        """For each id, whether this job recorded it replayed (by a run that crashed after)."""
        return self._in_set(keys.replay_job_replayed_key(job_id), entry_ids)

    def _in_set(self, key: str, entry_ids: Sequence[str]) -> list[bool]:
        if not entry_ids:
            return []
        return [bool(n) for n in self.redis.smismember(key, list(entry_ids))]

    def mark_replayed(self, job_id: str, entry_ids: Sequence[str]) -> None:
        """Record ``entry_ids`` replayed before they leave the dead-letter queue: a crash in
        between finds them here and replays them no second time."""
        if entry_ids:
            self.redis.sadd(keys.replay_job_replayed_key(job_id), *entry_ids)

    def advance(self, job_id: str, cursor: int, skipped: Sequence[str] = ()) -> None:
        """Record a batch done: the ids skipped, and the next position."""
        pipe = self.redis.pipeline(transaction=True)
        if skipped:
            pipe.sadd(keys.replay_job_skipped_key(job_id), *skipped)
        pipe.hset(keys.replay_job_key(job_id), "cursor", cursor)
        pipe.execute()

    def cancel(self, job_id: str) -> bool:
        """Mark a running job cancelled and take its parked next run out of the schedule
        (one released meanwhile finds the job cancelled); False when it had finished."""
        if not self._finish(job_id, "cancelled", ""):
            return False
        RetrySchedule(self.redis).unpark([next_run_id(job_id)])
        return True

    def finish(self, job_id: str, state: str = "done", detail: str = "") -> bool:
        """Mark a running job ``state`` (a cancel that came first stays)."""
        if state not in STATES or state == "running":
            raise ValueError(f"not a final state: {state!r}")
        return self._finish(job_id, state, detail)

    def _finish(self, job_id: str, state: str, detail: str) -> bool:
        key = keys.replay_job_key(job_id)
        for _ in range(ATTEMPTS):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    if _text(pipe.hget(key, "state") or "") != "running":
                        return False
                    pipe.multi()
                    pipe.hset(key, mapping={"state": state, "finished_at": repr(time.time()),
                                            "detail": detail})
                    for name in (key, keys.replay_job_entries_key(job_id),
                                 keys.replay_job_replayed_key(job_id),
                                 keys.replay_job_skipped_key(job_id)):
                        pipe.expire(name, FINISHED_TTL)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue
        return False

    def take_lease(self, job_id: str, runner: str, seconds: float) -> float:
        """Take (or renew) the job's lease for ``runner``: 0.0 when it is ours now, else the
        seconds until another runner's lease runs out (a twin task, or a killed worker's)."""
        key = keys.replay_job_key(job_id)
        for _ in range(ATTEMPTS):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)
                    holder, until = pipe.hmget(key, "runner", "lease_until")
                    now = time.time()
                    left = float(until or 0) - now
                    if holder and _text(holder) != runner and left > 0:
                        return left
                    pipe.multi()
                    pipe.hset(key, mapping={"runner": runner,
                                            "lease_until": repr(now + seconds)})
                    pipe.execute()
                    return 0.0
                except redis.WatchError:
                    continue
        return seconds

    def release_lease(self, job_id: str, runner: str) -> None:
        """Give up ``runner``'s lease (if it still holds it) so that the job's next run,
        parked until its next batch is due, takes it at once rather than waiting it out."""
        self.take_lease(job_id, runner, -1.0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
