"""What operators see of ordered endpoints, on a real Redis with no worker: each key with a
delivery out, the most waiting first, with its head and why the head waits (dead-lettered,
held in the retry schedule, waiting for its retry, or out); the counts per ordered endpoint,
bounded (blocked keys among a sample); the set of ordered endpoints kept on add, update and
remove; a tenant sees its own application's only; and the gauges, one series per ordered
endpoint, none per key."""

from __future__ import annotations

import time

import pytest

from hookline.core.endpoint import EndpointError
from hookline.service import ordering
from hookline.service.actor import Actor, NotFound
from hookline.store import keys
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry, ordered_ids
from hookline.store.ordering import OrderLines
from hookline.store.schedule import RetrySchedule
from hookline.transport.gauges import RedisStateCollector
from tests.support.ordering import dead_letter_head, line_up

OPERATOR = Actor(name="alice", session="s-1")
TENANT_A = Actor(name="portal:app-a", session="s-2", app_scope="app-a")
TENANT_B = Actor(name="portal:app-b", session="s-3", app_scope="app-b")


@pytest.fixture
def lines(quiet_redis):
    """Ordered endpoint ``ord`` (policy block) with three keys: ``k-dead``'s head
    dead-lettered (3 waiting), ``k-retry``'s in the retry schedule (2 waiting), ``k-out``'s
    on the queue (1 waiting)."""
    EndpointRegistry().add("ord", "http://127.0.0.1:9/ord", ordered=True)
    line_up(quiet_redis, "ord", "k-out", ["out-1", "out-2"])
    line_up(quiet_redis, "ord", "k-retry", ["retry-1", "retry-2", "retry-3"])
    line_up(quiet_redis, "ord", "k-dead", ["dead-1", "dead-2", "dead-3", "dead-4"])
    dead_letter_head("ord", "dead-1")
    RetrySchedule().park(endpoint_id="ord", event_id="retry-1", countdown=30, message="{}")
    return quiet_redis


def test_each_key_shows_its_head_what_waits_and_why_most_waiting_first(lines):
    found = ordering.key_lines(OPERATOR, "ord")
    assert (found.policy, found.keys_out, found.waiting, found.more) == ("block", 3, 6, 0)
    assert [(line.key, line.head_event, line.head_sequence, line.waiting, line.where,
             line.reason) for line in found.lines] == [
        ("k-dead", "dead-1", 1, 3, "dead_lettered", "rejected"),
        ("k-retry", "retry-1", 1, 2, "scheduled", ""),
        ("k-out", "out-1", 1, 1, "out", ""),
    ]
    dead, retry, out = found.lines
    assert dead.why == "dead-lettered (rejected): blocked: replay or discard the dead letter"
    assert dead.until is None
    assert retry.why == "in the retry schedule: waiting for its retry"
    assert retry.until is not None and 20 < retry.until - time.time() <= 31
    assert (out.why, out.until) == ("on the queue or in flight", None)


def test_a_head_that_moves_on_is_the_next_of_its_line(lines):
    assert OrderLines().advance("ord", "k-dead", "dead-1")  # the real script, as a discard
    [dead] = [line for line in ordering.key_lines(OPERATOR, "ord").lines if line.key == "k-dead"]
    assert (dead.head_event, dead.head_sequence, dead.waiting, dead.where) == (
        "dead-2", 2, 2, "out")
    assert OrderLines().counts("ord") == (3, 5)


def test_a_duplicate_of_a_delivered_head_lets_its_line_go_on_in_the_admit(lines):
    from hookline.store.gates import Gate, Verdict

    lines.set(keys.done_key("ord", "out-1"), "1")  # delivered; a second copy comes in
    assert Gate().admit("ord", "out-1", "token", ordering_key="k-out").verdict is (
        Verdict.DUPLICATE)
    assert OrderLines().head("ord", "k-out") == ("out-2", 2)
    assert lines.lrange("hookline", -1, -1) == ["{}"]  # next out, at the consuming end
    assert Gate().admit("ord", "out-1", "token", ordering_key="k-out").verdict is (
        Verdict.DUPLICATE)
    assert OrderLines().head("ord", "k-out") == ("out-2", 2)  # not its head any more


def test_a_held_endpoint_says_what_holds_its_heads(lines):
    EndpointRegistry().pause("ord")
    [retry] = [line for line in ordering.key_lines(OPERATOR, "ord").lines if line.key == "k-retry"]
    assert (retry.reason, retry.until) == ("paused", None)
    assert retry.why == "held in the retry schedule: the endpoint is paused (resume it)"
    EndpointRegistry().lift_pause("ord")
    now_ms = int(time.time() * 1000)
    lines.hset(keys.breaker_key("ord"), mapping={"state": "open", "open_until": now_ms + 10_000})
    [retry] = [line for line in ordering.key_lines(OPERATOR, "ord").lines if line.key == "k-retry"]
    assert retry.reason == "breaker_open"
    assert retry.until is not None and 5 < retry.until - time.time() <= 11
    lines.hset(keys.breaker_key("ord"), mapping={"state": "closed",
                                                 "blocked_until": now_ms + 20_000})
    [retry] = [line for line in ordering.key_lines(OPERATOR, "ord").lines if line.key == "k-retry"]
    assert retry.reason == "blocked"
    assert "Retry-After" in retry.why


def test_under_skip_a_dead_lettered_head_blocks_nothing(quiet_redis):
    EndpointRegistry().add("skipper", "http://127.0.0.1:9/s", ordered=True, order_policy="skip")
    line_up(quiet_redis, "skipper", "k", ["a", "b"])
    dead_letter_head("skipper", "a")
    [line] = ordering.key_lines(OPERATOR, "skipper").lines
    assert line.why == "dead-lettered (rejected): the next delivery of the key goes"
    [counts] = ordering.ordered_counts(OPERATOR)
    assert (counts.blocked, counts.blocked_checked) == (0, 1)


def test_a_page_of_keys_says_how_many_more(lines):
    found = ordering.key_lines(OPERATOR, "ord", limit=2)
    assert [line.key for line in found.lines] == ["k-dead", "k-retry"]
    assert found.more == 1


def test_an_endpoint_that_is_not_ordered_has_no_lines(quiet_redis):
    EndpointRegistry().add("plain", "http://127.0.0.1:9/p")
    found = ordering.key_lines(OPERATOR, "plain")
    assert (found.ordered, found.lines, found.keys_out) == (False, [], 0)


def test_counts_per_ordered_endpoint_with_blocked_keys_among_a_sample(lines, monkeypatch):
    EndpointRegistry().add("plain", "http://127.0.0.1:9/p")
    [counts] = ordering.ordered_counts(OPERATOR)
    assert counts.as_dict() == {"endpoint_id": "ord", "policy": "block", "keys_out": 3,
                                "waiting": 6, "blocked": 1, "blocked_checked": 3}
    for n in range(5):
        line_up(lines, "ord", f"k-blocked-{n}", [f"blocked-{n}", f"next-{n}"])
        dead_letter_head("ord", f"blocked-{n}")
    monkeypatch.setattr(ordering, "BLOCKED_SAMPLE", 2)
    [counts] = ordering.ordered_counts(OPERATOR)
    assert (counts.keys_out, counts.waiting, counts.blocked_checked) == (8, 11, 2)
    assert counts.blocked <= 2  # a lower bound: only the sampled keys were looked at


def test_the_set_of_ordered_endpoints_follows_add_update_and_remove(quiet_redis):
    registry = EndpointRegistry()
    registry.add("ord", "http://127.0.0.1:9/o", ordered=True)
    registry.add("plain", "http://127.0.0.1:9/p")
    assert ordered_ids(quiet_redis) == ["ord"]
    registry.update("plain", ordered=True)
    registry.update("ord", ordered=False)
    assert ordered_ids(quiet_redis) == ["plain"]
    with pytest.raises(EndpointError, match="exists already"):
        registry.add("ord", "http://127.0.0.1:9/o", ordered=True)
    assert ordered_ids(quiet_redis) == ["plain"]  # the one there is not ordered
    registry.remove("plain")
    assert ordered_ids(quiet_redis) == []


def test_a_tenant_sees_the_lines_of_its_own_endpoints_only(quiet_redis):
    for app_id in ("app-a", "app-b"):
        AppRegistry().add(app_id)
        EndpointRegistry().add(f"ord-{app_id}", "http://127.0.0.1:9/o", app=app_id,
                               ordered=True)
        line_up(quiet_redis, f"ord-{app_id}", "k", ["e-1", "e-2"])
    assert [line.key for line in ordering.key_lines(TENANT_A, "ord-app-a").lines] == ["k"]
    with pytest.raises(NotFound):
        ordering.key_lines(TENANT_A, "ord-app-b")
    assert [c.endpoint_id for c in ordering.ordered_counts(TENANT_B)] == ["ord-app-b"]
    assert [c.endpoint_id for c in ordering.ordered_counts(OPERATOR)] == [
        "ord-app-a", "ord-app-b"]


def test_the_gauges_have_one_series_per_ordered_endpoint_and_none_per_key(lines):
    EndpointRegistry().add("plain", "http://127.0.0.1:9/p")
    families = {family.name: family for family in
                RedisStateCollector(lines, lines).collect()}
    for name, expected in (("hookline_ordered_keys", 3), ("hookline_ordered_waiting", 6)):
        assert [(sample.labels, sample.value) for sample in families[name].samples] == [
            ({"endpoint": "ord"}, expected)]
