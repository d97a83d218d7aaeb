"""Pause and resume on a real Redis with no worker behind it: the pause flag in the endpoint's
two hashes (pause_endpoint.lua), the pause periods kept for the age limit, and resume bringing
back only the deliveries parked for the pause, each to the moment it was parked, in order."""

from __future__ import annotations

from itertools import pairwise

from hookline.core.endpoint import Endpoint
from hookline.delivery.retries import pause_endpoint, resume_endpoint
from hookline.store import keys
from hookline.store.endpoints import PAUSE_PARK, EndpointRegistry
from hookline.store.schedule import DUE_KEY, RetrySchedule


def park(schedule: RetrySchedule, endpoint_id: str, event_id: str, countdown: float) -> float:
    return schedule.park(endpoint_id=endpoint_id, event_id=event_id, countdown=countdown,
                         message=f"message of {event_id}")


def test_pause_sets_the_flag_once_and_resume_keeps_the_period(quiet_redis):
    registry = EndpointRegistry()
    registry.add("p-ep", "https://p.example/hook")
    paused = pause_endpoint(registry, "p-ep")
    assert paused.paused and paused.public()["paused"] is True
    since = quiet_redis.hget(keys.breaker_key("p-ep"), "paused_at")
    pause_endpoint(registry, "p-ep")  # again: the same pause
    assert quiet_redis.hget(keys.breaker_key("p-ep"), "paused_at") == since
    # Saving the endpoint (an update read before the pause) does not undo it.
    registry.update("p-ep", timeout=2.0)
    assert registry.require("p-ep").paused
    resumed, moved = resume_endpoint(registry, "p-ep", grace=0)
    assert not resumed.paused and moved == 0
    assert quiet_redis.hget(keys.breaker_key("p-ep"), "paused_at") is None
    [(start, end)] = resumed.pauses
    assert start == int(since) / 1000 and end >= start


def test_resume_brings_back_only_what_the_pause_parked_in_order(quiet_redis):
    registry, schedule = EndpointRegistry(), RetrySchedule()
    registry.add("r-ep", "https://r.example/hook")
    pause_endpoint(registry, "r-ep")
    backoff_due = park(schedule, "r-ep", "backoff", 600)  # a retry's own backoff: stays
    held = [park(schedule, "r-ep", f"held-{n}", PAUSE_PARK + n / 1000) for n in range(5)]
    other_due = park(schedule, "other-ep", "x", PAUSE_PARK)  # another endpoint's: stays
    _, moved = resume_endpoint(registry, "r-ep", grace=0)
    assert moved == 5
    def due(retry_id: str) -> int:
        return int(quiet_redis.zscore(DUE_KEY, retry_id))

    def ms(seconds: float) -> int:
        return round(seconds * 1000)

    assert due("r-ep/backoff") == ms(backoff_due)
    assert [due(f"r-ep/held-{n}") for n in range(5)] == [ms(d) - ms(PAUSE_PARK) for d in held]
    order = quiet_redis.zrange(DUE_KEY, 0, -1)
    assert order[:5] == [f"r-ep/held-{n}" for n in range(5)]
    assert due("other-ep/x") == ms(other_due)


def test_paused_time_is_left_out_of_an_events_age():
    endpoint = Endpoint(id="a", url="https://a.example/", secrets=("whsec_x",),
                        pauses=((100.0, 130.0), (200.0, 210.0)))
    assert endpoint.paused_seconds(0, 300) == 40
    assert endpoint.paused_seconds(120, 205) == 15
    assert endpoint.paused_seconds(140, 190) == 0
    still = Endpoint(id="a", url="https://a.example/", secrets=("whsec_x",), paused_at=250.0)
    assert still.paused_seconds(200, 300) == 50


def test_a_rate_limited_endpoint_gets_them_back_one_per_rate_interval(quiet_redis):
    registry, schedule = EndpointRegistry(), RetrySchedule()
    registry.add("s-ep", "https://s.example/hook", rate="4/s")
    pause_endpoint(registry, "s-ep")
    for n in range(4):
        park(schedule, "s-ep", f"held-{n}", PAUSE_PARK + n / 1000)
    _, moved = resume_endpoint(registry, "s-ep", grace=0)
    assert moved == 4
    dues = [int(quiet_redis.zscore(DUE_KEY, f"s-ep/held-{n}")) for n in range(4)]
    # 4/s, and a tenth
    assert [later - earlier for earlier, later in pairwise(dues)] == [275] * 3
