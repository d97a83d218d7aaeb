"""hookline.core.tracing: off (nothing imported, nothing done) unless a tracer provider is
set; the attempt span's attributes (the URL without its query or credentials, error.type);
the task span joins the message's trace and, under another task span, does not double it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from hookline.core import tracing
from tests.conftest import ROOT


def test_a_span_shows_the_url_without_its_query_fragment_or_credentials() -> None:
    assert tracing.url_without_query("https://user:pw@hooks.example.com:8443/in?token=x#f") == (
        "https://hooks.example.com:8443/in")
    assert tracing.url_without_query("http://[::1]:9/a?b=c") == "http://[::1]:9/a"


@pytest.mark.parametrize(("status", "error", "expected"), [
    (204, "", None), (302, "", None), (404, "", "404"), (500, "", "500"), (429, "", "429"),
    (None, "connect_timeout", "connect_timeout"), (None, "dns_error", "dns_error"),
    (None, "connect_error: connection refused or unreachable", "connect_error"),
    (None, "attempt_timeout: no complete answer within 3s", "attempt_timeout"),
    (None, "refused: 10.0.0.1 is a private address", "refused"),
    (None, "connection_error (ProxyError)", "connection_error"),
    (None, "malformed_response: bad status line", "malformed_response"),
    (None, "", "_OTHER"),
])
def test_error_type_is_the_status_or_the_failure_s_category(status, error, expected) -> None:
    assert tracing.error_type(status, error) == expected


def test_the_client_attributes_follow_the_http_conventions() -> None:
    assert tracing.client_attributes("shop", "https://h.example/p?k=v", "ev-1", 2) == {
        "http.request.method": "POST", "server.address": "h.example", "server.port": 443,
        "url.full": "https://h.example/p", "hookline.endpoint.id": "shop",
        "hookline.event.id": "ev-1", "hookline.attempt": 2}


def test_without_a_provider_nothing_of_opentelemetry_is_imported() -> None:
    code = ("import sys, hookline.core.tracing as t\n"
            "assert t.tracer() is None and t.message_headers() == {}\n"
            "assert t.consuming(object(), 'x', endpoint_id=None, event_id=None) is t.OFF\n"
            "with t.producer('q', endpoint_id='e'): pass\n"
            "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
            "import opentelemetry.trace\n"  # imported by someone, no provider set: still off
            "assert t.tracer() is None and t.traceparent() is None\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.fixture
def exported() -> Iterator[list]:
    """A tracer provider with an in-memory exporter, for this test only."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = provider, Once()
    try:
        yield exporter.get_finished_spans  # type: ignore[misc]
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved, Once()


class Request(dict):
    id = "task-1"
    delivery_info = {"routing_key": "hookline.retry"}


def test_the_task_span_continues_the_message_s_trace_and_carries_it_on(exported) -> None:
    from opentelemetry.trace import SpanKind

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    first = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
    message = Request(traceparent=parent, hookline_first_attempt=first)
    with tracing.consuming(message, "hookline.deliver", endpoint_id="shop",
                           event_id="ev-1") as traced:
        # A retry parked now carries the producer's context and the first attempt's span.
        assert tracing.message_headers() == {"traceparent": parent,
                                             "hookline_first_attempt": first}
        with tracing.client("shop", "http://h.example/in?secret=1", "ev-1", 2) as span:
            tracing.record_attempt(span, 503, "", "retry")
        traced.finished({"outcome": "retry_scheduled"})
    client, task = exported()
    assert task.kind is SpanKind.CONSUMER and task.name == "process hookline.deliver"
    assert f"{task.parent.span_id:016x}" == "b7ad6b7169203331"
    assert task.attributes["hookline.outcome"] == "retry_scheduled"
    assert task.attributes["messaging.destination.name"] == "hookline.retry"
    assert client.parent.span_id == task.context.span_id
    assert [f"{link.context.span_id:016x}" for link in client.links] == ["00f067aa0ba902b7"]
    assert client.attributes["error.type"] == "503"
    assert client.attributes["url.full"] == "http://h.example/in"
    assert tracing.message_headers() == {}  # outside the task, no current span


def test_the_first_attempt_is_remembered_for_the_retries(exported) -> None:
    with tracing.consuming(Request(), "hookline.deliver", endpoint_id="shop", event_id="e"):
        with tracing.client("shop", "http://h.example/", "e", 1) as span:
            first = span.get_span_context()
        carried = tracing.message_headers()
    assert carried["hookline_first_attempt"].split("-")[2] == f"{first.span_id:016x}"
    # Published untraced: the retries join the first run's trace.
    assert carried["traceparent"].split("-")[1] == f"{first.trace_id:032x}"


def test_under_another_task_span_none_is_started(exported) -> None:
    from opentelemetry import trace

    tracer = trace.get_tracer("celery-instrumentation-stand-in")
    with (tracer.start_as_current_span("run/hookline.deliver", kind=trace.SpanKind.CONSUMER),
          tracing.consuming(Request(), "hookline.deliver", endpoint_id="shop",
                            event_id="e") as traced):
        traced.finished({"outcome": "deferred", "reason": "breaker_open"})
    (only,) = exported()
    assert only.name == "run/hookline.deliver"
    assert only.attributes["hookline.deferral.reason"] == "breaker_open"
    assert only.attributes["hookline.event.id"] == "e"
