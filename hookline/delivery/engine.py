"""The delivery engine: one attempt of one event, from the gate to the decision.

``DeliveryEngine.attempt`` is what the Celery task calls. It returns the outcome, and the task
acts on it in one place: :class:`Finished` (delivered, a duplicate, or dead-lettered with a
reason), :class:`Deferred` (the event was not attempted, so no retry is consumed) or
:class:`RetryDue` (the attempt failed; the countdown the retry policy chose). No exception hop
through Celery: a retry costs a park in the schedule, not a traceback.

The sender, the clock and the random source are arguments, so every row of the outcome table
is tested in-process with a fake receiver and a fixed clock.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hookline.core import metrics, redact, tracing
from hookline.core.attempts import waiting_on_receiver
from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.errors import HooklineError
from hookline.core.identity import content_digest
from hookline.core.logs import log_event
from hookline.core.operational_events import OperationalEvent
from hookline.core.policy import Outcome, classify, parse_retry_after, retry_countdown
from hookline.delivery import reporting
from hookline.delivery.retries import UNREADABLE_JITTER, UNREADABLE_LOOK, dead_letter_scheduled
from hookline.delivery.sender import AttemptResult, WebhookEvent, send
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Admission, Gate, Receipt, Settlement, Verdict
from hookline.store.history import AttemptRecord, excerpt
from hookline.store.ordering import OrderLines

#: Stored as the endpoint's ``disabled_reason`` after a 410; "gone" marks it for the gate.
GONE_REASON = "gone: the receiver answered 410 Gone"


@dataclass(frozen=True)
class DeliveryRequest:
    """One event bound for one endpoint, as the task message carries it."""

    endpoint_id: str
    event_type: str
    payload: Any
    event_id: str
    deadline: float | None = None
    #: Attempts already made (deferrals do not count).
    attempts: int = 0
    #: Unix time of the first attempt; None before it.
    first_attempt_at: float | None = None
    #: The rate-limit slot booked when the event was last deferred (ms of Redis time), or 0.
    rate_slot: int = 0
    #: Unix time the event was published (stamped once, at publish, and kept by retries,
    #: redeliveries and replays): the body's ``timestamp`` and the start of the delivery lag.
    enqueued_at: float | None = None
    #: The ordering key given at publish (an ordered endpoint's line; None: the endpoint's).
    ordering_key: str | None = None


@dataclass(frozen=True)
class Finished:
    """The event needs nothing more: ``outcome`` is delivered, duplicate or dead_lettered."""

    outcome: str
    reason: str = ""
    status: int | None = None


@dataclass(frozen=True)
class RetryDue:
    """The attempt failed in a way worth retrying: send again in ``countdown`` seconds.
    ``request`` carries the attempt count and first attempt time to keep."""

    countdown: float
    request: DeliveryRequest
    status: int | None = None
    error: str = ""


@dataclass(frozen=True)
class Deferred:
    """The event was not attempted; try again in ``countdown`` seconds, attempt count unchanged."""

    countdown: float
    reason: str
    request: DeliveryRequest
    #: Seconds the endpoint itself is held (breaker open, its probe out, a Retry-After
    #: block): every event for it would be deferred as long. 0 when the deferral concerns
    #: this event only (in flight elsewhere, its rate slot).
    hold: float = 0.0


#: Deferral reasons that hold the whole endpoint, not one event.
ENDPOINT_HOLDS = frozenset({"paused", "breaker_open", "breaker_probe", "blocked"})
#: The holds of a failing endpoint: a delivery held by one past its max age is dead-lettered
#: as expired (a pause holds it for as long as the pause lasts).
FAILING_HOLDS = ENDPOINT_HOLDS - {"paused"}
#: Longest a half-open breaker's probe is taken to hold the endpoint before looking again.
PROBE_LOOK = 2.0


def settle_outcome(result: AttemptResult, outcome: Outcome) -> str:
    """What settle.lua records for an attempt: a 429 means the receiver is up but busy, so it is
    not a circuit-breaker failure; an unusable URL says nothing about the receiver."""
    if result.refused:
        return "rejected"
    if outcome is Outcome.RETRY:
        return "throttled" if result.status == 429 else "failed"
    return {Outcome.DELIVERED: "delivered", Outcome.GONE: "gone"}.get(outcome, "rejected")


def deferral_countdown(admission: Admission, rng: random.Random | None = None) -> float:
    """How long a deferred event waits: exactly to its booked slot when rate-limited; with a
    little jitter otherwise, so the events an open breaker or a block held back do not all
    come back in the same millisecond."""
    if admission.detail == "rate_limited":
        return admission.wait
    return hold_countdown(admission.detail, admission.wait, rng)


def hold_countdown(reason: str, wait: float, rng: random.Random | None = None) -> float:
    """How long an event for an endpoint held for ``wait`` more seconds waits (``reason``:
    breaker_open, breaker_probe or blocked), with jitter."""
    uniform = (rng or random).uniform
    if reason == "paused":
        return wait  # parked until resume, which restores their order: no jitter
    if reason == "breaker_probe":
        # The probe usually answers in well under its lease: look again soon.
        return min(wait, PROBE_LOOK) + uniform(0.1, 1.0)
    return wait + uniform(0.0, min(1.0 + wait / 10, 5.0))


def _dead_letter_gone(endpoint_id: str) -> None:
    dead_letter_scheduled(endpoint_id, "endpoint_gone")


def _redacted(result: AttemptResult, url: str) -> AttemptResult:
    """``result`` with the URL's credentials and tokens masked in its error and body excerpt
    (both go to logs, the history, the dead-letter queue and the CLI)."""
    error, body = redact.scrub(result.error, url), redact.scrub(result.body_excerpt, url)
    if (error, body) == (result.error, result.body_excerpt):
        return result
    return replace(result, error=error, body_excerpt=body)


#: What the engine returns for one attempt.
AttemptOutcome = Finished | Deferred | RetryDue
Sender = Callable[[Endpoint, WebhookEvent], AttemptResult]


class DeliveryEngine:
    """Runs attempts against the Redis-backed gate and dead-letter queue.

    :param sender: sends one event to one endpoint (default: the pooled HTTP sender).
    :param clock: Unix seconds now (default ``time.time``).
    :param rng: the random source of retry and deferral jitter (default: a new
        ``random.Random``).
    :param on_gone: called with an endpoint id after its first 410, to dead-letter the
        endpoint's scheduled retries (default: ``retries.dead_letter_scheduled``).
    :param on_operational: called with each operational event (an endpoint disabled by a
        410, a dead letter, a breaker opened or closed; default:
        ``hookline.delivery.reporting.report``, which never raises).
    """

    def __init__(self, gate: Gate | None = None, dlq: DeadLetterQueue | None = None, *,
                 sender: Sender = send, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None,
                 on_gone: Callable[[str], Any] | None = None,
                 on_operational: Callable[[OperationalEvent], Any] | None = None) -> None:
        self.gate = gate or Gate()
        self.dlq = dlq or DeadLetterQueue()
        self.lines = OrderLines(self.dlq.redis)
        self._send_event = sender
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_gone = on_gone or _dead_letter_gone
        self._report = on_operational or reporting.report

    def attempt(self, request: DeliveryRequest, *, token: str,
                receipt: Receipt | None = None) -> AttemptOutcome:
        """One attempt of ``request``: the gate, the send, the settle and the decision.

        ``receipt``: what acknowledges the message, when the transport folds that into the
        settle (``hookline.transport.receipt``). Opaque here: it is handed to
        ``Gate.settle`` as it is, and how the message is acknowledged is the transport's."""
        now = self._clock()
        if request.deadline is not None and now >= request.deadline:
            return self.dead_letter(request, "expired", detail="deadline passed before sending",
                                    registered=None)
        digest = content_digest(request.event_type, request.payload)
        admission = self.gate.admit(request.endpoint_id, request.event_id, token,
                                    rate_slot=request.rate_slot, digest=digest,
                                    ordering_key=request.ordering_key)
        match admission.verdict:
            case Verdict.CONFLICT:
                return self.dead_letter(
                    request, "conflict",
                    detail="the event id was sent to this endpoint before with a different "
                           "event type or payload; this copy was not sent")
            case Verdict.DUPLICATE:
                # (A second copy that was its ordered key's head moved the line on, admit.lua.)
                log_event("delivery.duplicate", endpoint_id=request.endpoint_id,
                          event_id=request.event_id)
                metrics.count_duplicate(request.endpoint_id)
                return Finished("duplicate")
            case Verdict.MISSING:
                return self.dead_letter(request, "endpoint_removed", registered=False)
            case Verdict.DISABLED:
                reason = ("endpoint_gone" if admission.detail.startswith("gone")
                          else "endpoint_disabled")
                return self.dead_letter(request, reason, detail=admission.detail)
            case Verdict.POISON:
                return self.dead_letter(request, "worker_lost", detail=admission.detail)
            case Verdict.UNREADABLE:
                # Its secrets do not open here (no key for them, or damaged): reported, never
                # sent with a garbage signature; it waits in the schedule for a fixed key or
                # record (a repair makes it due at once: retries.release_unreadable).
                log_event("delivery.secrets_unreadable", level=logging.ERROR,
                          endpoint_id=request.endpoint_id, event_id=request.event_id,
                          error=admission.detail)
                look = UNREADABLE_LOOK + self._rng.uniform(0, UNREADABLE_JITTER)
                return self._defer(request, "secrets_unreadable", look, look)
            case Verdict.CAPPED:
                # At its max-in-flight: the worker sets it waiting for a slot of its endpoint
                # (a Redis broker's waiting list); elsewhere it looks again shortly.
                return self._defer(request, "capped", self._rng.uniform(0.2, 1.0))
            case Verdict.BUSY:
                # Another worker is sending this very event; look again when its lease ends.
                return self._defer(request, "in_flight",
                                   admission.wait + self._rng.uniform(0.05, 0.5))
            case Verdict.DEFERRED:
                if admission.detail in FAILING_HOLDS and self._held_too_long(request, now):
                    return self.dead_letter(request, "expired", detail=(
                        f"held past max_age by the endpoint's {admission.detail}"))
                hold = 0.0
                if admission.detail in ENDPOINT_HOLDS:
                    hold = (min(admission.wait, PROBE_LOOK)
                            if admission.detail == "breaker_probe" else admission.wait)
                return self._defer(replace(request, rate_slot=admission.rate_slot),
                                   admission.detail, deferral_countdown(admission, self._rng),
                                   hold)
        assert admission.endpoint is not None
        if admission.transition:
            log_event("breaker.half_open", endpoint_id=request.endpoint_id,
                      event_id=request.event_id)
        return self._send(admission.endpoint, request, token, now, digest, admission, receipt)

    def _held_too_long(self, request: DeliveryRequest, now: float) -> bool:
        since = request.first_attempt_at or request.enqueued_at
        if since is None:
            return False
        try:
            endpoint = EndpointRegistry(self.gate.redis).get(request.endpoint_id)
        except HooklineError:  # its secrets do not open: it is not this check's to say
            return False
        return endpoint is not None and endpoint.held_too_long(since, now)

    @staticmethod
    def _defer(request: DeliveryRequest, reason: str, countdown: float,
               hold: float = 0.0) -> Deferred:
        log_event("delivery.deferred", endpoint_id=request.endpoint_id,
                  event_id=request.event_id, reason=reason, attempt=request.attempts,
                  countdown=countdown)
        metrics.count_deferral(request.endpoint_id, reason)
        return Deferred(countdown, reason, request, hold)

    def _send(
        self, endpoint: Endpoint, request: DeliveryRequest, token: str, started: float,
        digest: str = "", admission: Admission | None = None,
        receipt: Receipt | None = None,
    ) -> Finished | RetryDue:
        first_attempt_at = request.first_attempt_at or started
        # The body is fixed at publish: its timestamp is the publish time the message carries,
        # the same on every attempt, retry, redelivery and replay. A message published without
        # one (a bare send_task) gets its first attempt's time, carried from then on.
        published = request.enqueued_at or first_attempt_at
        request = replace(request, attempts=request.attempts + 1,
                          first_attempt_at=first_attempt_at, rate_slot=0, enqueued_at=published)
        event = WebhookEvent(request.event_id, request.event_type, request.payload, published,
                             ordering_key=request.ordering_key, attempt=request.attempts,
                             sequence=admission.sequence if admission else None)
        with waiting_on_receiver():
            sent = self._send_event(endpoint, event)
        result = _redacted(sent, endpoint.url)
        ended = self._clock()
        outcome = Outcome.RETRY if result.status is None else classify(result.status)
        retry_after = None
        if outcome is Outcome.RETRY:
            retry_after = parse_retry_after(result.retry_after, now=ended)
            if retry_after is not None:
                retry_after = min(retry_after, settings().retry_after_cap)
        recorded = settle_outcome(result, outcome)
        record = AttemptRecord(
            attempt=request.attempts, at=ended, outcome=recorded, status=result.status,
            latency=result.latency, error=result.error,
            response=excerpt(result.body_excerpt, settings().history_body_bytes),
        )
        settlement = self._settle(endpoint, request, token, recorded, retry_after, record,
                                  digest, admission.redis_now_ms() if admission else 0, receipt)
        metrics.observe_attempt(endpoint.id, result.status, result.latency)
        if settlement.fenced:
            # This process was declared dead during the attempt: its message went to another
            # worker, whose outcome is the one that counts (same webhook-id if both sent).
            log_event("delivery.fenced", level=logging.WARNING, endpoint_id=endpoint.id,
                      event_id=request.event_id, status=result.status,
                      detail="the outcome came after this worker was declared dead; refused")
            return Finished("fenced", status=result.status)
        if result.refused:
            self._log_attempt("delivery.rejected", request, result, level=logging.WARNING,
                              reason="refused")
            return self.dead_letter(request, "refused", result=result, at=ended)
        if outcome is Outcome.DELIVERED:
            self._log_attempt("delivery.succeeded", request, result)
            metrics.count_outcome(endpoint.id, "delivered", registered=True)
            metrics.observe_lag(ended - published)
            return Finished("delivered", status=result.status)
        if outcome is Outcome.GONE:
            self._log_attempt("delivery.rejected", request, result, level=logging.WARNING,
                              reason="endpoint_gone")
            log_event("endpoint.disabled", level=logging.WARNING, endpoint_id=endpoint.id,
                      reason="gone", status=410)
            self._report(reporting.endpoint_disabled(
                endpoint.id, reason="gone", detail=GONE_REASON, status=410,
                since=endpoint.updated_at))
            finished = self.dead_letter(request, "endpoint_gone", result=result, at=ended)
            self._on_gone(endpoint.id)
            return finished
        if outcome is Outcome.REJECTED:
            self._log_attempt("delivery.rejected", request, result, level=logging.WARNING,
                              reason="rejected")
            return self.dead_letter(request, "rejected", result=result, at=ended)
        return self._schedule_retry(endpoint, request, result, ended, retry_after)

    def _settle(self, endpoint: Endpoint, request: DeliveryRequest, token: str, outcome: str,
                retry_after: float | None, record: AttemptRecord, digest: str = "",
                now_ms: int = 0, receipt: Receipt | None = None) -> Settlement:
        settlement = self.gate.settle(endpoint.id, request.event_id, token, outcome,
                                      retry_after=retry_after, reason=GONE_REASON,
                                      record=record, digest=digest, now_ms=now_ms,
                                      receipt=receipt, event_type=request.event_type,
                                      ordering_key=(request.ordering_key or endpoint.id)
                                      if endpoint.ordered else None)
        if settlement.transition == "opened":
            log_event("breaker.opened", level=logging.WARNING, endpoint_id=endpoint.id,
                      event_id=request.event_id)
        elif settlement.transition == "closed":
            log_event("breaker.closed", endpoint_id=endpoint.id, event_id=request.event_id)
        if settlement.transition in ("opened", "closed"):
            self._report(reporting.breaker_changed(
                endpoint.id, opened=settlement.transition == "opened",
                event_id=request.event_id, attempt=request.attempts))
        if retry_after and not settlement.fenced:
            log_event("endpoint.blocked", endpoint_id=endpoint.id, event_id=request.event_id,
                      seconds=retry_after)
        return settlement

    def _schedule_retry(
        self, endpoint: Endpoint, request: DeliveryRequest, result: AttemptResult, ended: float,
        retry_after: float | None,
    ) -> Finished | RetryDue:
        policy = endpoint.policy()
        countdown = retry_countdown(policy, request.attempts, retry_after=retry_after,
                                    rand=self._rng.random)
        assert request.first_attempt_at is not None
        due = ended + countdown
        if request.attempts >= policy.max_attempts:
            detail = f"attempt {request.attempts} of {policy.max_attempts}"
            return self._give_up(request, result, ended, detail)
        # Time the endpoint was paused does not count: a pause must not dead-letter events.
        paused = endpoint.paused_seconds(request.first_attempt_at, ended)
        if due - request.first_attempt_at - paused > policy.max_age:
            detail = f"next attempt would be past max_age ({policy.max_age:g}s)"
            return self._give_up(request, result, ended, detail)
        if request.deadline is not None and due >= request.deadline:
            self._log_attempt("delivery.gave_up", request, result, level=logging.WARNING,
                              reason="expired")
            return self.dead_letter(request, "expired", result=result, at=ended,
                                    detail="next attempt would be past the deadline")
        self._log_attempt("delivery.retry_scheduled", request, result, countdown=countdown)
        return RetryDue(countdown, request, status=result.status, error=result.error)

    def _give_up(self, request: DeliveryRequest, result: AttemptResult, ended: float,
                 detail: str) -> Finished:
        self._log_attempt("delivery.gave_up", request, result, level=logging.WARNING,
                          reason="exhausted")
        return self.dead_letter(request, "exhausted", result=result, at=ended, detail=detail)

    def dead_letter(
        self,
        request: DeliveryRequest,
        reason: str,
        *,
        result: AttemptResult | None = None,
        at: float | None = None,
        detail: str = "",
        registered: bool | None = True,
    ) -> Finished:
        """Store the event in the dead-letter queue with ``reason`` and log it. ``registered``:
        whether the gate saw the endpoint registered (None: not asked), for its metrics label.
        The head of an ordered endpoint's key keeps its place in the dead letter (a replay
        keeps it), and its key waits for the operator (``block``) or goes on (``skip``)."""
        key = request.ordering_key or request.endpoint_id
        policy = self.lines.policy(request.endpoint_id) if registered is not False else None
        head = self.lines.head(request.endpoint_id, key) if policy else None
        self.dlq.add(
            DeadLetter(
                endpoint_id=request.endpoint_id,
                event_id=request.event_id,
                event_type=request.event_type,
                payload=request.payload,
                reason=reason,
                attempts=request.attempts,
                first_attempt_at=request.first_attempt_at,
                last_attempt_at=at if result is not None else None,
                last_status=result.status if result else None,
                last_error=result.error if result else "",
                last_response=result.body_excerpt if result else "",  # (add() cuts it)
                detail=detail,
                enqueued_at=request.enqueued_at,
                ordering_key=request.ordering_key,
                sequence=head[1] if head and head[0] == request.event_id else None,
                first_attempt_span=tracing.first_attempt(),
            )
        )
        if policy == "skip" and reason != "conflict":  # a conflict is not the head's content
            self.lines.advance(request.endpoint_id, key, request.event_id)
        log_event("delivery.dead_lettered", level=logging.WARNING,
                  endpoint_id=request.endpoint_id, event_id=request.event_id, reason=reason,
                  attempt=request.attempts, status=result.status if result else None,
                  detail=detail or None)
        metrics.count_outcome(request.endpoint_id, "dead_lettered", reason, registered=registered)
        self._report(reporting.dead_lettered(
            request.endpoint_id, request.event_id, request.event_type, reason,
            attempts=request.attempts, first_attempt_at=request.first_attempt_at))
        return Finished("dead_lettered", reason=reason, status=result.status if result else None)

    @staticmethod
    def _log_attempt(
        name: str, request: DeliveryRequest, result: AttemptResult, *,
        level: int = logging.INFO, **extra: Any,
    ) -> None:
        log_event(name, level=level, endpoint_id=request.endpoint_id, event_id=request.event_id,
                  event_type=request.event_type, attempt=request.attempts, status=result.status,
                  error=result.error or None, latency=result.latency, **extra)
