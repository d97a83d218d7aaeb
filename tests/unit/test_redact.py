"""URL redaction: what an operator may read of a receiver's URL."""

from __future__ import annotations

import logging

import pytest

from hookline.core import redact


@pytest.mark.parametrize(("given", "shown"), [
    ("https://user:pw@hooks.example.com/services/T000/B000/XXXXXXXXXXXXXXXX?x=1",
     "https://***@hooks.example.com/services/***/***/***?***"),
    ("http://127.0.0.1:8080/ok", "http://127.0.0.1:8080/ok"),
    ("https://example.com/hooks/orders", "https://example.com/hooks/orders"),
    ("https://example.com", "https://example.com"),
    ("http://[::1]:80/a/tok3n", "http://[::1]:80/a/***"),
    ("https://example.com/h?token=secret", "https://example.com/h?***"),
    ("not a url", "***"),
])
def test_url_keeps_the_receiver_and_masks_what_may_be_a_credential(given, shown):
    assert redact.url(given) == shown


def test_text_redacts_urls_and_request_targets_inside_messages():
    message = ("HTTPConnectionPool(host='a', port=80): Max retries exceeded with url: "
               "/hook/abc123?token=zz (Caused by X) at https://u:p@h.example/k/s3cr3t")
    shown = redact.text(message)
    for secret in ("abc123", "token=zz", "u:p", "s3cr3t"):
        assert secret not in shown
    assert "with url: /hook/***?***" in shown


def test_filter_rewrites_a_record_naming_a_url():
    record = logging.LogRecord("urllib3.connectionpool", logging.DEBUG, __file__, 1,
                               '%s://%s:%s "%s %s %s" %s %s',
                               ("http", "localhost", 80, "POST", "/in/t0k3n?sig=1", "HTTP/1.1",
                                200, 2), None)
    assert redact.RedactingFilter().filter(record)
    assert "t0k3n" not in record.getMessage() and "sig=1" not in record.getMessage()
    assert '"POST /in/***?*** HTTP/1.1" 200 2' in record.getMessage()


@pytest.mark.parametrize(("given", "shown"), [
    ("notaurl", "notaurl"),
    ("localhost:6379", "localhost:6379"),
    ("redis://:s3cret@", "redis://***@"),
    ("redis://:s3cret", "redis://:***"),
    (":s3cret@redis.internal", "***@redis.internal"),
    ("user:s3cret@redis.internal:6379/0", "***@redis.internal:6379/***"),
    ("redis:/:s3cret@redis.internal", "***@redis.internal"),
    ("redis://u:s3cret@redis.internal:notaport/0", "redis://***@redis.internal:***/***"),
    ("redis://u:s3cret@[::1/0", "redis://***@[::1/***"),
    ("redis://:s3cret@[::1]:s3cret/0", "redis://***@[::1]:***/***"),
    ("redis://:s3/cret@redis.internal/0", "redis://***@redis.internal/***"),
    ("redis://:s3#cret@redis.internal:6379", "redis://***@redis.internal:6379"),
    ("redis://:s3?cret@redis.internal/0", "redis://***@redis.internal/***"),
    ("redis://:s3@cret@redis.internal/0", "redis://***@redis.internal/***"),
])
def test_a_malformed_url_shows_its_scheme_and_host_and_never_its_password(given, shown):
    assert redact.url(given) == shown
    for part in ("s3cret", "cret", "s3"):
        assert part not in redact.url(given)
