"""The pure checks every door calls (hookline.core.event, hookline.core.target) and the bounds of
the settings: fast, no Redis. (The doors themselves: tests/integration/test_bad_input.py.)"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime, timedelta

import pytest

from hookline.core.config import ConfigError, load_settings
from hookline.core.errors import HooklineError, InvalidField
from hookline.core.event import (
    MAX_PAYLOAD_DEPTH,
    MalformedEvent,
    check_deadline,
    check_endpoint_id,
    check_event_id,
    check_event_type,
    check_payload,
    kept_payload,
    nested_deeper_than,
    parse_json_text,
    recorded_id,
    shown,
)
from hookline.core.logs import _text
from hookline.core.ssrf import parse_networks
from hookline.core.target import InvalidURL, check_endpoint_url, never_public, parse_target


def nested(depth: int) -> object:
    payload: object = 1
    for _ in range(depth):
        payload = [payload]
    return payload


@pytest.mark.parametrize("value", ["shop-42\n", "shop-42\r", "\nshop", "shop 42", "shop/42",
                                   "e" * 65, "", "-shop", "shöp", 42, None, ["shop"]])
def test_bad_endpoint_ids_are_refused(value):
    with pytest.raises(MalformedEvent, match="endpoint id") as refused:
        check_endpoint_id(value)
    assert refused.value.field == "endpoint_id" and isinstance(refused.value, HooklineError)


@pytest.mark.parametrize("value", ["evt-1\n", "evt\r\nX-Evil: 1", "evt\x00", "evt\x7f", "évt",
                                   "evt\u2028", "a b", "", "e" * 201, 7, None])
def test_event_ids_that_cannot_be_a_header_are_refused(value):
    with pytest.raises(MalformedEvent, match="event id"):
        check_event_id(value)


@pytest.mark.parametrize("value", ["evt-1", "e" * 200, "order:1/2?x=y#z", "!~"])
def test_visible_ascii_event_ids_pass(value):
    assert check_event_id(value) == value


@pytest.mark.parametrize("value", ["order\n", "a\rb", "\x1b[31mred", "a\u2028b", "a\u0085b",
                                   "a\u200bb", "a\udcffb", "", "t" * 201, b"order", None])
def test_event_types_that_would_forge_a_log_line_are_refused(value):
    with pytest.raises(MalformedEvent, match="event type"):
        check_event_type(value)


def test_printable_event_types_pass_spaces_and_accents_included():
    assert check_event_type("commande créée") == "commande créée"


def test_payload_depth_is_measured_without_recursion_and_the_bound_is_exact():
    assert not nested_deeper_than(nested(MAX_PAYLOAD_DEPTH), MAX_PAYLOAD_DEPTH)
    assert nested_deeper_than(nested(MAX_PAYLOAD_DEPTH + 1), MAX_PAYLOAD_DEPTH)
    assert nested_deeper_than(nested(200_000), MAX_PAYLOAD_DEPTH)  # no RecursionError
    looped: list[object] = []
    looped.append(looped)
    assert nested_deeper_than(looped, MAX_PAYLOAD_DEPTH)  # a cycle is infinitely deep
    assert check_payload(nested(MAX_PAYLOAD_DEPTH)) == json.dumps(
        nested(MAX_PAYLOAD_DEPTH), separators=(",", ":"))


@pytest.mark.parametrize(("payload", "message"), [
    (nested(MAX_PAYLOAD_DEPTH + 1), "nested deeper than 64"),
    (nested(100_000), "nested deeper than 64"),
    ({"name": "ada\ud800"}, "cannot be encoded as UTF-8"),
    ({"\udfff": 1}, "cannot be encoded as UTF-8"),
    ({"x": math.nan}, "not JSON-serialisable"),
    ({"x": math.inf}, "not JSON-serialisable"),
    ({"at": datetime.now()}, "not JSON-serialisable"),
    ({1j: 1}, "not JSON-serialisable"),
])
def test_payloads_that_are_not_json_are_input_errors_naming_the_payload(payload, message):
    with pytest.raises(MalformedEvent, match=message) as refused:
        check_payload(payload)
    assert refused.value.field == "payload"


def test_the_size_limit_is_on_the_utf8_bytes():
    assert check_payload({"s": "é" * 10}, max_bytes=28) == '{"s":"éééééééééé"}'  # 28 bytes
    with pytest.raises(MalformedEvent, match="29 bytes; the limit is 28"):
        check_payload({"s": "é" * 10 + "x"}, max_bytes=28)


def test_json_text_is_measured_before_it_is_parsed():
    assert parse_json_text("payload", '{"a": "[[[[", "b": [1]}') == {"a": "[[[[", "b": [1]}
    with pytest.raises(MalformedEvent, match="payload is nested deeper than 64"):
        parse_json_text("payload", "[" * 1_000_000)
    with pytest.raises(MalformedEvent, match="not valid JSON"):
        parse_json_text("payload", "{nope")
    started = time.perf_counter()
    with pytest.raises(MalformedEvent):
        parse_json_text("payload", '"' + '\\"' * 200_000)  # an unclosed string: still linear
    assert time.perf_counter() - started < 1


NOW = 1_800_000_000.0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e20, 10**400, -1, True,
                                   "9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+00:00",
                                   "+10000-01-01", "tomorrow", "x" * 10_000, [2026]])
def test_deadlines_must_be_real_times_within_ten_years(value):
    with pytest.raises(MalformedEvent, match="deadline"):
        check_deadline(value, now=NOW)


def test_good_deadlines_pass():
    assert check_deadline(None) is None
    assert check_deadline(NOW + 3600, now=NOW) == NOW + 3600
    soon = datetime.now(tz=UTC) + timedelta(days=1)
    assert check_deadline(soon) == soon.timestamp()
    assert check_deadline(soon.isoformat()) == pytest.approx(soon.timestamp())
    assert check_deadline(NOW - 60, now=NOW) == NOW - 60  # past: dead-lettered as expired


def test_messages_show_values_escaped_and_bounded():
    assert shown("a\nb") == "'a\\nb'"
    assert shown("x" * 1000).endswith("... (1000 characters)") and len(shown("x" * 1000)) < 90
    assert len(shown(nested(100_000))) < 90  # no RecursionError either
    assert recorded_id("e" * 300) == "e" * 200 + "...(300 characters)"
    assert recorded_id("evt-1\n") == "evt-1\n"  # kept as sent, so it can be looked up
    assert kept_payload(nested(1000)).startswith("<payload not kept")
    assert kept_payload({"a": 1}) == {"a": 1}


def test_a_log_value_can_never_start_a_new_line_or_field():
    assert _text("evt-1") == "evt-1"
    assert _text("evt\nforged=1") == '"evt\\nforged=1"'
    assert _text("a=b") == '"a=b"' and _text("a\u2028b") == '"a\\u2028b"'


# -- URLs --------------------------------------------------------------------------------------

LOOPBACK = parse_networks("127.0.0.0/8")


@pytest.mark.parametrize(("url", "message"), [
    ("http://example.com/hook\n", "whitespace or a control character at position 23"),
    (" http://example.com/", "whitespace"),
    ("http://example.com/\thook", "whitespace"),
    ("http://exa mple.com/", "whitespace"),
    ("http://example.com/\x00", "control"),
    ("http://example.com/\x7f", "control"),
    ("http://example.com/\u00a0", "whitespace"),
    ("http://bücher.example/", "non-ASCII"),
    ("http://example.com/é", "non-ASCII"),
    ("http://169.254.169.254\\@example.com/", "'\\\\'"),
    ('http://example.com/"', "'\"'"),
    ("http://example.com/%zz", "'%'"),
    ("http://%6c%6fcalhost/", "ambiguous"),
    ("http://[fe80::1%25eth0]/", "ambiguous"),
    ("http://a.com;b.com/", "not a valid host name"),
    ("http://-a.com/", "not a valid host name"),
    ("http://example.com./", "not a valid host name"),
    ("http://2130706433/", "dotted-quad"),
    ("http://127.1/", "dotted-quad"),
    ("http://0x7f.0.0.1/", "dotted-quad"),
    ("http://[1.2.3.4]/", "malformed"),
    ("https://user:pw@example.com/", "credentials"),
    ("https://@example.com/", "credentials"),
    ("http://example.com%2f@evil.com/", "credentials"),
    ("http://a.com#@b.com", "fragment"),
    ("ftp://example.com/", "only http and https"),
    ("example.com/hook", "only http and https"),
    ("http:///hook", "no host"),
    ("http://example.com:0/", "port 0"),
    ("http://example.com:99999/", "malformed"),
    ("http://" + "a" * 3000 + ".com/", "limit is 2048"),
])
def test_malformed_or_ambiguous_urls_are_refused_naming_the_url(url, message):
    with pytest.raises(InvalidURL, match="url") as refused:
        parse_target(url)
    assert message in str(refused.value)
    assert refused.value.field == "url" and isinstance(refused.value, InvalidField)


@pytest.mark.parametrize(("url", "host", "port"), [
    ("https://example.com/hooks?id=1", "example.com", 443),
    ("HTTP://EXAMPLE.com:8080/x", "example.com", 8080),
    ("http://[2606:4700::1]:81/", "2606:4700::1", 81),
    ("http://93.184.216.34/", "93.184.216.34", 80),
    ("https://xn--bcher-kva.example.com/%C3%A9", "xn--bcher-kva.example.com", 443),
    ("https://a_b.example.com/", "a_b.example.com", 443),
])
def test_well_formed_urls_parse_as_the_sender_reads_them(url, host, port):
    target = parse_target(url)
    assert (target.host, target.port) == (host, port)


def test_messages_echo_urls_redacted():
    with pytest.raises(InvalidURL) as refused:
        parse_target("http://example.com/T0k3nS3cr3t/a.b;c?token=s3cr3t#frag")
    assert "s3cr3t" not in str(refused.value) and "T0k3n" not in str(refused.value)


@pytest.mark.parametrize("host", ["localhost", "api.localhost", "localhost.localdomain",
                                  "ip6-localhost", "ip6-loopback", "localhost6"])
def test_localhost_names_need_loopback_allowed(host):
    assert "loopback" in (never_public(host) or "")
    assert "loopback" in (never_public(host, parse_networks("10.0.0.0/8")) or "")
    assert never_public(host, LOOPBACK) is None
    assert never_public(host, parse_networks("::1/128")) is None
    with pytest.raises(InvalidURL, match="names this machine"):
        check_endpoint_url(f"http://{host.upper()}:8080/")


@pytest.mark.parametrize("host", ["receiver", "printer.local", "db.internal", "nas.home.arpa",
                                  "box.localdomain", "x.invalid"])
def test_private_use_names_need_some_network_allowed(host):
    assert never_public(host) is not None
    assert never_public(host, parse_networks("10.0.0.0/8")) is None


def test_https_only_refuses_http():
    with pytest.raises(InvalidURL, match="HTTPS_ONLY"):
        check_endpoint_url("http://example.com/", https_only=True)
    assert check_endpoint_url("https://example.com/", https_only=True).scheme == "https"


# -- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("variable", "value"), [
    ("HOOKLINE_MAX_ATTEMPTS", "1000000000"), ("HOOKLINE_MAX_ATTEMPTS", "1001"),
    ("HOOKLINE_BACKOFF_MULTIPLIER", "1e6"), ("HOOKLINE_BACKOFF_MULTIPLIER", "0.5"),
    ("HOOKLINE_MAX_AGE", "1e300"), ("HOOKLINE_MAX_AGE", "inf"), ("HOOKLINE_JITTER", "nan"),
    ("HOOKLINE_MAX_BACKOFF", "1e9"), ("HOOKLINE_RETRY_AFTER_CAP", "1e300"),
    ("HOOKLINE_REPLAY_HORIZON", "1e300"), ("HOOKLINE_DLQ_RETENTION", "1e300"),
    ("HOOKLINE_HISTORY_RETENTION", "1e300"), ("HOOKLINE_SECRET_OVERLAP", "1e300"),
    ("HOOKLINE_BREAKER_COOLDOWN", "1e300"), ("HOOKLINE_CONNECT_TIMEOUT", "1e300"),
    ("HOOKLINE_MAX_PAYLOAD_BYTES", "99999999999999"), ("HOOKLINE_SCHEDULE_MAX", "10" * 20),
    ("HOOKLINE_HISTORY_ATTEMPTS", "100000000"), ("HOOKLINE_RELEASER_MAX_SLEEP", "1e9"),
    ("CELERY_VISIBILITY_TIMEOUT", "1e300"),
])
def test_every_numeric_setting_is_bounded_and_named(variable, value):
    with pytest.raises(ConfigError, match=variable):
        load_settings({variable: value})
