"""A tiny OTLP/HTTP trace collector on loopback, for the tracing tests: what an SDK configured
by the standard ``OTEL_*`` variables (``OTEL_TRACES_EXPORTER=otlp``, protocol
``http/protobuf``) exports, decoded with OpenTelemetry's own protobuf classes. Hookline has
no exporter setting of its own: the test's processes are set up as any host's would be."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Span:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)
    service: str = ""


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def decode(body: bytes) -> list[Span]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(Span(
                    name=span.name, kind=ProtoSpan.SpanKind.Name(span.kind).removeprefix(
                        "SPAN_KIND_"),
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    attributes={a.key: _value(a.value) for a in span.attributes},
                    links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                    service=str(resource.get("service.name", ""))))
    return found


class Collector:
    """Collects exported spans; ``endpoint`` is what ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    names."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with collector.lock:
                    collector.spans.extend(decode(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def environment(self, service: str) -> dict[str, str]:
        """The standard variables that point an SDK (``opentelemetry-instrument``) here."""
        return {"OTEL_SERVICE_NAME": service, "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def wait_for(self, condition: Callable[[list[Span]], bool], timeout: float = 30.0
                 ) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if condition(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
