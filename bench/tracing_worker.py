"""What traces cost a real worker: CPU per delivery of ``celery -A app worker`` (threads, 64)
with OpenTelemetry not installed (its import blocked), installed but not configured, and
configured as a host would: the SDK, a ``BatchSpanProcessor`` and the OTLP/HTTP exporter
posting to a collector on loopback, every trace kept, and the same keeping one in ten.

    python -m bench.tracing_worker [--events N] [--rounds R]

Each mode has a private Redis and one worker, started together; each round pushes
``--events`` events to every mode at once (so the three meet the same load of the machine)
and waits for the last arrival of each at a receiver in its own process that answers 204 at
once. The worker's CPU time (user + system, from /proc) per delivery is the measure; the ratio
against not installed is taken within each round and the median of the rounds reported. The
targets (issue 35): installed, not configured <= 1.01 x; configured <= 1.10 x. Writes
bench/results/tracing-worker.json. ``python -m bench.tracing`` measures the same at the
delivery engine alone (no Celery, no kombu).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import code_version, control_redis, machine
from bench.compare_meters import CpuMeter
from bench.compare_parts import batch, start
from bench.compare_procs import Contender, ReceiverProcess
from bench.tracing import run_rounds
from hookline.store.endpoints import EndpointRegistry

OUTPUT = Path(__file__).parent / "results" / "tracing-worker.json"
MODES = ("not_installed", "not_configured", "sdk_floor", "configured", "configured_sampled")
BASE = MODES[0]

#: sdk_floor: configured, with Hookline's task and attempt spans replaced by the least the SDK
#: does for the same two spans and attributes (start, end, no propagation, no links): what any
#: instrumentation of a delivery pays, the floor under Hookline's own.
FLOOR = """
from opentelemetry import context
from hookline.core import tracing

floor = trace.get_tracer("floor")
KIND = trace.SpanKind


class Span:
    def __init__(self, name, kind, attributes):
        self.name, self.kind, self.attributes = name, kind, attributes

    def __enter__(self):
        self.span = floor.start_span(self.name, kind=self.kind, attributes=self.attributes)
        self.token = context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, *exc):
        context.detach(self.token)
        self.span.end()

    def finished(self, result):
        self.span.set_attribute("hookline.outcome", str(result.get("outcome")))
        return result


class Task(Span):
    def __enter__(self):
        super().__enter__()
        return self


def consuming(request, task, *, endpoint_id, event_id):
    return Task(f"process {task}", KIND.CONSUMER, {
        "messaging.operation.type": "process", "messaging.destination.name": "hookline",
        "messaging.message.id": str(request.id), "hookline.endpoint.id": endpoint_id,
        "hookline.event.id": event_id})


def client(endpoint_id, url, event_id, attempt):
    return Span("POST", KIND.CLIENT, {
        "http.request.method": "POST", "server.address": "127.0.0.1", "server.port": 80,
        "url.full": url, "hookline.endpoint.id": endpoint_id, "hookline.event.id": event_id,
        "hookline.attempt": attempt or 0})


def record_attempt(span, status, error, outcome):
    span.set_attribute("http.response.status_code", status or 0)
    span.set_attribute("hookline.outcome", outcome)


tracing.consuming, tracing.client, tracing.record_attempt = consuming, client, record_attempt
"""
#: configured_sampled: as configured, with the standard sampler variables keeping one trace in
#: ten (``parentbased_traceidratio``: a traced web request's decision is kept).
SAMPLED = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}
#: Each mode's ``sitecustomize``, run by the worker's interpreter before anything else.
SITE = {
    "not_installed": 'import sys\nsys.modules["opentelemetry"] = None  # as if not installed\n',
    "not_configured": "",
    "configured": """\
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "bench-worker"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_*
trace.set_tracer_provider(provider)
""",
}
SITE["sdk_floor"] = SITE["configured"] + FLOOR


def run(events: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-tracing-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        _control, client = control_redis(stack, workdir)
        info = machine(client)
        receiver = ReceiverProcess([], workdir / "receiver.log")
        stack.callback(receiver.stop)
        contenders = {}
        for mode in MODES:
            site = workdir / f"site-{mode}"
            site.mkdir()
            (site / "sitecustomize.py").write_text(SITE[mode.removesuffix("_sampled")])
            env = {"PYTHONPATH": str(site), "OTEL_SERVICE_NAME": "bench-worker",
                   "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url(f"otlp-{mode}"),
                   **(SAMPLED if mode.endswith("_sampled") else {})}
            contenders[mode] = start("hookline", workdir, name=mode, env=env)
            stack.callback(contenders[mode].stop)
        for mode, contender in contenders.items():
            contender.wait_consuming()
            batch(contender, receiver, f"{mode}-warm", min(500, events))
        found: dict[str, list[float]] = {mode: [] for mode in MODES}
        for number in range(rounds):
            spent = together(contenders, receiver, number, events)
            for mode in MODES:
                found[mode].append(spent[mode])
            print(f"  round {number + 1}: " + ", ".join(
                f"{mode} {found[mode][-1]:.0f} us" for mode in MODES), flush=True)
        exported = {mode: receiver.stats(f"otlp-{mode}")["hits"] for mode in MODES}
    return summary(found, events, rounds) | {"otlp_exports": exported, "machine": info,
                                              "code": code_version()}


def together(contenders: dict[str, Contender], receiver: ReceiverProcess, number: int,
             events: int) -> dict[str, float]:
    """One round: ``events`` to every mode at once; each worker's CPU us per delivery, read as
    its last event arrives (the modes are waited on in an order that rotates by round)."""
    names = {mode: f"{mode}-{number}" for mode in contenders}
    messages = {}
    for mode, contender in contenders.items():
        EndpointRegistry(contender.client).add(names[mode], receiver.url(names[mode]))
        messages[mode] = contender.messages(names[mode], names[mode], events)
    meters = {mode: CpuMeter(c.workers, c.client, receiver.process.pid)
              for mode, c in contenders.items()}
    for mode, contender in contenders.items():
        contender.push(messages[mode])
    spent = {}
    for mode in MODES[number % len(MODES):] + MODES[:number % len(MODES)]:
        receiver.wait(names[mode], events, 60 + events / 10, contenders[mode].workers)
        spent[mode] = meters[mode].per_event(events)[0]["worker"] * 1000
    return spent


def summary(found: dict[str, list[float]], events: int, rounds: int) -> dict[str, Any]:
    """Medians of the CPU per delivery, and of the per-round ratios against not installed."""
    ratios = {mode: [value / base for value, base in zip(found[mode], found[BASE], strict=True)]
              for mode in MODES}
    return {"events": events, "rounds": rounds,
            "cpu_per_delivery_us": {m: round(statistics.median(v), 1) for m, v in found.items()},
            "ratio": {mode: round(statistics.median(ratios[mode]), 3) for mode in MODES},
            "samples_us": {mode: [round(v, 1) for v in values] for mode, values in found.items()},
            "targets": {"not_configured": 1.01, "configured": 1.10},
            "sampler": SAMPLED}


def report(result: dict[str, Any]) -> str:
    targets = result["targets"]
    return "\n".join([
        "| mode | worker CPU per delivery (us) | ratio (median of rounds) | target |",
        "|---|---|---|---|"] + [
        f"| {mode} | {result['cpu_per_delivery_us'][mode]:.0f} | {result['ratio'][mode]:.3f} | "
        f"{'<= ' + str(targets[mode]) if mode in targets else ''} |" for mode in MODES])


def main(argv: list[str] | None = None) -> int:
    return run_rounds(__doc__, run, report, OUTPUT, events=3000, rounds=7, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
