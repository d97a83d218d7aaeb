"""An event checked where it entered, published later: by ``send_webhook`` at once, at a
transaction's commit, or by the outbox's relay from the host's database."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from hookline.core import tracing
from hookline.core.config import settings
from hookline.core.errors import EventIdConflict, UnregisteredEndpoint, WebhookInputError
from hookline.core.messages import DELIVERY_QUEUE, TASK_NAME, shown_args, stamped
from hookline.delivery.publisher import enqueue_delivery, publishing_app
from hookline.store import connection as store
from hookline.store.identity import CLAIM_HEADER, Claim, ClaimRefused, claim_keys
from hookline.store.keys import doorbell_key
from hookline.transport.bounded import bounded


@dataclass(frozen=True)
class PreparedEvent:
    """An event that passed :func:`send_webhook`'s checks, ready to be enqueued as it is."""

    endpoint_id: str
    event_type: str
    payload: Any
    event_id: str
    deadline: float | None
    #: Bytes of the payload as compact JSON (measured once, shown in Flower).
    size: int
    #: The content digest the event id is bound to (``hookline.core.identity``).
    digest: str = ""
    #: The id is not claimed yet: the publish claims it (``hookline_claim``, claim_push.lua).
    unclaimed: bool = False
    #: An ordered endpoint's line (None: the endpoint's own key).
    ordering_key: str | None = None
    #: The trace context it was written in (an outbox row's ``traceparent``; None: the
    #: current one, where traces are on).
    traceparent: str | None = None


def raise_refused(claim: Claim, endpoint_id: str, event_id: str) -> None:
    """The error a refused claim of ``event_id`` at ``endpoint_id`` means (none if it was
    not refused)."""
    if claim is Claim.MISSING:
        from hookline.core.endpoint import UnknownEndpoint  # its message, not the model

        raise UnregisteredEndpoint(str(UnknownEndpoint(endpoint_id)))
    if claim is Claim.CONFLICT:
        raise EventIdConflict(endpoint_id, event_id)


@bounded
def enqueue_prepared(event: PreparedEvent) -> str:
    """Publish a prepared event; the Celery task id is the event id, so Flower finds it. An
    unclaimed event's id is claimed by the publish itself (WebhookInputError or
    EventIdConflict when refused: nothing is enqueued then)."""
    headers = {CLAIM_HEADER: event.digest} if event.unclaimed else {}
    headers.update(_trace(event))
    try:
        ordering = {"ordering_key": event.ordering_key} if event.ordering_key else {}
        enqueue_delivery((event.endpoint_id, event.event_type, event.payload),
                         {"event_id": event.event_id, "deadline": event.deadline, **ordering},
                         task_id=event.event_id, headers=headers,
                         argsrepr=shown_args(event.endpoint_id, event.event_type, None,
                                             size=event.size))
    except ClaimRefused as refused:
        raise_refused(refused.claim, event.endpoint_id, event.event_id)
        raise
    return event.event_id


@bounded
def enqueue_prepared_many(events: Sequence[PreparedEvent]) -> list[WebhookInputError | None]:
    """Publish prepared events in order, each as :func:`enqueue_prepared` would; returns, per
    event, the refusal of its claim (None: published). Where the broker is Hookline's own
    plain Redis, the messages are built here and each is claimed and pushed by claim_push.lua
    in one pipeline: one round trip for the lot (the outbox's relay publishes its batches so).
    Raises like a publish when Redis is away: some of the events may have been pushed, and
    publishing them again under their ids delivers each once."""
    from hookline.delivery.fanout import pushed_by_script  # the relay's, not send_webhook's

    config = settings()
    if not events:
        return []
    if not (pushed_by_script(config) and not config.state_is_cluster):
        return [refusal_of(partial(enqueue_prepared, event)) for event in events]
    celery_app = publishing_app()
    client = store.client()
    script = client.register_script(store.load_script("claim_push"))
    queue_keys = [DELIVERY_QUEUE, doorbell_key(DELIVERY_QUEUE)]
    pipe = client.pipeline(transaction=False)
    for event in events:
        script(keys=[*claim_keys(event.endpoint_id, event.event_id), *queue_keys],
               args=[event.digest, config.record_ttl, _message(celery_app, event)], client=pipe)
    verdicts = pipe.execute()
    return [refusal_of(partial(raise_refused, Claim(_text(verdict)), event.endpoint_id,
                             event.event_id))
            for verdict, event in zip(verdicts, events, strict=True)]


def _message(celery_app: Any, event: PreparedEvent) -> str:
    """The message :func:`enqueue_prepared` would have kombu push, claim header included."""
    from hookline.transport.envelope import build_message

    kwargs = stamped({"event_id": event.event_id, "deadline": event.deadline,
                      **({"ordering_key": event.ordering_key} if event.ordering_key else {})})
    return build_message(
        celery_app, task_name=TASK_NAME, task_id=event.event_id,
        args=(event.endpoint_id, event.event_type, event.payload), kwargs=kwargs, retries=0,
        queue=DELIVERY_QUEUE,
        argsrepr=shown_args(event.endpoint_id, event.event_type, None, size=event.size),
        headers={**tracing.message_headers(), **_trace(event), CLAIM_HEADER: event.digest})


def _trace(event: PreparedEvent) -> dict[str, str]:
    """The trace headers of an event written in a trace elsewhere (an outbox row)."""
    return {tracing.TRACEPARENT: event.traceparent} if event.traceparent else {}


def refusal_of(publish: Callable[[], Any]) -> WebhookInputError | None:
    """Run ``publish``; the input error it raised (None: it went)."""
    try:
        publish()
    except WebhookInputError as refused:
        return refused
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
