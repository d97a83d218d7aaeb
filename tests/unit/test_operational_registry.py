"""The operational-event registry (hookline.core.operational_events): connect by kind, every kind or
as a decorator; a callback that raises is logged and passed over; the same occurrence has the
same event id. Pure: no Redis."""

from __future__ import annotations

import logging

import pytest

from hookline.core.operational_events import (
    DEAD_LETTERED,
    ENDPOINT_DISABLED,
    EVENT_TYPES,
    KINDS,
    OperationalEvent,
    OperationalRegistry,
)
from hookline.delivery import reporting


def test_callbacks_hear_their_kind_in_order_once_each():
    registry = OperationalRegistry()
    heard: list[tuple[str, str]] = []

    def first(event: OperationalEvent) -> None:
        heard.append(("first", event.kind))

    def every(event: OperationalEvent) -> None:
        heard.append(("every", event.kind))

    registry.connect(ENDPOINT_DISABLED, first)
    registry.connect(ENDPOINT_DISABLED, first)  # again: still once
    registry.connect("*", every)
    registry.fire(OperationalEvent(ENDPOINT_DISABLED, "ep"))
    registry.fire(OperationalEvent(DEAD_LETTERED, "ep"))
    assert heard == [("first", ENDPOINT_DISABLED), ("every", ENDPOINT_DISABLED),
                     ("every", DEAD_LETTERED)]
    registry.disconnect("*", every)
    registry.fire(OperationalEvent(DEAD_LETTERED, "ep"))
    assert len(heard) == 3


def test_a_failing_callback_is_logged_and_the_others_still_run(caplog):
    registry = OperationalRegistry()
    heard = []

    def broken(event: OperationalEvent) -> None:
        raise RuntimeError("secret detail that stays out of the log")

    registry.connect(DEAD_LETTERED, broken)
    registry.connect(DEAD_LETTERED, heard.append)
    with caplog.at_level(logging.WARNING, logger="hookline"):
        assert registry.fire(OperationalEvent(DEAD_LETTERED, "ep")) == 1
    assert len(heard) == 1
    [record] = [r for r in caplog.records if "operational.callback_failed" in r.getMessage()]
    assert "RuntimeError" in record.getMessage() and "broken" in record.getMessage()
    assert "secret detail" not in record.getMessage()


def test_unknown_kinds_and_non_callables_are_refused():
    registry = OperationalRegistry()
    with pytest.raises(ValueError, match="unknown operational event kind 'endpoint_gone'"):
        registry.connect("endpoint_gone", print)
    with pytest.raises(TypeError):
        registry.connect(DEAD_LETTERED, "not callable")  # type: ignore[arg-type]


def test_the_decorator_form_connects_to_the_process_registry():
    import hookline.operational

    @hookline.operational.connect(DEAD_LETTERED)
    def noted(event: OperationalEvent) -> None: ...

    try:
        assert noted in hookline.operational.REGISTRY.receivers(DEAD_LETTERED)
    finally:
        hookline.operational.disconnect(DEAD_LETTERED, noted)


def test_the_same_occurrence_has_the_same_event_id_and_payload():
    one = reporting.endpoint_disabled("ep", reason="gone", detail="410", since=1.5,
                                        status=410)
    two = reporting.endpoint_disabled("ep", reason="gone", detail="410", since=1.5,
                                        status=410)
    again = reporting.endpoint_disabled("ep", reason="gone", detail="410", since=9.0,
                                          status=410)
    assert one.event_id == two.event_id != again.event_id
    assert one.event_id.startswith("hookline-op-") and len(one.event_id) <= 200
    assert one.payload() == again.payload() == {"endpoint_id": "ep", "reason": "gone",
                                                "detail": "410", "status": 410}
    dead = reporting.dead_lettered("ep", "evt-1", "order.created", "exhausted", attempts=4,
                                     first_attempt_at=1.0)
    assert dead.event_type == "message.attempt.exhausted"
    assert dead.payload() == {"endpoint_id": "ep", "event_id": "evt-1",
                              "event_type": "order.created", "reason": "exhausted",
                              "attempts": 4}
    assert set(EVENT_TYPES) == set(KINDS)


def test_a_forwarder_with_nobody_behind_it_does_not_count_as_listening():
    registry = OperationalRegistry()
    receivers: list[str] = []
    registry.connect("*", lambda event: None, listening=lambda kind: bool(receivers))
    assert not registry.listened(DEAD_LETTERED)
    receivers.append("someone")
    assert registry.listened(DEAD_LETTERED)
