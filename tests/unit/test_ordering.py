"""Ordered endpoints' pure parts: the ordering key's checks, the headers a delivery's message
and its request carry, the endpoint's fields and policy, and where ordering is refused."""

from __future__ import annotations

import pytest

from hookline.core import config, ordering
from hookline.core.endpoint import Endpoint, EndpointError
from hookline.core.endpoint_validation import validate_headers, validate_order_policy
from hookline.core.event import MalformedEvent, check_ordering_key
from hookline.core.messages import delivery_headers
from hookline.delivery.sender import WebhookEvent, build_headers
from hookline.service.endpoint_actions import check_ordered

ENDPOINT = Endpoint(id="ledger", url="https://example.com/hooks", secrets=("whsec_" + "A" * 44,),
                    ordered=True)


@pytest.mark.parametrize("key", ["order-42", "a", "x" * 200, "tenant:7/order#9"])
def test_an_ordering_key_of_visible_ascii_is_taken(key) -> None:
    assert check_ordering_key(key) == key


@pytest.mark.parametrize("key", ["", "two words", "x" * 201, "caf\u00e9", 42, "line\nbreak"])
def test_any_other_ordering_key_is_refused_in_one_line(key) -> None:
    with pytest.raises(MalformedEvent) as refused:
        check_ordering_key(key)
    assert refused.value.field == "ordering_key" and "\n" not in str(refused.value)


def test_no_ordering_key_is_the_endpoints_own_line() -> None:
    assert check_ordering_key(None) is None


def test_the_message_headers_carry_the_key_and_a_kept_sequence() -> None:
    headers = delivery_headers(["ledger"], {"event_id": "e1", "ordering_key": "k",
                                            "sequence": 7}, "task")
    assert headers == {"hookline_endpoint": "ledger", "hookline_event": "e1",
                       "hookline_okey": "k", "hookline_seq": "7"}
    assert delivery_headers(["ledger"], {"event_id": "e1"}, "task") == {
        "hookline_endpoint": "ledger", "hookline_event": "e1"}


def test_a_request_to_an_ordered_endpoint_carries_its_place_in_the_line() -> None:
    event = WebhookEvent("e1", "order.paid", {}, 0.0, ordering_key="order-42", sequence=3)
    headers = build_headers(ENDPOINT, event, "{}")
    assert headers[ordering.SEQUENCE_HEADER] == "3"
    assert headers[ordering.KEY_HEADER] == "order-42"
    default = build_headers(ENDPOINT, WebhookEvent("e1", "t", {}, 0.0, sequence=1), "{}")
    assert default[ordering.KEY_HEADER] == "ledger"  # the endpoint's own line
    plain = build_headers(ENDPOINT, WebhookEvent("e1", "t", {}, 0.0), "{}")
    assert ordering.SEQUENCE_HEADER not in plain


def test_an_endpoint_header_cannot_pose_as_the_sequence() -> None:
    with pytest.raises(EndpointError, match="set by Hookline on every request"):
        validate_headers({}, {"hookline-sequence": "1"})


def test_the_policy_is_block_or_skip_and_kept_in_the_hash() -> None:
    assert validate_order_policy("skip") == "skip" and validate_order_policy(None) is None
    with pytest.raises(EndpointError, match="must be one of: block, skip"):
        validate_order_policy("drop")
    stored = Endpoint(id="ledger", url="https://example.com/", secrets=("whsec_" + "A" * 44,),
                      ordered=True, order_policy="skip").to_hash()
    read = Endpoint.from_hash("ledger", stored)
    assert read.ordered and read.order_policy == "skip"
    assert Endpoint.from_hash("old", {"url": "https://example.com/"}).order_policy == "block"


def test_ordering_is_refused_where_the_broker_is_not_hookline_s_redis() -> None:
    config.configure({"REDIS_URL": "redis://127.0.0.1:9/0",
                      "HOOKLINE_BROKER_URL": "amqp://guest:guest@127.0.0.1:9//"})
    try:
        with pytest.raises(EndpointError, match="broker to be Hookline's own Redis"):
            check_ordered(True)
        assert check_ordered(False) is False
    finally:
        config.configure()
