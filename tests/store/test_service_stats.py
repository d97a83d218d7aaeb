"""Deliveries over time: each worker process counts outcomes in memory and writes them in one
batched round trip per flush (never a command per delivery), into per-minute hashes that
expire, which the service reads back as a series with every minute present."""

from __future__ import annotations

import redis

from hookline.service import stats
from hookline.service.actor import Actor
from hookline.store import keys
from hookline.worker.tallies import MinuteTallies, _count_delivery

ALICE = Actor(name="alice", session="s")
NOW = 1_800_000_000.0  # a minute boundary (divisible by 60)


class CountingClient:
    """A client whose pipelines count their round trips."""

    def __init__(self, real: redis.Redis) -> None:
        self.real = real
        self.executes = 0

    def pipeline(self, transaction: bool = True):
        pipe = self.real.pipeline(transaction=transaction)
        execute = pipe.execute

        def counted():
            self.executes += 1
            return execute()

        pipe.execute = counted
        return pipe


def test_outcomes_are_written_once_per_flush_into_expiring_minutes(quiet_redis):
    clock = [NOW + 5]
    client = CountingClient(quiet_redis)
    tallies = MinuteTallies(interval=0, clock=lambda: clock[0], client=lambda: client)
    for _ in range(500):
        tallies.count("delivered")
    tallies.count("retry_scheduled", 3)
    clock[0] = NOW + 65
    tallies.count("dead_lettered")
    tallies.count("something new")
    assert client.executes == 0  # counting writes nothing
    assert tallies.flush() == 4
    assert client.executes == 1
    assert quiet_redis.hgetall(keys.stats_key(int(NOW // 60))) == {
        "delivered": "500", "retry_scheduled": "3"}
    assert quiet_redis.hgetall(keys.stats_key(int(NOW // 60) + 1)) == {
        "dead_lettered": "1", "other": "1"}
    assert 0 < quiet_redis.ttl(keys.stats_key(int(NOW // 60))) <= keys.STATS_TTL
    assert tallies.flush() == 0 and client.executes == 1  # nothing new: no round trip


def test_two_processes_add_up_in_the_same_minute(quiet_redis):
    first = MinuteTallies(interval=0, clock=lambda: NOW, client=lambda: quiet_redis)
    second = MinuteTallies(interval=0, clock=lambda: NOW + 30, client=lambda: quiet_redis)
    first.count("delivered", 2)
    second.count("delivered", 3)
    first.flush()
    second.flush()
    assert quiet_redis.hget(keys.stats_key(int(NOW // 60)), "delivered") == "5"


def test_a_failed_write_keeps_the_counts_for_the_next(quiet_redis):
    class Down:
        def pipeline(self, transaction: bool = True):
            raise redis.ConnectionError("down")

    target = [Down()]
    tallies = MinuteTallies(interval=0, clock=lambda: NOW, client=lambda: target[0])
    tallies.count("delivered", 4)
    assert tallies.flush() == 0
    target[0] = quiet_redis
    assert tallies.flush() == 1
    assert quiet_redis.hget(keys.stats_key(int(NOW // 60)), "delivered") == "4"


def test_the_delivery_tasks_result_is_what_is_counted(monkeypatch):
    counted = MinuteTallies(interval=0, clock=lambda: NOW)
    monkeypatch.setattr("hookline.worker.tallies.TALLIES", counted)

    class Task:
        name = "hookline.deliver"

    class Other:
        name = "hookline.fanout"

    _count_delivery(sender=Task(), retval={"outcome": "delivered"})
    _count_delivery(sender=Task(), retval=RuntimeError("raised"))
    _count_delivery(sender=Other(), retval={"outcome": "delivered"})
    assert dict(counted._counts) == {(int(NOW // 60), "delivered"): 1}


def test_the_series_has_every_minute_oldest_first(quiet_redis):
    minute = int(NOW // 60)
    quiet_redis.hset(keys.stats_key(minute - 2), mapping={"delivered": 7, "dead_lettered": 1})
    quiet_redis.hset(keys.stats_key(minute), mapping={"delivered": 3})
    series = stats.series(ALICE, minutes=4, now=NOW + 10)
    assert [point.start for point in series] == [NOW - 180, NOW - 120, NOW - 60, NOW]
    assert [point.counts for point in series] == [
        {}, {"delivered": 7, "dead_lettered": 1}, {}, {"delivered": 3}]
    assert [point.total for point in series] == [0, 8, 0, 3]
    assert len(stats.series(ALICE, minutes=10**6, now=NOW)) == stats.MAX_MINUTES
