"""send_webhook refuses bad input where it enters, and enqueues nothing then."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from hookline import WebhookInputError, send_webhook
from hookline.core.endpoint import EndpointError
from hookline.core.endpoint_validation import validate_secret, validate_url
from hookline.store.endpoints import EndpointRegistry


@pytest.fixture
def endpoint():
    return EndpointRegistry().add("shop", "http://127.0.0.1:9/hook")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: send_webhook("nobody", "order.created", {}), "no endpoint 'nobody'"),
        (lambda: send_webhook("shop", "order.created", {"at": datetime.now()}),
         "not JSON-serialisable"),
        (lambda: send_webhook("shop", "order.created", {"x": math.nan}), "not JSON-serialisable"),
        (lambda: send_webhook("shop", "order.created", {"blob": "x" * 300_000}),
         "the limit is 262144"),
        (lambda: send_webhook("shop", "", {}), "event type"),
        (lambda: send_webhook("shop", "order.created", {}, event_id="has space"), "event id"),
        (lambda: send_webhook("shop", "order.created", {}, event_id="x" * 201), "event id"),
        (lambda: send_webhook("bad id!", "order.created", {}), "endpoint id"),
        (lambda: send_webhook("shop", "order.created", {}, deadline="next tuesday"),
         "deadline"),
    ],
)
def test_bad_input_is_refused_and_nothing_enqueued(endpoint, published, call, message):
    with pytest.raises(WebhookInputError, match=message):
        call()
    assert published.events == []


def test_good_input_is_enqueued_with_its_event_id(endpoint, published):
    deadline = datetime.now(tz=UTC) + timedelta(hours=1)
    assert send_webhook("shop", "order.created", {"n": 1}, "evt-1", deadline=deadline) == "evt-1"
    assert published.events == [("hookline", "shop", "evt-1")]
    assert published.task_ids == ["evt-1"]  # Flower finds the task by its event id


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/hook", "only http and https"),
        ("example.com/hook", "only http and https"),
        ("http:///hook", "no host"),
        ("https://user:pw@example.com/", "credentials"),
        ("http://example.com:99999/", "malformed"),
        ("http://example.com/#frag", "fragment"),
        ("http://" + "a" * 3000 + ".com/", "limit is 2048"),
    ],
)
def test_malformed_urls_are_refused(url, message):
    with pytest.raises(EndpointError, match=message):
        validate_url(url)


@pytest.mark.parametrize(
    ("secret", "message"),
    [("nope", "must start with 'whsec_'"), ("whsec_!!!", "not valid base64"),
     ("whsec_c2hvcnQ=", "24 to 64")],
)
def test_bad_secrets_are_refused(secret, message):
    with pytest.raises(EndpointError, match=message):
        validate_secret(secret)


def test_invalid_retry_override_is_refused_with_the_setting_named():
    with pytest.raises(EndpointError, match="jitter"):
        EndpointRegistry().add("ep", "http://127.0.0.1:9/", retry_policy={"jitter": 3})
    with pytest.raises(EndpointError, match="max_backoff"):
        EndpointRegistry().add("ep", "http://127.0.0.1:9/", retry_policy={"max_backoff": 10**7})
    with pytest.raises(EndpointError, match="unknown retry setting"):
        EndpointRegistry().add("ep", "http://127.0.0.1:9/", retry_policy={"retries": 3})


def test_flower_and_logs_see_the_payload_size_not_the_payload(endpoint, published):
    from celery.signals import after_task_publish

    shown: list[str] = []

    def capture(headers=None, **_):
        shown.append(headers["argsrepr"])

    after_task_publish.connect(capture, weak=False)
    try:
        send_webhook("shop", "order.created", {"email": "ada@example.com"}, "evt-private")
    finally:
        after_task_publish.disconnect(capture)
    assert shown == ["('shop', 'order.created', '<payload: 27 bytes>')"]
