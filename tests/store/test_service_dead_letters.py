"""The dead-letter service: bookmarkable queries, pages with cursors, the dry-run count, scope,
read-only refusals, the audit log, and the bulk replay job run in-process (snapshot, progress,
cancel, a crash half-way, another runner's lease). The job with a real worker and receiver:
tests/integration/test_bulk_replay.py."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

import hookline.service.replay_jobs
from hookline.core.errors import InvalidField
from hookline.delivery.replay_job import JobRunner
from hookline.service import audit, dead_letters, events, replay_jobs, schedule
from hookline.service.actor import Actor, NotFound, ReadOnly
from hookline.service.dead_letters import DeadLetterQuery, InvalidQuery
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.replay_jobs import CONTINUATIONS, ReplayJobs, next_run_id
from hookline.store.schedule import RetrySchedule

OPERATOR = Actor("alice", "session-1")
VIEWER = Actor("victor", "session-2", can_act=False)
TENANT = Actor("portal:app-a", "session-3", app_scope="app-a")
T0 = float(int(time.time()) - 3600)


def letter(endpoint_id: str, n: int, reason: str = "exhausted", status: int = 503
           ) -> DeadLetter:
    return DeadLetter(endpoint_id, f"ev-{n:04d}", "order.paid", {"n": n}, reason,
                      attempts=3, last_status=status, dead_lettered_at=T0 + n)


@pytest.fixture
def letters(quiet_redis) -> DeadLetterQueue:
    """app-a owns ep-a1 and ep-a2, app-b owns ep-b; 30 letters each, mixed reasons."""
    apps, registry = AppRegistry(), EndpointRegistry()
    for app, endpoints in (("app-a", ["ep-a1", "ep-a2"]), ("app-b", ["ep-b"])):
        apps.add(app)
        for endpoint_id in endpoints:
            registry.add(endpoint_id, f"http://127.0.0.1:9/{endpoint_id}", app=app)
    queue = DeadLetterQueue()
    queue._write([letter(endpoint_id, n * 3 + k, "rejected" if n % 3 == 0 else "exhausted",
                         410 if n % 5 == 0 else 503)
                  for n in range(30) for k, endpoint_id in enumerate(["ep-a1", "ep-a2", "ep-b"])])
    return queue


@pytest.fixture
def queued(monkeypatch) -> list[str]:
    """The job ids whose task would have been queued (no worker in this tier)."""
    started: list[str] = []
    monkeypatch.setattr(hookline.service.replay_jobs, "enqueue_replay_job", started.append)
    return started


# -- queries ---------------------------------------------------------------------------------


def test_a_query_round_trips_through_its_url_parameters() -> None:
    query = DeadLetterQuery.from_params({
        "endpoint": "ep-a1", "reason": "rejected", "status": "410", "since": "1764435133.25",
        "until": "2026-12-01T00:00:00+00:00", "min_attempts": "", "order": "oldest",
        "cursor": "ignored"})
    params = query.to_params()
    assert params == {"endpoint": "ep-a1", "reason": "rejected", "status": "410",
                      "since": "2025-11-29T16:52:13.250000+00:00",
                      "until": "2026-12-01T00:00:00+00:00", "order": "oldest"}
    assert DeadLetterQuery.from_params(params) == query
    # Newest first unless told otherwise: the default is left out of a URL.
    assert DeadLetterQuery.from_params({}) == DeadLetterQuery() == DeadLetterQuery(order="newest")
    assert DeadLetterQuery().to_params() == {}
    assert DeadLetterQuery.from_params({"order": "newest"}).to_params() == {}


@pytest.mark.parametrize(("params", "field", "says"), [
    ({"endpoint": "<script>"}, "endpoint", "is not an endpoint id"),
    ({"reason": "lost"}, "reason", "is not one of"),
    ({"status": "abc"}, "status", "is not a whole number from 0 to 599"),
    ({"status": "600"}, "status", "is not a whole number"),
    ({"since": "last week"}, "since", "is not a time"),
    ({"since": "1h", "until": "2h"}, "since", "since is later than until"),
    ({"min_attempts": "5", "max_attempts": "2"}, "min_attempts", "is above max_attempts"),
    ({"order": "random"}, "order", "is not one of oldest, newest"),
])
def test_a_bad_query_value_is_one_clear_error(params: dict[str, str], field: str,
                                              says: str) -> None:
    with pytest.raises(InvalidQuery, match=says) as refused:
        DeadLetterQuery.from_params(params)
    assert refused.value.field == field


# -- reading ---------------------------------------------------------------------------------


def test_pages_follow_their_cursor_and_the_count_is_the_pages_total(letters) -> None:
    query = DeadLetterQuery(reason="rejected", order="newest")
    seen: list[str] = []
    cursor = None
    while True:
        page = dead_letters.list_page(OPERATOR, query, cursor, limit=4)
        seen += [entry.id for entry in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    expected = [entry.id for entry in reversed(dead_letters.find(OPERATOR, query))]
    assert seen == expected and len(seen) == 30
    assert dead_letters.count(OPERATOR, query) == 30
    assert dead_letters.count(OPERATOR, DeadLetterQuery(endpoint="ep-b", status=410)) == 6
    with pytest.raises(InvalidField, match="is not a dead-letter position"):
        dead_letters.list_page(OPERATOR, query, "not-a-cursor")


def test_a_tenant_sees_only_its_applications_dead_letters(letters) -> None:
    everything = DeadLetterQuery()
    assert dead_letters.count(TENANT, everything) == 60
    page = dead_letters.list_page(TENANT, everything, limit=100)
    assert {entry.endpoint_id for entry in page.items} == {"ep-a1", "ep-a2"}
    assert dead_letters.count(TENANT, DeadLetterQuery(endpoint="ep-a2")) == 30
    for call in (lambda: dead_letters.count(TENANT, DeadLetterQuery(endpoint="ep-b")),
                 lambda: dead_letters.list_page(TENANT, DeadLetterQuery(endpoint="ep-b")),
                 lambda: dead_letters.get(TENANT, "ep-b/ev-0002"),
                 lambda: dead_letters.replay_one(TENANT, "ep-b/ev-0002"),
                 lambda: replay_jobs.start_bulk_replay(TENANT, DeadLetterQuery(endpoint="ep-b"))):
        with pytest.raises(NotFound, match="endpoint 'ep-b'"):
            call()
    with pytest.raises(NotFound):  # unknown looks the same
        dead_letters.get(TENANT, "ep-zz/ev-0002")
    with pytest.raises(NotFound):
        dead_letters.trim(TENANT, time.time())


def test_a_read_only_actor_reads_but_cannot_act(letters, queued) -> None:
    assert dead_letters.count(VIEWER, DeadLetterQuery()) == 90
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint="ep-a1"),
                                           rate="1000/s")
    for call in (lambda: dead_letters.replay_one(VIEWER, "ep-a1/ev-0000"),
                 lambda: dead_letters.purge(VIEWER, dead_letters.find(VIEWER,
                                                                      DeadLetterQuery())),
                 lambda: replay_jobs.start_bulk_replay(VIEWER, DeadLetterQuery()),
                 lambda: replay_jobs.cancel(VIEWER, job_id),
                 lambda: dead_letters.trim(VIEWER, time.time()),
                 lambda: dead_letters.reindex(VIEWER)):
        with pytest.raises(ReadOnly, match="read-only: victor cannot"):
            call()
    assert DeadLetterQueue().count() == 90
    assert replay_jobs.job(VIEWER, job_id).state == "running"


def test_actions_are_audited_with_who_and_which_session(letters, published) -> None:
    dead_letters.replay_one(OPERATOR, "ep-a1/ev-0000")
    assert DeadLetterQueue().get("ep-a1/ev-0000") is None
    assert published.events == [("hookline", "ep-a1", "ev-0000")]
    entry = audit.recent(OPERATOR, limit=1).items[0]
    assert (entry.actor, entry.session, entry.action, entry.target) == (
        "alice", "session-1", "dead_letter.replay", "ep-a1/ev-0000")


def test_both_replays_of_one_dead_letter_refuse_one_that_is_not_a_valid_event(letters,
                                                                              published):
    """The event page's replay is the dead-letter page's, audited under its own name: the
    same refusal (an InvalidField), nothing sent, the entry kept."""
    DeadLetterQueue().add(DeadLetter("ep-a1", "bad-1", "", {"n": 1}, "malformed"))
    for replay in (lambda: dead_letters.replay_one(OPERATOR, "ep-a1/bad-1"),
                   lambda: events.replay_event(OPERATOR, "ep-a1", "bad-1")):
        with pytest.raises(InvalidField, match=r"^dead letter 'ep-a1/bad-1' is not a valid "
                                               r"event \(.+\): replayed, it would only be "):
            replay()
    assert events.NotReplayable is dead_letters.NotReplayable
    assert DeadLetterQueue().get("ep-a1/bad-1") is not None
    assert published.events == [] and audit.recent(OPERATOR).items == []
    outcome = events.replay_event(TENANT, "ep-a1", "ev-0000")
    assert [entry.id for entry in outcome.replayed] == ["ep-a1/ev-0000"]
    [entry] = audit.recent(OPERATOR).items
    assert (entry.action, entry.target, entry.app) == ("event.replay", "ep-a1/ev-0000", "app-a")


# -- the bulk replay job, run in this process ------------------------------------------------


def run(job_id: str, **options: Any) -> str:
    return JobRunner(job_id, sleep=lambda seconds: None, **options).run()


def test_a_job_snapshots_exactly_the_matching_entries_and_replays_each_once(letters, queued
                                                                           ) -> None:
    query = DeadLetterQuery(endpoint="ep-a1", reason="exhausted")
    assert dead_letters.count(OPERATOR, query) == 20
    job_id = replay_jobs.start_bulk_replay(OPERATOR, query, rate="50/s")
    assert queued == [job_id]
    DeadLetterQueue().add(letter("ep-a1", 999))  # matches, but after the snapshot
    progress = replay_jobs.job(OPERATOR, job_id)
    assert (progress.state, progress.total, progress.replayed, progress.skipped) == (
        "running", 20, 0, 0)
    assert progress.params == {"endpoint": "ep-a1", "reason": "exhausted", "rate": "50/s"}
    before = time.time()
    assert run(job_id, batch=7) == "done"
    took = time.time() - before
    progress = replay_jobs.job(OPERATOR, job_id)
    assert (progress.state, progress.replayed, progress.skipped) == ("done", 20, 0)
    assert dead_letters.count(OPERATOR, query) == 1  # only the later one
    parked = {retry.id: retry for retry in RetrySchedule().scheduled()}
    # The plan: one endpoint's line at 50/s from the job's start.
    plan = {entry.entry_id: entry.offset for entry in ReplayJobs().batch(job_id, 0, 100)}
    assert set(parked) == set(plan)
    assert sorted(plan.values()) == pytest.approx([0.02 * k for k in range(20)])
    # Each parked no earlier than its place in the line (the due time counts from when the
    # entry was parked, to the millisecond), and no later than the run's own delay: an entry
    # already due when a late run reaches it goes at once.
    for entry_id, offset in plan.items():
        planned = progress.started_at + offset
        assert planned - 0.002 <= parked[entry_id].due <= max(planned, before) + took + 0.01, (
            entry_id, offset, parked[entry_id].due - progress.started_at)
    assert audit.recent(OPERATOR, limit=1).items[0].action == "dead_letter.bulk_replay"


def test_a_job_skips_what_left_or_changed_since_its_snapshot(letters, queued) -> None:
    query = DeadLetterQuery(endpoint="ep-b")
    job_id = replay_jobs.start_bulk_replay(OPERATOR, query, rate="1000/s")
    queue = DeadLetterQueue()
    queue.remove(["ep-b/ev-0002"])
    again = dataclasses.replace(letter("ep-b", 5, "rejected"), dead_lettered_at=T0 + 5000)
    queue.add(again)  # dead-lettered again: a new entry, which stays
    assert run(job_id) == "done"
    progress = replay_jobs.job(OPERATOR, job_id)
    assert (progress.replayed, progress.skipped) == (28, 2)
    assert [entry.id for entry in dead_letters.find(OPERATOR, query)] == ["ep-b/ev-0005"]


def test_a_job_run_again_after_a_crash_replays_no_entry_twice(letters, queued, monkeypatch
                                                             ) -> None:
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint="ep-a2"),
                                           rate="1000/s")
    queue = DeadLetterQueue()
    calls = []

    def crash_on_the_second_batch(entries: dict[str, float]) -> int:
        calls.append(len(entries))
        if len(calls) == 2:
            raise SystemExit("killed")  # recorded replayed, not yet removed
        return DeadLetterQueue.remove_unchanged(queue, entries)

    monkeypatch.setattr(queue, "remove_unchanged", crash_on_the_second_batch)
    parks: list[str] = []
    real_park = RetrySchedule.park

    def counting_park(self, **fields: Any) -> Any:
        parks.append(fields["event_id"])
        return real_park(self, **fields)

    monkeypatch.setattr(RetrySchedule, "park", counting_park)
    with pytest.raises(SystemExit):
        run(job_id, queue=queue, batch=10)
    assert replay_jobs.job(OPERATOR, job_id).cursor == 10
    monkeypatch.undo()
    monkeypatch.setattr(RetrySchedule, "park", counting_park)
    ReplayJobs().redis.hset(f"hookline:{{replay_job:{job_id}}}:job", "lease_until", "0")
    assert run(job_id, batch=10) == "done"
    assert sorted(parks) == sorted(set(parks)) and len(parks) == 30  # each parked once
    progress = replay_jobs.job(OPERATOR, job_id)
    assert (progress.replayed, progress.skipped, progress.total) == (30, 0, 30)
    assert dead_letters.count(OPERATOR, DeadLetterQuery(endpoint="ep-a2")) == 0


def test_a_job_waiting_for_its_next_batch_parks_its_next_run_and_ends(letters, queued
                                                                      ) -> None:
    """The run never sleeps: the next run waits in the retry schedule, the lease is free,
    and a cancel takes the next run out."""
    # 30 entries at 24/m: one every 2.5 s, so a run on a loaded machine has 2.25 s before the
    # next batch is due (at 1/s, 0.75 s).
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint="ep-a1"),
                                           rate="24/m")
    slept: list[float] = []
    started = time.monotonic()
    assert JobRunner(job_id, sleep=slept.append).run() == "waiting"
    assert slept == [] and time.monotonic() - started < 2
    progress = replay_jobs.job(OPERATOR, job_id)
    assert (progress.state, progress.replayed) == ("running", 3)  # due at 0, 2.5 and 5 s
    schedule = RetrySchedule()
    nexts = list(schedule.scheduled(CONTINUATIONS))
    assert [retry.id for retry in nexts] == [next_run_id(job_id)]
    due = progress.started_at + 7.5 - 5.0  # the next batch's first, less the look ahead
    assert abs(nexts[0].due - due) < 0.5
    assert ReplayJobs().take_lease(job_id, "another", 1) == 0  # given up
    ReplayJobs().take_lease(job_id, "another", -1)
    assert JobRunner(job_id, sleep=slept.append).run() == "waiting"  # not due yet
    assert len([retry for retry in schedule.scheduled(CONTINUATIONS)]) == 1  # replaced itself
    assert replay_jobs.cancel(OPERATOR, job_id).state == "cancelled"
    assert list(schedule.scheduled(CONTINUATIONS)) == []
    assert JobRunner(job_id, sleep=slept.append).run() == "cancelled" and slept == []


def test_a_waiting_jobs_next_run_is_listed_as_the_job_not_as_an_endpoints_retry(
        letters, queued) -> None:
    # 24/m: three entries each due within the look ahead (0, 2.5 and 5 s), the next run at
    # 2.5 s, with room to spare on a loaded machine.
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint="ep-a1"),
                                           rate="24/m")
    own = replay_jobs.start_bulk_replay(TENANT, DeadLetterQuery(endpoint="ep-a2"), rate="24/m")
    assert run(job_id) == "waiting" and run(own) == "waiting"
    waiting = schedule.waiting_jobs(OPERATOR)
    assert sorted(found.job_id for found in waiting) == sorted([job_id, own])
    assert all(found.next_run >= replay_jobs.job(OPERATOR, found.job_id).started_at + 2.5 - 0.01
               for found in waiting)
    assert [found.job_id for found in schedule.waiting_jobs(TENANT)] == [own]
    stats = schedule.schedule_stats(OPERATOR)
    assert set(stats.by_endpoint) == {"ep-a1", "ep-a2"}
    assert stats.total == sum(stats.by_endpoint.values())
    assert {row.endpoint_id for row in schedule.due_counts(OPERATOR).items} == {"ep-a1", "ep-a2"}
    soonest = schedule.soonest_retries(OPERATOR, limit=5)
    assert len(soonest.items) == 5 and soonest.next_cursor == "5"
    assert all(retry.endpoint_id != CONTINUATIONS for retry in schedule.soonest_retries(
        OPERATOR, limit=100).items)


def test_a_cancelled_job_stops_and_another_runners_lease_is_respected(letters, queued) -> None:
    job_id = replay_jobs.start_bulk_replay(OPERATOR, DeadLetterQuery(endpoint="ep-a1"),
                                           rate="1000/s")
    ReplayJobs().take_lease(job_id, "someone-else", 60)
    assert run(job_id) == "held"
    assert replay_jobs.cancel(OPERATOR, job_id).state == "cancelled"
    ReplayJobs().take_lease(job_id, "someone-else", -1)  # that runner's lease ran out
    assert run(job_id) == "cancelled"
    assert replay_jobs.job(OPERATOR, job_id).replayed == 0
    assert DeadLetterQueue().count() == 90
    assert replay_jobs.cancel(OPERATOR, job_id).state == "cancelled"  # once is enough
    assert [job.id for job in replay_jobs.jobs(OPERATOR)] == [job_id]
    assert replay_jobs.jobs(TENANT) == []  # started by an operator: no application's
    with pytest.raises(NotFound):
        replay_jobs.job(TENANT, job_id)
    with pytest.raises(NotFound):
        replay_jobs.job(OPERATOR, "../etc")
