"""A web process that traces (run by tests/integration/test_tracing.py): the OpenTelemetry
SDK set up in code as a host's would be, exporting to the OTLP endpoint in
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; one request span ``POST /orders`` in which it sends
webhooks (argv: ``send ENDPOINT...``) or writes them to the outbox (``outbox DB_URL
ENDPOINT``). Prints the request's trace id and the event ids as JSON."""

from __future__ import annotations

import json
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "web"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("web")
    action, *rest = sys.argv[1:]
    with tracer.start_as_current_span("POST /orders", kind=trace.SpanKind.SERVER) as span:
        if action == "send":
            import hookline

            events = [hookline.send_webhook(endpoint, "order.created", {"order": 1})
                      for endpoint in rest]
        else:
            from sqlalchemy import MetaData, create_engine
            from sqlalchemy.orm import Session

            from hookline.contrib.sqlalchemy import add_webhook, outbox_table

            url, endpoint = rest
            engine = create_engine(url)
            metadata = MetaData()
            outbox_table(metadata)
            metadata.create_all(engine)
            with Session(engine) as session, session.begin():
                events = [add_webhook(session, endpoint, "order.created", {"order": 2})]
        trace_id = f"{span.get_span_context().trace_id:032x}"
    provider.shutdown()
    print(json.dumps({"trace_id": trace_id, "events": events}))


if __name__ == "__main__":
    main()
