"""Per-endpoint headers (hookline.core.headers): which names an operator may set, what a value
may hold, and that no error message ever quotes a value. Pure: no Redis."""

from __future__ import annotations

import pytest

from hookline.core.endpoint import Endpoint
from hookline.core.headers import (
    MAX_HEADERS,
    MAX_VALUE_LENGTH,
    InvalidHeader,
    check_header_name,
    masked,
    merge_headers,
    parse_header,
)
from hookline.delivery.sender import WebhookEvent, build_headers

SECRET_VALUE = "Bearer sk_live_do-not-print-9f8e7d"


@pytest.mark.parametrize("name", ["X-Api-Key", "Authorization", "x-tenant", "X_Odd.Name~1",
                                  "Svix-Id"])
def test_names_an_operator_may_set(name):
    assert check_header_name(name) == name


@pytest.mark.parametrize("name", ["webhook-id", "Webhook-Signature", "WEBHOOK-TIMESTAMP",
                                  "webhook-anything", "Content-Type", "content-length", "HOST",
                                  "Idempotency-Key", "User-Agent", "Content-Encoding"])
def test_headers_hookline_sets_are_refused_in_any_case(name):
    with pytest.raises(InvalidHeader, match="set by Hookline"):
        check_header_name(name)


@pytest.mark.parametrize("name", ["Connection", "transfer-encoding", "Keep-Alive", "TE",
                                  "Upgrade", "Trailer", "Proxy-Authorization", "Expect"])
def test_hop_by_hop_headers_are_refused(name):
    with pytest.raises(InvalidHeader, match="hop-by-hop"):
        check_header_name(name)


@pytest.mark.parametrize("name", ["", "X Api", "X-Api:", "X(1)", "Ünicode", "a\nb", "x" * 65])
def test_ill_formed_names_are_refused(name):
    with pytest.raises(InvalidHeader):
        check_header_name(name)


@pytest.mark.parametrize("value", [f"{SECRET_VALUE}\r\nX-Injected: 1", f"{SECRET_VALUE}\x00",
                                   f"{SECRET_VALUE}\x7f", f"{SECRET_VALUE}é", "   ",
                                   SECRET_VALUE + "x" * MAX_VALUE_LENGTH])
def test_bad_values_are_refused_without_being_quoted(value):
    with pytest.raises(InvalidHeader) as refused:
        parse_header(f"X-Api-Key:{value}")
    assert "X-Api-Key" in str(refused.value)
    assert "sk_live" not in str(refused.value) and "Injected" not in str(refused.value)


def test_name_value_pairs_are_parsed_and_trimmed():
    assert parse_header("X-Api-Key: abc def ") == ("X-Api-Key", "abc def")
    assert parse_header("X-Url:https://a.example/x?y=1") == ("X-Url", "https://a.example/x?y=1")
    with pytest.raises(InvalidHeader, match="NAME:VALUE"):
        parse_header("X-Api-Key")


def test_merging_replaces_a_name_in_any_case_and_removes_by_name():
    merged = merge_headers({"X-Api-Key": "old", "X-Tenant": "t1"}, [("x-api-key", "new")],
                           ["x-tenant"])
    assert merged == {"x-api-key": "new"}
    with pytest.raises(InvalidHeader, match="not set"):
        merge_headers(merged, removed=["X-Missing"])
    with pytest.raises(InvalidHeader, match=f"at most {MAX_HEADERS}"):
        merge_headers({}, [(f"X-H{n}", "v") for n in range(MAX_HEADERS + 1)])


def test_values_are_masked_for_display_and_kept_out_of_the_endpoint_repr():
    endpoint = Endpoint(id="ep", url="https://r.example/h", secrets=("whsec_x",),
                        headers={"Authorization": SECRET_VALUE})
    assert masked(endpoint.headers) == {"Authorization": "****"}
    assert endpoint.public()["headers"] == {"Authorization": "****"}
    assert SECRET_VALUE not in repr(endpoint) and SECRET_VALUE not in str(endpoint.public())


def test_the_sender_adds_them_and_keeps_its_own_over_any_stored_one():
    endpoint = Endpoint(id="ep", url="https://r.example/h",
                        secrets=("whsec_" + "A" * 44,),
                        headers={"Authorization": SECRET_VALUE, "content-type": "text/plain",
                                 "WEBHOOK-ID": "forged"})
    event = WebhookEvent("evt-1", "order.created", {}, 1_700_000_000.0)
    headers = build_headers(endpoint, event, event.body())
    assert headers["Authorization"] == SECRET_VALUE
    assert headers["Content-Type"] == "application/json" and "content-type" not in headers
    assert headers["webhook-id"] == "evt-1" and "WEBHOOK-ID" not in headers
