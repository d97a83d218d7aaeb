"""How far a bulk replay job's entries have gone out (``hookline.service.replay_jobs.settle``):
the settled mark moves over delivered, skipped and dead-lettered-again entries in due order,
stops at the first still on its way, stays bounded per read, and is kept for the next read."""

from __future__ import annotations

import time

from hookline.service import replay_jobs
from hookline.service.actor import Actor
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.replay_jobs import ReplayJobs, SnapshotEntry

OPERATOR = Actor("alice", "session-1")
T0 = time.time() - 600


def handed_over(quiet_redis, count: int) -> ReplayJobs:
    jobs = ReplayJobs()
    jobs.create("job1", [SnapshotEntry(f"ep/ev-{n}", T0, n * 0.1) for n in range(count)],
                actor="alice", session="s", params={})
    jobs.advance("job1", count, skipped=["ep/ev-2"])
    jobs.finish("job1", "done")
    return jobs


def deliver(quiet_redis, *numbers: int) -> None:
    for n in numbers:
        quiet_redis.set(keys.done_key("ep", f"ev-{n}"), "1")


def test_the_mark_moves_over_what_settled_and_stops_at_the_first_on_its_way(quiet_redis):
    jobs = handed_over(quiet_redis, 8)
    deliver(quiet_redis, 0, 1, 3, 5)
    # ev-2 skipped, ev-4 dead-lettered again after the snapshot: settled, not delivered.
    DeadLetterQueue().add(DeadLetter("ep", "ev-4", "order.paid", {}, "exhausted", attempts=4,
                                     dead_lettered_at=time.time()))
    job = replay_jobs.job(OPERATOR, "job1")
    assert (job.settled, job.delivered) == (6, 4)  # ev-6 is on its way: the mark stops there
    assert job.settling
    deliver(quiet_redis, 6, 7)
    job = replay_jobs.job(OPERATOR, "job1")
    assert (job.settled, job.delivered) == (8, 6) and not job.settling
    assert (jobs.get("job1").settled, jobs.get("job1").delivered) == (8, 6)  # kept


def test_one_read_looks_at_a_bounded_stretch(quiet_redis):
    jobs = handed_over(quiet_redis, 30)
    deliver(quiet_redis, *(n for n in range(30) if n != 2))
    job = replay_jobs.settle(jobs.get("job1"), jobs, look=10)
    assert (job.settled, job.delivered) == (10, 9)
    job = replay_jobs.settle(job, jobs, look=10)
    assert (job.settled, job.delivered) == (20, 19)  # ev-2 was skipped
