"""Per-endpoint headers (``--header NAME:VALUE``): sent on every request, refused when Hookline
owns them or they are ill-formed, masked wherever an endpoint is shown, and never in a log line.
Real Redis, the session's real worker, real HTTP."""

from __future__ import annotations

import logging

from examples.receiver import Reply, fail_first
from hookline import send_webhook
from hookline.store.endpoints import EndpointRegistry
from tests.support.cli import fails, json_out, succeeds
from tests.support.endpoints import wait_delivered

TOKEN = "Bearer tok_3f1b-never-printed-77c2"


def test_headers_are_sent_on_each_request_masked_when_shown_and_never_logged(
        worker, receiver, caplog):
    url = receiver.route("/with-headers", fail_first(1, Reply(500)))
    caplog.set_level(logging.DEBUG)
    succeeds("endpoint", "add", "hdr-ep", "--url", url, "--header", f"Authorization:{TOKEN}",
             "--header", "X-Tenant: acme")
    event_id = send_webhook("hdr-ep", "order.created", {"n": 1})
    wait_delivered("hdr-ep", event_id)
    requests = receiver.requests_to("/with-headers")
    assert len(requests) == 2  # a failed attempt and its retry: both carry them
    for request in requests:
        assert request.headers["authorization"] == TOKEN
        assert request.headers["x-tenant"] == "acme"
        assert request.headers["webhook-id"] == event_id

    shown = succeeds("endpoint", "show", "hdr-ep").output
    assert "Authorization: ****" in shown and "X-Tenant: ****" in shown
    assert json_out("endpoint", "show", "hdr-ep")["headers"] == {"Authorization": "****",
                                                                  "X-Tenant": "****"}
    listed = succeeds("endpoint", "list", "--json").output
    for text in (shown, listed):
        assert "tok_3f1b" not in text and "acme" not in text

    succeeds("endpoint", "update", "hdr-ep", "--header", "x-tenant:beta",
             "--remove-header", "authorization")
    assert EndpointRegistry().require("hdr-ep").headers == {"x-tenant": "beta"}
    second = send_webhook("hdr-ep", "order.created", {"n": 2})
    wait_delivered("hdr-ep", second)
    [*_, last] = receiver.requests_to("/with-headers")
    assert last.headers["x-tenant"] == "beta" and "authorization" not in last.headers

    # No log line of the worker or of this process holds a value.
    assert "tok_3f1b" not in worker.output()
    assert not any("tok_3f1b" in record.getMessage() or "tok_3f1b" in str(record.__dict__)
                   for record in caplog.records)


def test_owned_and_ill_formed_headers_are_refused_with_a_clear_error(receiver):
    url = receiver.route("/refused", fail_first(0, Reply(204)))
    for header, says in [("webhook-id:x", "set by Hookline"),
                         ("Content-Type:text/plain", "set by Hookline"),
                         ("Host:evil.example", "set by Hookline"),
                         ("Transfer-Encoding:chunked", "hop-by-hop"),
                         ("Bad Name:x", "not a valid HTTP header name"),
                         ("X-Api-Key", "NAME:VALUE"),
                         (f"X-Api-Key:{TOKEN}\r\nX-Evil: 1", "control character")]:
        result = fails("endpoint", "add", "refused-ep", "--url", url, "--header", header,
                       code=2)
        assert says in result.output, result.output
        assert "tok_3f1b" not in result.output
    assert EndpointRegistry().get("refused-ep") is None
    succeeds("endpoint", "add", "refused-ep", "--url", url)
    result = fails("endpoint", "update", "refused-ep", "--remove-header", "X-Nope")
    assert "header 'X-Nope' is not set on this endpoint" in result.output
    result = fails("endpoint", "update", "refused-ep", "--header", "Webhook-Signature:x",
                   code=2)
    assert "set by Hookline" in result.output
