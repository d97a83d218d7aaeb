"""What traces cost a delivery: worker CPU per delivery with OpenTelemetry not installed (its
import blocked), installed but not configured (the API imported, no tracer provider), and
configured (the SDK, a BatchSpanProcessor and an exporter that drops the spans).

    python -m bench.tracing [--events N] [--rounds R]

It starts a redis-server of its own; REDIS_URL, when set, names a Redis database it empties
instead.

Each mode runs in a fresh process, rounds interleaved: ``--events`` deliveries through what
the worker runs per delivery (the task's span, ``DeliveryEngine.attempt``: admit, sign, POST,
settle on the real Redis) to a loopback receiver in its own process answering 204; the CPU
time of the process (``time.process_time``, the batch processor's thread included) per
delivery, the median of the rounds. The targets (issue 35): not configured <= 1.01 x not
installed; configured <= 1.10 x. Writes bench/results/tracing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import private_redis, run_bench
from tests.support.servers import free_port

OUTPUT = Path(__file__).parent / "results" / "tracing.json"
#: not_configured_bypassed: as not_configured, with Hookline's check answering "off" at once
#: (the cost left between it and not_installed is redis-py 8's own OpenTelemetry hooks).
#: sdk_floor: as configured, but Hookline's spans replaced by the least the SDK can do for the
#: same two spans and attributes (start, attributes, end): what any instrumentation pays.
MODES = ("not_installed", "not_configured_bypassed", "not_configured", "sdk_floor",
         "configured")

_CHILD = r"""
import json, sys, time, uuid
mode, url, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "not_installed":
    sys.modules["opentelemetry"] = None  # import opentelemetry fails, as if not installed
elif mode.startswith("not_configured"):
    import opentelemetry.trace  # noqa: F401 (imported by someone; no provider set)
else:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
from hookline.core import tracing
if mode in ("not_configured_bypassed", "sdk_floor"):
    tracing.tracer = lambda: None
if mode == "sdk_floor":
    floor = trace.get_tracer("floor")
from hookline.delivery.engine import DeliveryEngine, DeliveryRequest
from hookline.store.endpoints import EndpointRegistry

registry = EndpointRegistry()
registry.redis.flushdb()
registry.add("bench", url)
engine = DeliveryEngine()

class Request(dict):
    id = "bench"
    delivery_info = {"routing_key": "hookline"}

def one(index):
    event_id = f"{uuid.uuid4()}"
    request = DeliveryRequest("bench", "order.created", {"order": index, "lines": [1, 2, 3]},
                              event_id, enqueued_at=time.time())
    if mode == "sdk_floor":
        return floor_one(index, event_id, request)
    with tracing.consuming(Request(), "hookline.deliver", endpoint_id="bench",
                           event_id=event_id) as traced:
        result = traced.finished({"outcome": engine.attempt(request, token=f"t-{index}").outcome})
    assert result["outcome"] == "delivered", result

def floor_one(index, event_id, request):
    kinds = trace.SpanKind
    task = floor.start_span("process hookline.deliver", kind=kinds.CONSUMER, attributes={
        "messaging.operation.type": "process", "messaging.destination.name": "hookline",
        "messaging.message.id": "bench", "hookline.endpoint.id": "bench",
        "hookline.event.id": event_id})
    attempt = floor.start_span("POST", context=trace.set_span_in_context(task),
                               kind=kinds.CLIENT, attributes={
        "http.request.method": "POST", "server.address": "127.0.0.1", "server.port": 1,
        "url.full": url, "hookline.endpoint.id": "bench", "hookline.event.id": event_id,
        "hookline.attempt": 1})
    outcome = engine.attempt(request, token=f"t-{index}").outcome
    for span in (attempt, task):
        span.set_attribute("hookline.outcome", outcome)
    attempt.set_attribute("http.response.status_code", 204)
    attempt.end()
    task.end()

for index in range(200):  # warm: pools, scripts, caches
    one(index)
started = time.process_time()
for index in range(events):
    one(index)
spent = time.process_time() - started
if mode in ("configured", "sdk_floor"):
    provider.shutdown()
print(json.dumps({"cpu_per_delivery_us": spent / events * 1e6,
                  "loaded_otel": any(m.startswith("opentelemetry") for m in sys.modules
                                     if sys.modules[m] is not None)}))
"""


def run(events: int, rounds: int) -> dict[str, Any]:
    with ExitStack() as stack:  # a redis-server of its own unless REDIS_URL names one
        url = os.environ.get("REDIS_URL")
        if url is None:
            server, _client = private_redis(stack, "tracing",
                                            Path(stack.enter_context(tempfile.TemporaryDirectory())))
            url = f"redis://127.0.0.1:{server.port}/0"
        return _run(events, rounds, url)


def _run(events: int, rounds: int, url: str) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "REDIS_URL": url, "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8"}
    receiver = subprocess.Popen([sys.executable, "-m", "examples.receiver", "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(1.0)
        found: dict[str, list[float]] = {mode: [] for mode in MODES}
        loaded: dict[str, bool] = {}
        for _ in range(rounds):
            for mode in MODES:
                out = subprocess.run([sys.executable, "-c", _CHILD, mode,
                                      f"http://127.0.0.1:{port}/hook", str(events)],
                                     env=env, capture_output=True, text=True, check=True)
                answer = json.loads(out.stdout.strip().splitlines()[-1])
                found[mode].append(answer["cpu_per_delivery_us"])
                loaded[mode] = answer["loaded_otel"]
    finally:
        receiver.terminate()
        receiver.wait()
    median = {mode: statistics.median(values) for mode, values in found.items()}
    base = median["not_installed"]
    return {"events": events, "rounds": rounds, "cpu_per_delivery_us": median,
            "samples_us": found, "opentelemetry_loaded": loaded,
            "ratio": {mode: median[mode] / base for mode in MODES}}


def report(result: dict[str, Any]) -> str:
    return "\n".join(["| mode | CPU per delivery (us) | ratio |", "|---|---|---|"] + [
        f"| {mode} | {result['cpu_per_delivery_us'][mode]:.0f} | {result['ratio'][mode]:.3f} |"
        for mode in MODES])


def main(argv: list[str] | None = None) -> int:
    return run_rounds(__doc__, run, report, OUTPUT, events=2000, rounds=5, argv=argv)


def run_rounds(doc: str | None, run: Callable[[int, int], dict[str, Any]],
               report: Callable[[dict[str, Any]], str], output: Path, *, events: int,
               rounds: int, argv: list[str] | None) -> int:
    """The command line of a rounds-of-events benchmark (this one, bench.tracing_worker):
    ``--events``, ``--rounds`` and ``--output``, run through ``run_bench``."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=events)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--output", type=Path, default=output)
    options = parser.parse_args(argv)
    return run_bench(lambda o: run(o.events, o.rounds), options, report)


if __name__ == "__main__":
    sys.exit(main())
