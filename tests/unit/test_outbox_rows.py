"""The outbox's pure parts: a row is checked as send_webhook and publish check (without Redis),
carries the event id, digest, deadline and ordering key; a line's rows leave in order; the
relay's backoff doubles with jitter up to its cap."""

from __future__ import annotations

import json
import statistics

import pytest

from hookline.core.errors import WebhookInputError
from hookline.core.identity import content_digest
from hookline.core.specs import EventSpec, PublicationSpec
from hookline.outbox.relay import Claimed, backoff, in_line_order
from hookline.outbox.rows import LINE_LENGTH, publication_row, webhook_row


def test_a_webhook_row_carries_what_send_webhook_would_publish() -> None:
    row = webhook_row(EventSpec("shop", "order.created", {"b": 1, "a": [1, 2]}, "evt-1",
                                deadline=2_000_000_000, ordering_key="customer-7"))
    assert row.payload == '{"b":1,"a":[1,2]}'
    assert row.digest == content_digest("order.created", {"a": [1, 2], "b": 1})
    assert (row.event_id, row.deadline, row.ordering_key) == ("evt-1", 2e9, "customer-7")
    assert row.line == "e:shop\ncustomer-7" and len(row.line) <= LINE_LENGTH
    assert row.values()["line"] == row.line and row.due_at > 0
    assert webhook_row(EventSpec("shop", "t.x", {})).event_id  # an id is drawn when none is given


def test_a_publication_row_keeps_its_channels() -> None:
    row = publication_row(PublicationSpec("shop", "order.created", {"n": 1}, "evt-2",
                                          channels=["eu", "vip"]))
    assert json.loads(row.channels) == ["eu", "vip"] and row.app_id == "shop"
    assert row.endpoint_id is None and row.line == "a:shop\n"


@pytest.mark.parametrize(("call", "field"), [
    (lambda: webhook_row(EventSpec("bad id", "t.x", {})), "endpoint_id"),
    (lambda: webhook_row(EventSpec("shop", "", {})), "event_type"),
    (lambda: webhook_row(EventSpec("shop", "t.x", {1, 2})), "payload"),
    (lambda: webhook_row(EventSpec("shop", "t.x", {}, "has space")), "event_id"),
    (lambda: webhook_row(EventSpec("shop", "t.x", {}, deadline="tomorrow")), "deadline"),
    (lambda: webhook_row(EventSpec("shop", "t.x", {}, ordering_key="a b")), "ordering_key"),
    (lambda: publication_row(PublicationSpec("bad app", "t.x", {})), "app_id"),
    (lambda: publication_row(PublicationSpec("shop", "t.x", {}, channels=["no spaces allowed"])),
     "channels"),
])
def test_bad_input_is_refused_where_it_is_written_naming_the_field(call, field) -> None:
    with pytest.raises(WebhookInputError) as refused:
        call()
    assert refused.value.field == field and "\n" not in str(refused.value)


def claimed(row_id: int, line: str) -> Claimed:
    return Claimed(row_id, f"e-{row_id}", "t", "{}", "d", "shop", None, None, None, None, line)


def test_a_line_stops_at_its_first_row_with_an_earlier_one_outside_the_claim() -> None:
    rows = [claimed(5, "a"), claimed(9, "a"), claimed(6, "b"), claimed(12, "b"), claimed(3, "c")]
    # Row 7 of line a is held by another relay; row 2 of line c too; line b has nothing else.
    earlier = [(5, "a"), (7, "a"), (9, "a"), (6, "b"), (2, "c"), (3, "c")]
    assert [row.id for row in in_line_order(rows, earlier)] == [5, 6, 12]
    assert [row.id for row in in_line_order(rows, [])] == [3, 5, 6, 9, 12]


def test_the_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    for failures, ceiling in [(1, 0.2), (2, 0.4), (3, 0.8), (10, 5.0), (50, 5.0)]:
        waits = [backoff(failures) for _ in range(200)]
        assert ceiling / 2 <= min(waits) and max(waits) <= ceiling
        assert statistics.pstdev(waits) > 0  # drawn, not fixed: relays do not beat together
