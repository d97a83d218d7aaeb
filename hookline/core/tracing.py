"""OpenTelemetry traces, when the host has them (the ``otel`` extra; docs/operations/tracing.md).

Traces are on when the OpenTelemetry API is imported in this process (by the host's SDK set-up,
``opentelemetry-instrument`` or anything else) and a real tracer provider is set. Otherwise
every function here returns at once, and nothing of OpenTelemetry is imported: the test is a
look in ``sys.modules``, so a process that never configured tracing pays a dictionary lookup.

The spans: a PRODUCER span where an event is published (``send_webhook``, ``publish``, an
outbox row written), a CONSUMER span for each run of a task in the worker (child of the
producer's context, which travels in the message's ``traceparent`` and ``tracestate`` headers,
the names ``opentelemetry-instrumentation-celery`` uses), and a CLIENT span for each HTTP
attempt. A retry's or deferral's message carries the trace on, and the span context of the
event's first attempt (``hookline_first_attempt``), which its spans link to.

Spans carry ids, the URL without its query, the status and categories of errors: never a
payload, a header's value, a secret or a query string. Exporting is the SDK's (``OTEL_*``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: The message headers of the W3C trace context (the Celery instrumentation's too).
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"
#: A retry's header: the first attempt's client span, in ``traceparent`` form, to link to.
FIRST_ATTEMPT = "hookline_first_attempt"
#: The instrumentation scope's name.
SCOPE = "hookline"

_tracer: tuple[Any, Any] | None = None


class _Carried:
    """The trace headers a delivery's next message (its retry or deferral) carries, for the
    run of one delivery task: the message's own, or this run's span context, and the first
    attempt's, kept as span contexts and put in ``traceparent`` form only when a message is
    published (most runs publish none)."""

    __slots__ = ("first", "given", "span")

    def __init__(self, given: dict[str, str], span: Any, first: Any) -> None:
        self.given, self.span, self.first = given, span, first

    def headers(self) -> dict[str, str]:
        found = dict(self.given)
        if TRACEPARENT not in found:  # published untraced: its retries join this run's trace
            found[TRACEPARENT] = _format(self.span)
        first = self.first_attempt()
        if first:
            found[FIRST_ATTEMPT] = first
        return found

    def first_attempt(self) -> str | None:
        first = self.first
        return first if first is None or isinstance(first, str) else _format(first)


#: Set by the task's span for the run of one delivery task, None elsewhere.
_carried: ContextVar[_Carried | None] = ContextVar("hookline_trace_carried", default=None)


def tracer() -> Any | None:
    """Hookline's tracer, or None when traces are off (the API not imported by anyone, or no
    tracer provider set: the API's proxy or no-op provider)."""
    global _tracer
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    cached = _tracer
    if cached is not None and cached[0] is provider:
        return cached[1]
    found = provider.get_tracer(SCOPE)
    _tracer = (provider, found)
    return found


class _Off:
    """The span of a process without traces: does nothing."""

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def finished(self, result: Any) -> Any:
        return result


OFF = _Off()


@contextmanager
def producer(destination: str, *, endpoint_id: str | None = None, app_id: str | None = None,
             event_id: str | None = None) -> Iterator[Any]:
    """A PRODUCER span (``send <destination>``) around a publish, child of the current span
    (a web request's, where the host traces them); the messages published inside carry it."""
    found = tracer()
    if found is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    attributes = _ids(endpoint_id, event_id, app_id)
    attributes.update({"messaging.operation.type": "send",
                       "messaging.destination.name": destination})
    with found.start_as_current_span(f"send {destination}", kind=SpanKind.PRODUCER,
                                     attributes=attributes) as span:
        yield span


def message_headers() -> dict[str, str]:
    """The trace headers of a message published now: inside a delivery task, those its next
    attempt carries on; elsewhere the current context's (none without a span)."""
    if tracer() is None:
        return {}
    carried = _carried.get()
    if carried is not None:
        return carried.headers()
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers


def first_attempt() -> str | None:
    """The span of this delivery's first attempt (``traceparent`` form), inside a delivery
    task where traces are on: a dead letter keeps it, so its replay links back to it."""
    carried = _carried.get() if tracer() is not None else None
    return carried.first_attempt() if carried is not None else None


def replay_headers(first: str | None) -> dict[str, str]:
    """The trace headers of a replayed dead letter's message: the current context's (the
    operator's command or page, where traced) and the first attempt's span to link to, which
    the worker's spans use even where the replaying process does not trace."""
    found = message_headers()
    if first:
        found[FIRST_ATTEMPT] = first
    return found


def traceparent() -> str | None:
    """The current span's context in ``traceparent`` form (an outbox row keeps it), or None."""
    return message_headers().get(TRACEPARENT) if tracer() is not None else None


@contextmanager
def continued(parent: str | None) -> Iterator[None]:
    """Run the block in the trace of ``parent`` (a ``traceparent`` an outbox row kept)."""
    if not parent or tracer() is None:
        yield
        return
    from opentelemetry import context
    from opentelemetry.propagate import extract

    token = context.attach(extract({TRACEPARENT: parent}))
    try:
        yield
    finally:
        context.detach(token)


def consuming(request: Any, task: str, *, endpoint_id: str | None,
              event_id: str | None) -> Any:
    """The span of one run of ``task`` (``request``: Celery's task request, whose headers hold
    the trace). A CONSUMER span, child of the message's context, unless a task span is current
    already (``opentelemetry-instrumentation-celery``'s): that one is used, not doubled."""
    found = tracer()
    if found is None:
        return OFF
    return _TaskSpan(found, request, task, endpoint_id, event_id)


class _TaskSpan:
    def __init__(self, found: Any, request: Any, task: str, endpoint_id: str | None,
                 event_id: str | None) -> None:
        self.tracer, self.request, self.task = found, request, task
        self.attributes = _ids(endpoint_id, event_id)
        self.span: Any = None
        self.owned: Any = None
        self.tokens: list[Any] = []

    def __enter__(self) -> _TaskSpan:
        from opentelemetry import context, trace
        from opentelemetry.propagate import extract

        headers = {name: value for name in (TRACEPARENT, TRACESTATE, FIRST_ATTEMPT)
                   if isinstance(value := _header(self.request, name), str)}
        first = headers.get(FIRST_ATTEMPT)
        current = trace.get_current_span()
        if current.get_span_context().is_valid:  # the Celery instrumentation's task span
            self.span = current
        else:
            info = getattr(self.request, "delivery_info", None) or {}
            self.attributes.update({
                "messaging.operation.type": "process",
                "messaging.destination.name": str(info.get("routing_key") or self.task),
                "messaging.message.id": str(getattr(self.request, "id", "") or "")})
            linked = context_of(first) if first else None
            links = [trace.Link(linked)] if linked is not None else []
            self.owned = self.tracer.start_span(
                f"process {self.task}", context=extract(headers), kind=trace.SpanKind.CONSUMER,
                attributes=self.attributes, links=links)
            self.span = self.owned
            self.tokens.append(context.attach(trace.set_span_in_context(self.owned)))
        if self.owned is None:
            self.span.set_attributes(self.attributes)
        given = {name: headers[name] for name in (TRACEPARENT, TRACESTATE) if name in headers}
        if TRACEPARENT not in given:
            given = {}  # published untraced: its retries join this run's trace
        self.tokens.append(_carried.set(_Carried(given, self.span.get_span_context(), first)))
        return self

    def finished(self, result: Any) -> Any:
        """Record the task's outcome (``hookline.outcome``, ``hookline.deferral.reason``)."""
        if isinstance(result, Mapping):
            outcome, reason = result.get("outcome"), result.get("reason")
            if isinstance(outcome, str):
                self.span.set_attribute("hookline.outcome", outcome)
            if outcome in ("deferred", "waiting") and isinstance(reason, str):
                self.span.set_attribute("hookline.deferral.reason", reason)
            elif outcome == "dead_lettered" and isinstance(reason, str):
                self.span.set_attribute("hookline.dead_letter.reason", reason)
        return result

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        from opentelemetry import context

        _carried.reset(self.tokens.pop())
        if self.owned is None:
            return
        context.detach(self.tokens.pop())
        if error is not None:
            self.owned.record_exception(error)
            from opentelemetry.trace import Status, StatusCode

            self.owned.set_status(Status(StatusCode.ERROR, type(error).__name__))
        self.owned.end()


def _header(request: Any, name: str) -> Any:
    getter = getattr(request, "get", None)
    return getter(name) if callable(getter) else getattr(request, name, None)


def context_of(parent: str) -> Any | None:
    """The span context in a ``traceparent`` (None if it is not a valid one)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    found = trace.get_current_span(TraceContextTextMapPropagator().extract(
        {TRACEPARENT: parent})).get_span_context()
    return found if found.is_valid else None


def _format(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _ids(endpoint_id: str | None, event_id: str | None,
         app_id: str | None = None) -> dict[str, Any]:
    found = {"hookline.endpoint.id": endpoint_id, "hookline.event.id": event_id,
             "hookline.app.id": app_id}
    return {name: value for name, value in found.items() if value}


def url_without_query(url: str) -> str:
    """``url`` as a span may show it (``url.full``): no query, no fragment, no credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def error_type(status: int | None, error: str) -> str | None:
    """``error.type`` of an attempt: the status code for an answer of 400 or more (the HTTP
    semantic conventions), the category of a failure without one (``connect_timeout``,
    ``dns_error``, ``refused``, ...), None for a success."""
    if status is not None:
        return str(status) if status >= 400 else None
    if not error:
        return "_OTHER"
    for stop in (":", " ("):
        error = error.split(stop, 1)[0]
    return error.strip() or "_OTHER"


def client_attributes(endpoint_id: str, url: str, event_id: str,
                      attempt: int | None) -> dict[str, Any]:
    """The attributes a CLIENT span of one attempt starts with."""
    found = dict(_target_attributes(url))
    found.update(_ids(endpoint_id, event_id))
    if attempt:
        found["hookline.attempt"] = attempt
    return found


@lru_cache(maxsize=1024)
def _target_attributes(url: str) -> tuple[tuple[str, Any], ...]:
    """An endpoint URL's attributes (method, server, port, ``url.full``), worked out once."""
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    found: dict[str, Any] = {"http.request.method": "POST", "server.address": parts.hostname
                             or "", "url.full": url_without_query(url)}
    if port is not None:
        found["server.port"] = port
    return tuple(found.items())


def client(endpoint_id: str, url: str, event_id: str, attempt: int | None) -> _ClientSpan:
    """The CLIENT span of one HTTP attempt (call only where :func:`tracer` is not None), linked
    to the event's first attempt from its retries; the first attempt's is remembered for
    them. Entered, it is the span (:func:`record_attempt` fills in its answer)."""
    return _ClientSpan(endpoint_id, url, event_id, attempt)


class _ClientSpan:
    """:func:`client`'s span, current while the attempt runs; an exception is recorded on it.
    A class, not a generator: it runs for every attempt."""

    __slots__ = ("attempt", "attributes", "span", "token")

    def __init__(self, endpoint_id: str, url: str, event_id: str, attempt: int | None) -> None:
        self.attributes = client_attributes(endpoint_id, url, event_id, attempt)
        self.attempt = attempt
        self.span: Any = None
        self.token: Any = None

    def __enter__(self) -> Any:
        from opentelemetry import context, trace

        carried = _carried.get()
        first = carried.first if carried is not None else None
        linked = context_of(first) if isinstance(first, str) else None
        found = tracer()
        assert found is not None
        self.span = found.start_span(
            "POST", kind=trace.SpanKind.CLIENT, attributes=self.attributes,
            links=[trace.Link(linked)] if linked is not None else None)
        if carried is not None and first is None and self.attempt == 1:
            carried.first = self.span.get_span_context()
        self.token = context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        from opentelemetry import context

        context.detach(self.token)
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self.span.record_exception(error)
            self.span.set_status(Status(StatusCode.ERROR, f"{kind.__name__}: {error}"))
        self.span.end()


def record_attempt(span: Any, status: int | None, error: str, outcome: str) -> None:
    """An attempt's answer on its CLIENT span: status, ``error.type`` and Hookline's outcome."""
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    span.set_attribute("hookline.outcome", outcome)
    kind = error_type(status, error)
    if kind is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR))


def receiver_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span, for a receiver that asked
    for them (an endpoint's ``trace_context``)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    headers: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(headers)  # W3C only: never the host's baggage
    return headers


def http_instrumentation_suppressed() -> AbstractContextManager[None]:
    """Keep the urllib3 instrumentation, where it is loaded, out of Hookline's own sends: the
    attempt has its CLIENT span already, and a receiver gets ``traceparent`` only when its
    endpoint asks for it."""
    utils = sys.modules.get("opentelemetry.instrumentation.utils")
    key = getattr(utils, "_SUPPRESS_HTTP_INSTRUMENTATION_KEY", None)
    return nullcontext() if key is None else _suppressed(key)


@contextmanager
def _suppressed(key: str) -> Iterator[None]:
    from opentelemetry import context

    token = context.attach(context.set_value(key, True))
    try:
        yield
    finally:
        context.detach(token)
