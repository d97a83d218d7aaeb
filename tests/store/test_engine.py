"""The delivery engine's outcome table, in-process: a fake sender returning the AttemptResults
the HTTP sender would, a fixed clock and a seeded random source; the gate, the registry, the
retry schedule and the dead-letter queue are the real ones on the test Redis. No worker, no
HTTP server: every test here runs in milliseconds."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from email.utils import formatdate
from typing import Any

import pytest

from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.policy import compute_backoff, retry_countdown
from hookline.delivery.engine import (
    GONE_REASON,
    Deferred,
    DeliveryEngine,
    DeliveryRequest,
    Finished,
    RetryDue,
    deferral_countdown,
)
from hookline.delivery.retries import park
from hookline.delivery.sender import AttemptResult, WebhookEvent, send
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Admission, Gate, Verdict
from hookline.store.history import AttemptHistory
from hookline.store.schedule import RetrySchedule
from tests.support.records import lease_seconds_left, set_starts

SEED = 1234
#: A whole second, so an HTTP-date Retry-After (second precision) is exact against it.
NOW = 1_800_000_000.0


# -- fakes ------------------------------------------------------------------------------------


class FakeSender:
    """Answers each send with the next result given (the last one repeats) and records what
    it was asked to send."""

    def __init__(self, *results: AttemptResult, clock: FakeClock | None = None) -> None:
        self.results = list(results) or [ok()]
        self.calls: list[tuple[Endpoint, WebhookEvent]] = []
        self.clock = clock

    def __call__(self, endpoint: Endpoint, event: WebhookEvent) -> AttemptResult:
        self.calls.append((endpoint, event))
        result = self.results[min(len(self.calls), len(self.results)) - 1]
        if self.clock is not None:
            self.clock.now += result.latency  # the attempt takes its time
        return result

    @property
    def events(self) -> list[WebhookEvent]:
        return [event for _, event in self.calls]


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CannedGate(Gate):
    """The real gate, except that admit answers ``admission`` (for exact deferral arithmetic,
    which the real gate bases on Redis server time)."""

    def __init__(self, admission: Admission) -> None:
        super().__init__()
        self.admission = admission

    def admit(self, endpoint_id: str, event_id: str, token: str, *, rate_slot: int = 0,
              digest: str = "", ordering_key: str | None = None) -> Admission:
        return self.admission


def ok(status: int = 200) -> AttemptResult:
    return AttemptResult(status=status, latency=0.01, body_excerpt="ok")


def answer(status: int, retry_after: str | None = None) -> AttemptResult:
    return AttemptResult(status=status, latency=0.02, retry_after=retry_after,
                         body_excerpt=f"answer {status}")


def failure(error: str) -> AttemptResult:
    return AttemptResult(status=None, latency=0.5, error=error)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def registry() -> EndpointRegistry:
    return EndpointRegistry()


@pytest.fixture
def endpoint(registry) -> Endpoint:
    return registry.add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/hook")


@pytest.fixture
def dlq() -> DeadLetterQueue:
    return DeadLetterQueue()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gone_calls() -> list[str]:
    return []


@pytest.fixture
def engine_for(dlq, clock, gone_calls):
    """``engine_for(sender, **options)``: an engine on the real gate and dead-letter queue,
    the fixed clock, ``random.Random(SEED)`` and a recording on_gone."""

    def build(sender: Any, **options: Any) -> DeliveryEngine:
        options = {"gate": Gate(), "clock": clock, "rng": random.Random(SEED),
                   "on_gone": gone_calls.append, **options}
        return DeliveryEngine(options.pop("gate"), dlq, sender=sender, **options)

    return build


def request_for(endpoint_id: str, **fields: Any) -> DeliveryRequest:
    return DeliveryRequest(endpoint_id=endpoint_id, event_type="invoice.paid",
                           payload={"invoice": 42}, event_id=f"evt-{uuid.uuid4().hex[:12]}",
                           **fields)


def attempt(engine: DeliveryEngine, request: DeliveryRequest):
    return engine.attempt(request, token=uuid.uuid4().hex)


def only_entry(dlq: DeadLetterQueue) -> DeadLetter:
    entries = dlq.find()
    assert len(entries) == 1, entries
    return entries[0]


def first_backoff(attempt_number: int = 1, seed: int = SEED) -> float:
    """The countdown the policy gives after failed attempt ``attempt_number``, with the
    engine's first random draw."""
    return retry_countdown(settings().retry_policy, attempt_number,
                           rand=random.Random(seed).random)


# -- 2xx: delivered; delivered already: a duplicate ---------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_a_2xx_is_delivered(endpoint, engine_for, dlq, clock, status):
    sender = FakeSender(ok(status))
    request = request_for(endpoint.id)

    result = attempt(engine_for(sender), request)

    assert result == Finished("delivered", status=status)
    assert len(sender.calls) == 1
    sent_to, event = sender.calls[0]
    assert sent_to.id == endpoint.id and sent_to.url == endpoint.url
    assert event == WebhookEvent(request.event_id, "invoice.paid", {"invoice": 42}, clock.now)
    assert Gate().is_delivered(endpoint.id, request.event_id)
    assert dlq.count() == 0
    [record] = AttemptHistory().attempts(endpoint.id, request.event_id)
    assert (record.attempt, record.outcome, record.status) == (1, "delivered", status)


def test_an_event_delivered_already_is_a_duplicate_and_nothing_is_sent(endpoint, engine_for,
                                                                        dlq):
    sender = FakeSender(ok())
    engine = engine_for(sender)
    request = request_for(endpoint.id)
    assert attempt(engine, request) == Finished("delivered", status=200)

    again = attempt(engine, replace(request, attempts=3))

    assert again == Finished("duplicate")
    assert len(sender.calls) == 1  # only the first
    assert dlq.count() == 0


# -- retryable: 408, 425, 429, 5xx and every network failure -------------------------------------

RETRYABLE = [
    pytest.param(answer(408), id="408"),
    pytest.param(answer(425), id="425"),
    pytest.param(answer(429), id="429"),
    pytest.param(answer(500), id="500"),
    pytest.param(answer(502), id="502"),
    pytest.param(answer(503), id="503"),
    pytest.param(answer(504), id="504"),
    pytest.param(answer(599), id="599"),
    pytest.param(failure("connect_error: connection refused or unreachable"), id="connect"),
    pytest.param(failure("connect_timeout"), id="connect-timeout"),
    pytest.param(failure("read_timeout"), id="read-timeout"),
    pytest.param(failure("attempt_timeout: no complete answer within 3s"), id="attempt-timeout"),
    pytest.param(failure("dns_error"), id="dns"),
    pytest.param(failure("tls_error"), id="tls"),
    pytest.param(failure("connection_closed"), id="closed"),
]


@pytest.mark.parametrize("result", RETRYABLE)
def test_a_retryable_failure_is_due_again_after_the_policy_backoff(endpoint, engine_for, dlq,
                                                                    clock, result):
    sender = FakeSender(result)
    request = request_for(endpoint.id)

    outcome = attempt(engine_for(sender), request)

    assert isinstance(outcome, RetryDue)
    assert outcome.countdown == pytest.approx(first_backoff(1))
    assert outcome.status == result.status
    assert outcome.error == result.error
    # The retry carries the attempt made and when the first one was; the rest is the event. A
    # message without a publish time gets the first attempt's, carried from then on.
    assert outcome.request == replace(request, attempts=1, first_attempt_at=clock.now,
                                      enqueued_at=clock.now)
    assert len(sender.calls) == 1
    assert dlq.count() == 0
    assert not Gate().is_delivered(endpoint.id, request.event_id)
    # A 429 says the receiver is up (throttled), everything else counts toward the breaker.
    failures = Gate().breaker_status(endpoint.id).failures
    assert failures == (0 if result.status == 429 else 1)
    [record] = AttemptHistory().attempts(endpoint.id, request.event_id)
    assert record.outcome == ("throttled" if result.status == 429 else "failed")


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize(("retry_after", "expected"), [
    pytest.param("2", 2.0, id="seconds"),
    pytest.param("120", 3.0, id="capped"),  # HOOKLINE_RETRY_AFTER_CAP=3 in the test env
    pytest.param(formatdate(NOW + 600, usegmt=True), 3.0, id="http-date-capped"),
    pytest.param(formatdate(NOW + 2, usegmt=True), 2.0, id="http-date"),
])
def test_retry_after_lengthens_the_countdown_up_to_the_cap(endpoint, engine_for, status,
                                                           retry_after, expected):
    assert settings().retry_after_cap == 3.0
    # The clock stays at NOW: the HTTP date is read against the injected clock.
    sender = FakeSender(AttemptResult(status=status, latency=0.0, retry_after=retry_after))

    outcome = attempt(engine_for(sender), request_for(endpoint.id))

    assert isinstance(outcome, RetryDue)
    assert outcome.countdown == pytest.approx(expected)
    assert outcome.status == status
    # ... and the whole endpoint is blocked that long (Redis time): the next event waits.
    blocked_until = Gate().breaker_status(endpoint.id).blocked_until
    assert blocked_until is not None


@pytest.mark.parametrize("retry_after", ["0", "", "soon", "-5"])
def test_a_short_or_unreadable_retry_after_leaves_the_policy_backoff(endpoint, engine_for,
                                                                     retry_after):
    sender = FakeSender(answer(503, retry_after=retry_after))

    outcome = attempt(engine_for(sender), request_for(endpoint.id))

    assert isinstance(outcome, RetryDue)
    assert outcome.countdown == pytest.approx(first_backoff(1))
    assert Gate().breaker_status(endpoint.id).blocked_until is None


# -- 410 Gone ---------------------------------------------------------------------------------


def test_410_disables_the_endpoint_and_dead_letters_the_event(endpoint, registry, engine_for,
                                                              dlq, gone_calls):
    sender = FakeSender(answer(410))
    engine = engine_for(sender)
    request = request_for(endpoint.id, attempts=2, first_attempt_at=NOW - 30)

    outcome = attempt(engine, request)

    assert outcome == Finished("dead_lettered", reason="endpoint_gone", status=410)
    entry = only_entry(dlq)
    assert (entry.id, entry.reason, entry.attempts, entry.last_status) == (
        f"{endpoint.id}/{request.event_id}", "endpoint_gone", 3, 410)
    assert entry.first_attempt_at == NOW - 30 and entry.last_attempt_at == NOW
    assert (entry.event_type, entry.payload) == ("invoice.paid", {"invoice": 42})
    saved = registry.require(endpoint.id)
    assert saved.enabled is False and saved.disabled_reason == GONE_REASON
    assert gone_calls == [endpoint.id]

    # The next event for it is dead-lettered without a send.
    later = request_for(endpoint.id)
    assert attempt(engine, later) == Finished("dead_lettered", reason="endpoint_gone")
    assert len(sender.calls) == 1
    assert dlq.get(f"{endpoint.id}/{later.event_id}").reason == "endpoint_gone"
    assert gone_calls == [endpoint.id]  # once, on the 410 itself


def test_410_drops_the_endpoints_scheduled_retries_to_the_dlq(endpoint, registry, engine_for,
                                                              dlq):
    """The default on_gone: the endpoint's parked retries (and only its) are dead-lettered."""
    from hookline.worker.celery import worker_app

    other = registry.add(f"other-{uuid.uuid4().hex[:6]}", "http://127.0.0.1:9/other")
    schedule = RetrySchedule()

    def park_retry(endpoint_id: str, event_id: str) -> None:
        park(worker_app, schedule, task_id=uuid.uuid4().hex,
             args=[endpoint_id, "invoice.paid", {"parked": event_id}],
             kwargs={"event_id": event_id, "attempts": 2, "first_attempt_at": NOW - 60},
             retries=2, countdown=3600, last_status=503, last_error="")

    park_retry(endpoint.id, "parked-1")
    park_retry(endpoint.id, "parked-2")
    park_retry(other.id, "parked-3")
    engine = engine_for(FakeSender(answer(410)), on_gone=None)

    outcome = attempt(engine, request_for(endpoint.id))

    assert outcome.reason == "endpoint_gone"
    assert {retry.event_id for retry in schedule.scheduled()} == {"parked-3"}
    for event_id in ("parked-1", "parked-2"):
        entry = dlq.get(f"{endpoint.id}/{event_id}")
        assert entry is not None and entry.reason == "endpoint_gone"
        assert (entry.attempts, entry.last_status, entry.payload) == (2, 503,
                                                                       {"parked": event_id})
    assert dlq.get(f"{other.id}/parked-3") is None
    assert dlq.count() == 3


# -- other 3xx/4xx: rejected at once ------------------------------------------------------------


@pytest.mark.parametrize("status", [300, 301, 302, 304, 307, 308, 400, 401, 403, 404, 405,
                                    409, 413, 415, 422, 451])
def test_another_3xx_or_4xx_is_dead_lettered_at_once(endpoint, registry, engine_for, dlq,
                                                     gone_calls, status):
    sender = FakeSender(answer(status))
    request = request_for(endpoint.id)

    outcome = attempt(engine_for(sender), request)

    assert outcome == Finished("dead_lettered", reason="rejected", status=status)
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts, entry.last_status) == ("rejected", 1, status)
    assert entry.first_attempt_at == NOW
    assert len(sender.calls) == 1
    assert registry.require(endpoint.id).enabled  # the endpoint is fine; the event is not
    assert gone_calls == []
    assert Gate().breaker_status(endpoint.id).failures == 0  # the receiver answered


# -- refused by the SSRF guard, or no usable URL --------------------------------------------------


@pytest.mark.parametrize("error", [
    "refused: 169.254.169.254 is link-local, not a public address",
    "invalid_url",
])
def test_a_refused_target_is_dead_lettered_with_reason_refused(endpoint, engine_for, dlq,
                                                               error):
    sender = FakeSender(AttemptResult(status=None, latency=0.001, error=error, refused=True))

    outcome = attempt(engine_for(sender), request_for(endpoint.id))

    assert outcome == Finished("dead_lettered", reason="refused")
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts, entry.last_error) == ("refused", 1, error)
    assert Gate().breaker_status(endpoint.id).failures == 0  # says nothing about the receiver


@pytest.mark.parametrize("stored_url", [
    pytest.param("http://169.254.169.254/latest/meta-data", id="ssrf-guard"),
    pytest.param("http://10.1.2.3/hook", id="private-address"),
    pytest.param("mailto:ops@example.com", id="malformed"),
])
def test_the_real_sender_refuses_before_connecting(endpoint, engine_for, dlq, stored_url):
    """The HTTP sender's refusals, end to end with no network: a URL stored before the guard's
    settings changed (written straight into the endpoint's hash)."""
    store.client().hset(keys.endpoint_key(endpoint.id), "url", stored_url)

    outcome = attempt(engine_for(send), request_for(endpoint.id))

    assert outcome == Finished("dead_lettered", reason="refused")
    entry = only_entry(dlq)
    assert entry.reason == "refused"
    assert entry.last_error.startswith("refused" if "http" in stored_url else "invalid_url")
    assert "meta-data" not in entry.last_error and "/hook" not in entry.last_error  # no path


# -- exhausted: attempts and max_age --------------------------------------------------------------


def test_retries_are_exhausted_after_max_attempts(endpoint, engine_for, dlq, clock):
    """Each RetryDue carries the count on; the policy's last attempt dead-letters."""
    max_attempts = settings().retry_policy.max_attempts
    sender = FakeSender(answer(500), clock=clock)
    engine = engine_for(sender)
    request = request_for(endpoint.id)
    first_at = clock.now

    for made in range(1, max_attempts):
        outcome = attempt(engine, request)
        assert isinstance(outcome, RetryDue), outcome
        assert outcome.request.attempts == made
        assert outcome.request.first_attempt_at == first_at
        request = outcome.request
        clock.now += outcome.countdown

    outcome = attempt(engine, request)

    assert outcome == Finished("dead_lettered", reason="exhausted", status=500)
    assert len(sender.calls) == max_attempts
    # No publish time in the message: the body's timestamp is the first attempt's, on every retry.
    assert {event.timestamp for event in sender.events} == {first_at}
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts, entry.last_status) == ("exhausted", max_attempts, 500)
    assert entry.detail == f"attempt {max_attempts} of {max_attempts}"
    assert entry.first_attempt_at == first_at and entry.last_attempt_at == clock.now


def test_an_endpoint_policy_override_sets_max_attempts(registry, engine_for, dlq):
    endpoint = registry.add("ep-short", "http://127.0.0.1:9/hook",
                            retry_policy={"max_attempts": 2})
    engine = engine_for(FakeSender(failure("connect_timeout")))

    first = attempt(engine, request_for(endpoint.id))
    assert isinstance(first, RetryDue)
    outcome = attempt(engine, first.request)

    assert outcome == Finished("dead_lettered", reason="exhausted")
    assert only_entry(dlq).detail == "attempt 2 of 2"
    assert only_entry(dlq).last_error == "connect_timeout"


@pytest.mark.parametrize(("age", "expected"), [
    pytest.param(59.95, "exhausted", id="next-past-max-age"),
    pytest.param(50.0, "retry", id="within-max-age"),
])
def test_retries_are_exhausted_past_max_age(endpoint, engine_for, dlq, clock, age, expected):
    policy = settings().retry_policy
    assert policy.max_age == 60
    request = request_for(endpoint.id, attempts=1, first_attempt_at=clock.now - age)

    outcome = attempt(engine_for(FakeSender(answer(502))), request)

    if expected == "retry":
        assert isinstance(outcome, RetryDue)
        assert outcome.request.attempts == 2
        assert outcome.request.first_attempt_at == clock.now - age
        assert dlq.count() == 0
        return
    assert outcome == Finished("dead_lettered", reason="exhausted", status=502)
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts) == ("exhausted", 2)
    assert entry.detail == "next attempt would be past max_age (60s)"


# -- expired: the event's deadline --------------------------------------------------------------


@pytest.mark.parametrize("before", [0.0, 0.001, 3600.0])
def test_a_deadline_passed_before_sending_dead_letters_without_a_send(endpoint, engine_for, dlq,
                                                                      clock, before):
    sender = FakeSender(ok())
    request = request_for(endpoint.id, deadline=clock.now - before, attempts=2,
                          first_attempt_at=clock.now - 10)

    outcome = attempt(engine_for(sender), request)

    assert outcome == Finished("dead_lettered", reason="expired")
    assert sender.calls == []
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts, entry.last_status) == ("expired", 2, None)
    assert entry.detail == "deadline passed before sending"
    # Nothing was admitted: no lease left behind, no attempt recorded.
    assert not store.client().exists(keys.delivery_key(endpoint.id, request.event_id))
    assert AttemptHistory().attempts(endpoint.id, request.event_id) == []


@pytest.mark.parametrize(("left", "expected"), [
    pytest.param(0.1, "expired", id="next-attempt-past-deadline"),
    pytest.param(100.0, "retry", id="deadline-far"),
])
def test_a_retry_due_past_the_deadline_is_expired(endpoint, engine_for, dlq, clock, left,
                                                  expected):
    assert first_backoff(1) > 0.1  # at least 0.2 * (1 - 0.2) in the test env
    sender = FakeSender(answer(503))
    request = request_for(endpoint.id, deadline=clock.now + left)

    outcome = attempt(engine_for(sender), request)

    assert len(sender.calls) == 1
    if expected == "retry":
        assert isinstance(outcome, RetryDue) and outcome.request.deadline == clock.now + left
        return
    assert outcome == Finished("dead_lettered", reason="expired", status=503)
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts, entry.last_status) == ("expired", 1, 503)
    assert entry.detail == "next attempt would be past the deadline"


# -- removed or disabled endpoints ----------------------------------------------------------------


def test_an_endpoint_never_added_is_endpoint_removed(engine_for, dlq):
    sender = FakeSender(ok())

    outcome = attempt(engine_for(sender), request_for("ep-nowhere"))

    assert outcome == Finished("dead_lettered", reason="endpoint_removed")
    assert sender.calls == []
    assert only_entry(dlq).reason == "endpoint_removed"


def test_a_removed_endpoint_is_endpoint_removed(endpoint, registry, engine_for, dlq):
    registry.remove(endpoint.id)
    sender = FakeSender(ok())

    outcome = attempt(engine_for(sender), request_for(endpoint.id, attempts=1))

    assert outcome == Finished("dead_lettered", reason="endpoint_removed")
    assert sender.calls == []
    entry = only_entry(dlq)
    assert (entry.reason, entry.attempts) == ("endpoint_removed", 1)


def test_a_disabled_endpoint_is_endpoint_disabled(endpoint, registry, engine_for, dlq,
                                                  gone_calls):
    registry.disable(endpoint.id, "maintenance until Monday")
    sender = FakeSender(ok())

    outcome = attempt(engine_for(sender), request_for(endpoint.id))

    assert outcome == Finished("dead_lettered", reason="endpoint_disabled")
    assert sender.calls == []
    entry = only_entry(dlq)
    assert (entry.reason, entry.detail) == ("endpoint_disabled", "maintenance until Monday")
    assert gone_calls == []


# -- deferrals: no attempt consumed ---------------------------------------------------------------


def assert_deferred_unchanged(outcome: Any, request: DeliveryRequest, reason: str) -> Deferred:
    assert isinstance(outcome, Deferred), outcome
    assert outcome.reason == reason
    assert outcome.request.attempts == request.attempts
    assert outcome.request.first_attempt_at == request.first_attempt_at
    assert outcome.countdown > 0
    return outcome


def test_an_open_breaker_defers_without_consuming_an_attempt(endpoint, engine_for, dlq, clock):
    threshold = settings().breaker_threshold
    sender = FakeSender(answer(500))
    engine = engine_for(sender)
    for _ in range(threshold):
        assert isinstance(attempt(engine, request_for(endpoint.id)), RetryDue)
    assert Gate().breaker_status(endpoint.id).state == "open"
    request = request_for(endpoint.id, attempts=2, first_attempt_at=clock.now - 5)

    outcome = assert_deferred_unchanged(attempt(engine, request), request, "breaker_open")

    assert outcome.request == request
    assert len(sender.calls) == threshold  # nothing sent for the deferred event
    cooldown = settings().breaker_cooldown
    assert outcome.countdown <= cooldown + min(1.0 + cooldown / 10, 5.0)
    assert dlq.count() == 0


def test_a_delivery_held_by_an_open_breaker_past_its_max_age_is_dead_lettered_expired(
        endpoint, engine_for, dlq, clock):
    """Deferrals are not attempts, but a failing endpoint's breaker does not hold an event for
    ever: past its max age, counted from its first attempt (or its publish, never attempted),
    it is dead-lettered as expired, nothing sent."""
    sender = FakeSender(answer(500))
    engine = engine_for(sender)
    for _ in range(settings().breaker_threshold):
        attempt(engine, request_for(endpoint.id))
    max_age = settings().retry_policy.max_age
    young = request_for(endpoint.id, enqueued_at=clock.now - max_age + 60)
    assert isinstance(attempt(engine, young), Deferred)
    old = request_for(endpoint.id, enqueued_at=clock.now - max_age - 1)
    assert attempt(engine, old) == Finished("dead_lettered", reason="expired")
    assert only_entry(dlq).reason == "expired" and "breaker_open" in only_entry(dlq).detail
    assert len(sender.calls) == settings().breaker_threshold


def test_a_spent_rate_budget_defers_to_the_booked_slot(registry, engine_for, dlq):
    endpoint = registry.add("ep-rated", "http://127.0.0.1:9/hook", rate="1/s", burst=1)
    sender = FakeSender(ok())
    engine = engine_for(sender)
    assert attempt(engine, request_for(endpoint.id)) == Finished("delivered", status=200)
    request = request_for(endpoint.id, attempts=1, first_attempt_at=NOW - 1)

    outcome = assert_deferred_unchanged(attempt(engine, request), request, "rate_limited")

    assert outcome.request.rate_slot > 0  # the slot booked for it
    assert outcome.request == replace(request, rate_slot=outcome.request.rate_slot)
    assert outcome.countdown <= 1.0  # to its slot, no jitter: one interval at most
    assert len(sender.calls) == 1

    # Back before its slot, it keeps the slot and is deferred again, still unsent.
    again = assert_deferred_unchanged(attempt(engine, outcome.request), request, "rate_limited")
    assert again.request.rate_slot == outcome.request.rate_slot
    assert again.countdown <= outcome.countdown
    assert len(sender.calls) == 1
    assert dlq.count() == 0


def test_a_retry_after_block_defers_the_endpoints_other_events(endpoint, engine_for, dlq):
    sender = FakeSender(answer(429, retry_after="2"))
    engine = engine_for(sender)
    first = attempt(engine, request_for(endpoint.id))
    assert isinstance(first, RetryDue) and first.countdown == pytest.approx(2.0)
    request = request_for(endpoint.id)

    outcome = assert_deferred_unchanged(attempt(engine, request), request, "blocked")

    assert outcome.request == request
    assert outcome.countdown <= 2.0 + min(1.0 + 2.0 / 10, 5.0)
    assert len(sender.calls) == 1
    assert dlq.count() == 0


def test_an_event_another_worker_is_sending_waits_for_its_lease(endpoint, engine_for, dlq):
    request = request_for(endpoint.id)
    assert Gate().admit(endpoint.id, request.event_id, "other-worker").verdict is Verdict.ADMITTED
    sender = FakeSender(ok())

    outcome = assert_deferred_unchanged(attempt(engine_for(sender), request), request,
                                        "in_flight")

    # The other attempt's lease plus a little jitter.
    lease = lease_seconds_left(store.client(), endpoint.id, request.event_id)
    assert lease + 0.05 <= outcome.countdown <= lease + 0.5 + 0.1
    assert sender.calls == []
    assert dlq.count() == 0


def test_an_event_started_too_often_is_dead_lettered_as_worker_lost(endpoint, engine_for, dlq):
    request = request_for(endpoint.id, attempts=1)
    set_starts(store.client(), endpoint.id, request.event_id, settings().max_unsettled_starts)
    sender = FakeSender(ok())

    outcome = attempt(engine_for(sender), request)

    assert outcome == Finished("dead_lettered", reason="worker_lost")
    assert sender.calls == []
    assert only_entry(dlq).reason == "worker_lost"


# -- determinism: the injected rng and clock ------------------------------------------------------


def test_the_countdown_follows_the_policy_with_the_injected_rng(endpoint, engine_for, clock):
    policy = settings().retry_policy
    reference = random.Random(SEED)
    engine = engine_for(FakeSender(answer(500), clock=clock))
    request = request_for(endpoint.id)
    countdowns = []
    for made in range(1, policy.max_attempts):
        outcome = attempt(engine, request)
        assert isinstance(outcome, RetryDue)
        nominal = compute_backoff(policy, made, rand=lambda: 0.0)
        assert nominal * (1 - policy.jitter) <= outcome.countdown <= nominal
        assert outcome.countdown == compute_backoff(policy, made, rand=reference.random)
        countdowns.append(outcome.countdown)
        request = outcome.request
        clock.now += outcome.countdown

    # The same seed gives the same countdowns; jitter actually varies them from nominal.
    assert countdowns != [compute_backoff(policy, n, rand=lambda: 0.0)
                          for n in range(1, policy.max_attempts)]


def test_the_same_seed_gives_the_same_countdowns(registry, engine_for):
    runs = []
    for run in range(2):
        endpoint = registry.add(f"ep-seed-{run}", "http://127.0.0.1:9/hook")
        engine = engine_for(FakeSender(failure("read_timeout")), rng=random.Random(99))
        runs.append([attempt(engine, request_for(endpoint.id)).countdown for _ in range(3)])
    assert runs[0] == runs[1]
    assert len(set(runs[0])) == 3  # three draws, not one value repeated


def test_an_endpoint_policy_without_jitter_gives_the_exact_schedule(registry, engine_for,
                                                                    clock):
    endpoint = registry.add("ep-exact", "http://127.0.0.1:9/hook", retry_policy={
        "initial_backoff": 10, "multiplier": 3, "max_backoff": 50, "jitter": 0,
        "max_attempts": 5, "max_age": 3600})
    engine = engine_for(FakeSender(answer(503), clock=clock))
    request = request_for(endpoint.id)
    countdowns = []
    for _ in range(4):
        outcome = attempt(engine, request)
        countdowns.append(outcome.countdown)
        request = outcome.request
        clock.now += outcome.countdown
    assert countdowns == [10, 30, 50, 50]
    assert request.attempts == 4 and request.first_attempt_at == NOW


@pytest.mark.parametrize(("admission", "low", "high"), [
    pytest.param(Admission(Verdict.DEFERRED, detail="breaker_open", wait=1.5), 1.5, 1.5 + 1.15,
                 id="breaker-open"),
    pytest.param(Admission(Verdict.DEFERRED, detail="blocked", wait=3.0), 3.0, 3.0 + 1.3,
                 id="blocked"),
    pytest.param(Admission(Verdict.DEFERRED, detail="breaker_probe", wait=10.0), 2.1, 3.0,
                 id="breaker-probe"),
    pytest.param(Admission(Verdict.DEFERRED, detail="rate_limited", wait=0.25, rate_slot=7),
                 0.25, 0.25, id="rate-limited"),
])
def test_a_deferrals_jitter_comes_from_the_injected_rng(endpoint, engine_for, admission, low,
                                                        high):
    sender = FakeSender(ok())
    engine = engine_for(sender, gate=CannedGate(admission), rng=random.Random(SEED))
    request = request_for(endpoint.id, attempts=1, first_attempt_at=NOW - 1)

    outcome = attempt(engine, request)

    assert isinstance(outcome, Deferred) and outcome.reason == admission.detail
    assert outcome.countdown == deferral_countdown(admission, random.Random(SEED))
    assert low <= outcome.countdown <= high
    assert outcome.request == replace(request, rate_slot=admission.rate_slot)
    assert sender.calls == []
    # Another seed, another jitter (except for the rate limit, which has none).
    other = engine_for(sender, gate=CannedGate(admission), rng=random.Random(SEED + 1))
    differs = attempt(other, request).countdown != outcome.countdown
    assert differs is (admission.detail != "rate_limited")
