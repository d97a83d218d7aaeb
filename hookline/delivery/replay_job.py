"""Running a bulk replay job (``hookline.store.replay_jobs``) in a worker, batch by batch.

The task (``hookline.replay_job``, defined in ``hookline.worker.bulk_replay``) takes the job's
lease, then works through its snapshot from the recorded cursor. Each entry of a batch is
replayed as ``hookline dlq replay`` replays one (``hookline.delivery.replay``): the same event
id (the webhook-id), onto the delivery queue when it is due at once, else parked in the retry
schedule until ``started_at + offset`` (the offsets, computed when the job started, space each
endpoint's events at its rate). A batch is handed over only when its first entry is due within
``LOOKAHEAD`` seconds, and holds only the entries due within ``LOOKAHEAD`` of its first, so
the schedule never holds more than that much of the job and a cancel stops the rest.

Between batches the task holds no worker slot: when the next batch is not due yet, the run
parks the job's next run (the same task, as a broker message) in the durable retry schedule,
due ``LOOKAHEAD`` before that batch, gives up its lease and ends. The releaser puts it on the
retry queue when due, like any parked retry, and whichever worker takes it goes on from the
cursor. (A Celery countdown would keep the message unacknowledged in a worker's memory for
hours.) The next run is parked under one id per job (``replay_jobs.next_run_id``, not a real
endpoint's): parked again, it replaces itself; a cancel takes it out.
A run that finds another runner's lease live (a killed worker's, not yet run out) parks the
next run for when that lease ends, rather than waiting for it in the slot.

Crash safety (the message is acknowledged late, and a killed worker's is restored to another):
an entry is recorded replayed in the job before it leaves the dead-letter queue, and the
cursor moves after both. A batch begun again skips what was recorded; an entry sent but not
yet recorded is sent again under the same event id, which the endpoint's idempotency gate
absorbs (a parked one replaces itself in the schedule). No entry is replayed twice by the job.
A run killed after parking the next one leaves two (that one and its own message restored):
the lease lets one work at a time, and the other parks itself again or finds the job done.
An entry that is gone, or was dead-lettered again since the snapshot, is skipped, as is one
that is not a valid event or that the full retry schedule refuses (it stays in the queue).
When the full schedule refuses the next run itself, this run waits for the batch in its slot
(the one case it does), so that the job never stalls.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from hookline.core.logs import log_event
from hookline.core.messages import DELIVERY_QUEUE
from hookline.delivery.publisher import publishing_app
from hookline.delivery.replay import _enqueue, _park, invalid_entries  # one replay, one way
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.replay_jobs import CONTINUATIONS, ReplayJob, ReplayJobs, SnapshotEntry
from hookline.store.schedule import RetrySchedule, ScheduleFull
from hookline.transport.envelope import build_message

#: The bulk replay task's name.
REPLAY_JOB_TASK_NAME = "hookline.replay_job"
#: Snapshot entries replayed per recorded step.
JOB_BATCH = 100
#: Seconds a runner's lease lasts unless renewed (a killed worker's runs out after this).
LEASE_SECONDS = 15.0
#: A batch is handed over once its first entry is due within this many seconds.
LOOKAHEAD = 5.0
#: A batch due within ``LOOKAHEAD`` plus this many seconds is handed over at once.
EARLY = 0.25
#: The longest sleep between two looks at the job (cancel, lease) while waiting in a slot
#: (only when the retry schedule is full and refuses the job's next run).
POLL = 0.5


def enqueue_replay_job(job_id: str) -> Any:
    """Publish the task that runs job ``job_id`` (its argument: the id only)."""
    return publishing_app().send_task(REPLAY_JOB_TASK_NAME, args=(job_id,),
                                      task_id=f"replay-job:{job_id}:{uuid.uuid4().hex[:8]}",
                                      queue=DELIVERY_QUEUE)


class JobRunner:
    """Runs one job to its end, a cancel, or another runner's live lease."""

    def __init__(self, job_id: str, *, jobs: ReplayJobs | None = None,
                 queue: DeadLetterQueue | None = None, batch: int = JOB_BATCH,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.job_id = job_id
        self.jobs = jobs or ReplayJobs()
        self.queue = queue or DeadLetterQueue()
        self.batch = batch
        self.sleep = sleep
        self.runner = uuid.uuid4().hex

    def run(self) -> str:
        """Work the job until its next batch is not due yet (``waiting``: its next run is
        parked), its end, or a cancel; returns its state then, or ``held`` (another runner
        has its lease: the next run is parked for when that lease ends)."""
        if not self._lease():
            return "held"
        while True:
            if self.jobs.take_lease(self.job_id, self.runner, LEASE_SECONDS) > 0:
                raise LeaseLost(self.job_id)  # renewed for the batch, or taken over
            job = self.jobs.get(self.job_id)
            if job is None:
                return "gone"
            if job.finished:
                return job.state
            entries = self.jobs.batch(self.job_id, job.cursor, self.batch)
            if not entries:
                self.jobs.finish(self.job_id, "done")
                log_event("replay_job.done", job_id=self.job_id, total=job.total)
                return "done"
            wait = self._wait_for(job, entries[0])
            if wait > 0:
                if self._park_next_run(wait):
                    self.jobs.release_lease(self.job_id, self.runner)
                    return "waiting"
                if not self._wait_until_due(job, entries[0]):
                    continue  # cancelled while waiting: the loop's next look says so
            self._replay(job, window(entries))

    def _lease(self) -> bool:
        """Take the lease. Another runner's live one (a twin's, or a killed worker's whose
        message came back before its lease ran out): park the next run for when it ends and
        give way (False); only when the full schedule refuses that, wait for it here once."""
        left = self.jobs.take_lease(self.job_id, self.runner, LEASE_SECONDS)
        if left <= 0:
            return True
        wait = min(left, LEASE_SECONDS) + 0.1
        if self._park_next_run(wait):
            return False
        self.sleep(wait)
        return self.jobs.take_lease(self.job_id, self.runner, LEASE_SECONDS) == 0

    @staticmethod
    def _wait_for(job: ReplayJob, first: SnapshotEntry) -> float:
        """Seconds until ``first`` is due within ``LOOKAHEAD``; 0 (hand its batch over now)
        when that is less than ``EARLY`` away: a next run released a little before its time
        by Redis' clock goes on rather than parking itself again for a few milliseconds."""
        wait = job.started_at + (first.offset or 0.0) - LOOKAHEAD - time.time()
        return wait if wait >= EARLY else 0.0

    def _park_next_run(self, countdown: float) -> bool:
        """Park the job's next run (this task again) in the retry schedule, due in
        ``countdown`` seconds; False when the full schedule refuses it."""
        message = build_message(
            publishing_app(), task_name=REPLAY_JOB_TASK_NAME,
            task_id=f"replay-job:{self.job_id}:{uuid.uuid4().hex[:8]}", args=[self.job_id],
            kwargs={}, retries=0, queue=DELIVERY_QUEUE)
        try:
            RetrySchedule().park(endpoint_id=CONTINUATIONS, event_id=self.job_id,
                                 countdown=countdown, message=message,
                                 last_error="bulk replay job waiting for its next batch")
        except ScheduleFull as exc:
            log_event("replay_job.schedule_full", level=logging.WARNING, job_id=self.job_id,
                      which=exc.which, waiting=round(countdown, 3))
            return False
        log_event("replay_job.waiting", job_id=self.job_id, countdown=round(countdown, 3))
        return True

    def _wait_until_due(self, job: ReplayJob, first: SnapshotEntry) -> bool:
        """Sleep until ``first`` is due within ``LOOKAHEAD``, looking at the job meanwhile
        (only when the full schedule refused the next run); False when it was cancelled (or
        the lease lost) while waiting."""
        while True:
            if self.jobs.take_lease(self.job_id, self.runner, LEASE_SECONDS) > 0:
                raise LeaseLost(self.job_id)
            wait = self._wait_for(job, first)
            if wait <= 0:
                return True
            self.sleep(min(wait, POLL))
            current = self.jobs.get(self.job_id)
            if current is None or current.finished:
                return False

    def _replay(self, job: ReplayJob, entries: list[SnapshotEntry]) -> None:
        ids = [entry.entry_id for entry in entries]
        recorded = set(entry_id for entry_id, done in
                       zip(ids, self.jobs.replayed_already(self.job_id, ids), strict=True) if done)
        current = self.queue.get_many(ids)
        sendable, skipped, leftover = [], [], {}
        for entry in entries:
            found = current.get(entry.entry_id)
            same = found is not None and found.dead_lettered_at == entry.dead_lettered_at
            if entry.entry_id in recorded:
                if same:  # recorded by a run that crashed before removing it
                    leftover[entry.entry_id] = entry.dead_lettered_at
            elif found is not None and same:
                sendable.append((entry, found))
            else:
                skipped.append(entry.entry_id)
        invalid = {id(letter) for letter, _ in invalid_entries([f for _, f in sendable])}
        sent: dict[str, float] = {}
        for entry, letter in sendable:
            if id(letter) in invalid or not self._send(job, entry, letter):
                skipped.append(entry.entry_id)
            else:
                sent[entry.entry_id] = entry.dead_lettered_at
        self.jobs.mark_replayed(self.job_id, list(sent))
        self.queue.remove_unchanged({**leftover, **sent})
        self.jobs.advance(self.job_id, job.cursor + len(entries), skipped)

    def _send(self, job: ReplayJob, entry: SnapshotEntry, letter: DeadLetter) -> bool:
        if entry.offset is None:
            _enqueue(letter)
            return True
        countdown = max(0.0, job.started_at + entry.offset - time.time())
        try:
            _park(letter, countdown)
        except ScheduleFull as exc:
            log_event("replay_job.schedule_full", level=logging.WARNING, job_id=self.job_id,
                      entry_id=entry.entry_id, which=exc.which)
            return False
        return True


def window(entries: list[SnapshotEntry]) -> list[SnapshotEntry]:
    """The head of a batch due within ``LOOKAHEAD`` of its first entry (the snapshot is in due
    order): a batch never hands the schedule more than that much of the job, so a cancel
    stops what is due later."""
    last = (entries[0].offset or 0.0) + LOOKAHEAD
    return [entry for entry in entries if (entry.offset or 0.0) <= last]


class LeaseLost(Exception):
    """Another runner took the job's lease (this one stalled past it): this one stops."""


def run_replay_job(job_id: str) -> str:
    """The task's body: run job ``job_id``; returns its state (or ``held``/``gone``)."""
    try:
        return JobRunner(job_id).run()
    except LeaseLost:
        log_event("replay_job.lease_lost", level=logging.WARNING, job_id=job_id)
        return "held"
