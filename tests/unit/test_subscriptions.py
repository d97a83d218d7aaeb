"""Subscriptions: which filters and channels are accepted, the matching rule (exact types,
trailing wildcards, channels), and the event catalog's JSON Schema checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookline.core.schemas import SchemaError, check_schema, json_path, violation
from hookline.core.subscriptions import (
    SubscriptionError,
    check_app_id,
    check_type_name,
    parse_channels,
    parse_filters,
    subscribed,
    type_matches,
    unknown_filters,
)

segments = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
types = st.lists(segments, min_size=1, max_size=4).map(".".join)
channel_names = st.sampled_from(["eu", "us", "apac", "org:1", "team.a"])


@pytest.mark.parametrize(("pattern", "event_type", "expected"), [
    ("order.created", "order.created", True),
    ("order.created", "order.created.v2", False),
    ("order.created", "order", False),
    ("order.*", "order.created", True),
    ("order.*", "order.item.added", True),
    ("order.*", "order", False),
    ("order.*", "orders.created", False),
    ("order.item.*", "order.created", False),
    ("*", "anything.at.all", True),
    ("*", "x", True),
])
def test_a_filter_matches_exact_types_and_everything_below_a_wildcard(pattern, event_type,
                                                                      expected):
    assert type_matches(check_filter_ok(pattern), event_type) is expected


def check_filter_ok(pattern: str) -> str:
    assert parse_filters(pattern) == (pattern,)
    return pattern


@pytest.mark.parametrize("bad", ["order.*.created", "*.created", "order*", "order.cre*",
                                 "order.", ".order", "order..created", "**", "order.**",
                                 "ord er", "order/created", "", "a" * 201, "é.x"])
def test_an_ill_formed_filter_is_refused_naming_it(bad):
    with pytest.raises(SubscriptionError, match="event filter") as refused:
        parse_filters([bad])
    assert refused.value.field == "events"
    assert repr(bad[:60]) in str(refused.value)


def test_filters_parse_from_a_comma_separated_list_without_repeats():
    assert parse_filters("order.created, order.* ,order.created,") == ("order.created",
                                                                       "order.*")
    assert parse_filters(None) == parse_filters("") == parse_filters("none") == ()
    with pytest.raises(SubscriptionError, match="at most 100"):
        parse_filters([f"t{n}" for n in range(101)])


def test_channels_are_checked_and_limited():
    assert parse_channels("eu,us,eu") == ("eu", "us")
    assert parse_channels("none") == ()
    with pytest.raises(SubscriptionError, match="channel 'e u' is invalid"):
        parse_channels(["e u"])
    with pytest.raises(SubscriptionError, match="at most 10 channels"):
        parse_channels([f"c{n}" for n in range(11)], limit=10)


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a" * 65, "x{y}", None, 3])
def test_an_application_id_follows_the_endpoint_id_rules(bad):
    with pytest.raises(SubscriptionError, match="application id"):
        check_app_id(bad)
    assert check_app_id("acme_1.eu-west") == "acme_1.eu-west"


def test_a_catalog_type_name_has_no_wildcard():
    assert check_type_name("order.created") == "order.created"
    with pytest.raises(SubscriptionError, match=r"event type 'order\.\*' is invalid"):
        check_type_name("order.*")


@pytest.mark.parametrize(("filters", "channels", "event_type", "event_channels", "expected"), [
    ((), (), "a.b", (), True),                       # no filter at all: everything
    ((), (), "a.b", ("eu",), True),                  # channels on the event do not matter
    ((), ("eu",), "a.b", (), False),                 # a channel filter needs a channel
    ((), ("eu",), "a.b", ("us", "eu"), True),
    ((), ("eu",), "a.b", ("us",), False),
    (("a.*",), ("eu",), "a.b", ("eu",), True),       # both must match
    (("a.*",), ("eu",), "c.d", ("eu",), False),
    (("a.*",), ("eu",), "a.b", ("us",), False),
    (("c.d", "a.b"), (), "a.b", (), True),           # any pattern of the filter
])
def test_an_endpoint_matches_when_its_type_filter_and_its_channels_both_match(
        filters, channels, event_type, event_channels, expected):
    assert subscribed(filters, channels, event_type, event_channels) is expected


@given(types)
def test_property_a_type_matches_itself_star_and_each_of_its_prefixes_wildcard(event_type):
    assert type_matches(event_type, event_type)
    assert type_matches("*", event_type)
    parts = event_type.split(".")
    for cut in range(1, len(parts)):
        assert type_matches(".".join(parts[:cut]) + ".*", event_type)
    assert not type_matches(event_type + ".*", event_type)


@given(types, types)
def test_property_a_wildcard_matches_exactly_the_types_below_its_prefix(prefix, event_type):
    expected = event_type.startswith(prefix + ".")
    assert type_matches(prefix + ".*", event_type) is expected


@given(st.lists(channel_names, max_size=3), st.lists(channel_names, max_size=3), types)
def test_property_no_filters_means_channels_alone_decide(endpoint_channels, event_channels,
                                                        event_type):
    expected = not endpoint_channels or bool(set(endpoint_channels) & set(event_channels))
    assert subscribed((), endpoint_channels, event_type, event_channels) is expected


@given(types)
def test_property_every_generated_type_is_a_valid_filter_and_catalog_name(event_type):
    assert parse_filters([event_type, event_type + ".*"]) == (event_type, event_type + ".*")
    assert check_type_name(event_type) == event_type


def test_filters_matching_no_catalog_type_are_reported():
    catalog = ["order.created", "order.item.added", "invoice.paid"]
    assert unknown_filters(["order.*", "invoice.paid", "*"], catalog) == []
    assert unknown_filters(["order.item.*", "invoice.*", "user.*", "order"], catalog) == [
        "user.*", "order"]


# -- JSON Schemas ------------------------------------------------------------------------------

SCHEMA = {"type": "object", "required": ["order"], "properties": {"order": {
    "type": "object", "properties": {"total": {"type": "number"},
                                     "lines": {"type": "array", "items": {"type": "string"}},
                                     "odd key": {"type": "integer"}}}}}


def test_a_valid_payload_has_no_violation():
    assert violation(check_schema(SCHEMA), {"order": {"total": 1.5, "lines": ["a"]}}) is None


@pytest.mark.parametrize(("payload", "path"), [
    ({"order": {"total": "x"}}, "$.order.total"),
    ({"order": {"lines": ["a", 3]}}, "$.order.lines[1]"),
    ({"order": {"odd key": 1.5}}, '$.order["odd key"]'),
    ({}, "$"),
    ([], "$"),
])
def test_a_violation_names_the_failing_path(payload, path):
    assert violation(check_schema(SCHEMA), payload).startswith(path + ": ")


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "nonsense"}, "not a valid JSON Schema at $.type"),
    ({"properties": {"a": {"minimum": "zero"}}}, "not a valid JSON Schema at "
                                                "$.properties.a.minimum"),
    ([1, 2], "a JSON Schema is an object"),
    ("string", "a JSON Schema is an object"),
])
def test_an_invalid_schema_is_refused_at_registration(schema, message):
    with pytest.raises(SchemaError) as refused:
        check_schema(schema)
    assert message in str(refused.value)


def test_a_schema_naming_an_older_draft_is_checked_by_that_draft():
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
              "properties": {"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}}}
    text = check_schema(draft4)
    assert violation(text, {"n": 0}).startswith("$.n: ")
    assert violation(text, {"n": 1}) is None


def test_json_path_writes_indexes_and_odd_keys():
    assert json_path(["a", 0, "b-c"]) == '$.a[0]["b-c"]'
