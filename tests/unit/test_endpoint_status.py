"""The endpoint's status line (``hookline.service.endpoint_status.status_line``): made of the
state Redis holds (breaker, pause, disabled reason, Retry-After, deliveries held, the oldest
one's age), never of the retry policy."""

from __future__ import annotations

import calendar

from hookline.service.endpoint_status import StatusFacts, span, status_line, status_tone

#: 2026-03-02 12:06:30 UTC
NOW = calendar.timegm((2026, 3, 2, 12, 6, 30))


def at(hour: int, minute: int) -> float:
    return calendar.timegm((2026, 3, 2, hour, minute, 0))


def test_an_open_breaker_says_since_when_how_many_are_held_the_next_probe_and_max_age() -> None:
    facts = StatusFacts(now=NOW, breaker_state="open", failures=5, opened_at=at(12, 4),
                        open_until=at(12, 9), scheduled=312,
                        oldest_since=NOW - 3600, max_age=48 * 3600)
    assert status_line(facts) == ("breaker open since 12:04 UTC; 312 deliveries held; "
                                  "next probe 12:09 UTC; the oldest dead-letters at max age "
                                  "in 47 h")
    assert status_tone(facts) == "failing"


def test_an_open_breaker_whose_cooldown_is_over_waits_for_its_probe() -> None:
    facts = StatusFacts(now=NOW, breaker_state="open", failures=5, open_until=at(12, 5),
                        last_error="HTTP 503", last_error_at=at(12, 4))
    assert status_line(facts) == ("breaker open: the next attempt is its probe; 5 failures in "
                                  "a row; last error HTTP 503 at 12:04 UTC")


def test_a_half_open_breaker_with_its_probe_out() -> None:
    facts = StatusFacts(now=NOW, breaker_state="half_open", probe_until=at(12, 7),
                        scheduled=1)
    assert status_line(facts) == ("breaker half-open: one probe attempt is out; 1 delivery "
                                  "held; the probe times out at 12:07 UTC")


def test_a_disabled_endpoint_says_why_and_since_when_and_nothing_of_its_breaker() -> None:
    facts = StatusFacts(now=NOW, enabled=False, disabled_at=at(11, 58),
                        disabled_reason="gone: the receiver answered 410 Gone",
                        breaker_state="open", open_until=at(12, 9))
    assert status_line(facts) == ("disabled since 11:58 UTC (gone: the receiver answered 410 "
                                  "Gone); new deliveries are dead-lettered")
    assert status_tone(facts) == "disabled"


def test_a_paused_endpoint_holds_its_deliveries_until_resumed() -> None:
    facts = StatusFacts(now=NOW, paused_at=at(9, 0), scheduled=3, oldest_since=NOW - 7200,
                        max_age=3 * 3600)
    assert status_line(facts) == ("paused since 09:00 UTC; 3 deliveries held until it is "
                                  "resumed; the oldest dead-letters at max age in 60 min")
    assert status_tone(facts) == "held"


def test_a_retry_after_block() -> None:
    facts = StatusFacts(now=NOW, blocked_until=at(12, 10), scheduled=2)
    assert status_line(facts) == ("held back by the receiver's Retry-After until 12:10 UTC; "
                                  "2 deliveries held")


def test_a_block_that_ran_out_holds_nothing() -> None:
    facts = StatusFacts(now=NOW, blocked_until=at(12, 0), last_success_at=at(12, 5))
    assert status_line(facts) == "delivering; last delivered 12:05 UTC"
    assert status_tone(facts) == "ok"


def test_a_healthy_endpoint_with_retries_waiting_and_one_past_its_max_age() -> None:
    facts = StatusFacts(now=NOW, scheduled=4, oldest_since=NOW - 4000, max_age=3600,
                        oldest_sampled=True, last_success_at=at(12, 6))
    assert status_line(facts) == ("delivering; 4 deliveries waiting to retry; the oldest read "
                                  "is past its max age: dead-lettered at its next turn; last "
                                  "delivered 12:06 UTC")


def test_a_new_endpoint_has_had_no_attempt() -> None:
    assert status_line(StatusFacts(now=NOW)) == "delivering; no attempt yet"


def test_times_on_another_day_carry_their_date() -> None:
    facts = StatusFacts(now=NOW, enabled=False, disabled_at=at(12, 0) - 86400)
    assert status_line(facts).startswith("disabled since 2026-03-01 12:00 UTC")


def test_spans_read_as_people_say_them() -> None:
    assert [span(s) for s in (-5, 40, 600, 47 * 3600, 5 * 86400)] == [
        "0 s", "40 s", "10 min", "47 h", "5 days"]
