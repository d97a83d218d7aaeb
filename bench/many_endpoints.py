"""What the consume script's key passing costs when deliveries spread over many endpoints.

    python -m bench.many_endpoints [--events N] [--endpoints E] [--rounds R] [--quick]

consume.lua takes every key it touches through ``KEYS`` (Redis Cluster needs that), so the
consumer passes the breaker and schedule-index keys of the ``HELD_ENDPOINTS`` (64) endpoints it
saw most recently; a message for another endpoint makes the script answer ``need`` and the
consumer calls it again with that endpoint's keys. One Hookline worker (``celery -A app worker
-P threads -c 64``, its own Redis), in turn, ``rounds`` times: N events to one endpoint, then N
events spread evenly over E endpoints (all on the same loopback receiver, answering 204), each
timed from the push of ready-made broker messages to the receiver's last arrival. Reported:
events/s of each, their ratio, and the consume-script calls (EVALSHA) per event.
Writes ``bench/results/many_endpoints.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    FastReceiver,
    Worker,
    code_version,
    control_redis,
    machine,
    run_bench,
)

OUTPUT = ROOT / "bench" / "results" / "many_endpoints.json"


def evalsha_calls(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def messages(endpoints: list[str], prefix: str, count: int) -> list[str]:
    from hookline.transport.envelope import build_message
    from hookline.worker.celery import worker_app as celery_app

    return [build_message(celery_app, task_name="hookline.deliver", task_id=f"{prefix}-{n}",
                          args=[endpoints[n % len(endpoints)], "bench.many", {"n": n}],
                          kwargs={"event_id": f"{prefix}-{n}"}, retries=0, queue="hookline")
            for n in range(count)]


def batch(client: Any, receiver: FastReceiver, worker: Worker, built: list[str]) -> dict:
    from hookline.store.connection import ring

    receiver.reset()
    calls = evalsha_calls(client)
    started = time.monotonic()
    for at in range(0, len(built), 1000):
        pipe = client.pipeline(transaction=False)
        pipe.lpush("hookline", *built[at:at + 1000])
        ring(pipe, "hookline", len(built[at:at + 1000]))
        pipe.execute()
    receiver.wait_for(len(built), 300, worker)
    seconds = time.monotonic() - started
    return {"events_per_second": round(len(built) / seconds, 1),
            "evalsha_per_event": round((evalsha_calls(client) - calls) / len(built), 2)}


def run(options: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hl-many-")))
        _control, client = control_redis(stack, workdir)
        from hookline.store.endpoints import EndpointRegistry

        receiver = FastReceiver()
        stack.callback(receiver.stop)
        registry = EndpointRegistry()
        many = [f"ep-{n}" for n in range(options.endpoints)]
        for endpoint_id in [*many, "one"]:
            registry.add(endpoint_id, receiver.url)
        worker = Worker({}, workdir / "worker.log", concurrency=64)
        stack.callback(worker.stop)
        batch(client, receiver, worker, messages(["one"], "warm", 200))
        rounds = []
        for number in range(options.rounds):
            one = batch(client, receiver, worker, messages(["one"], f"one{number}",
                                                           options.events))
            spread = batch(client, receiver, worker, messages(many, f"many{number}",
                                                              options.events))
            rounds.append({"one_endpoint": one, "many_endpoints": spread,
                           "ratio": round(spread["events_per_second"]
                                          / one["events_per_second"], 2)})
        return {"machine": machine(client), "code": code_version(),
                "events": options.events, "endpoints": options.endpoints, "rounds": rounds}


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['events']:,} events a batch; many = {result['endpoints']:,} endpoints",
             "| round | one endpoint | many endpoints | many / one | EVALSHA per event, "
             "one / many |", "|---|---|---|---|---|"]
    for number, row in enumerate(result["rounds"], 1):
        one, many = row["one_endpoint"], row["many_endpoints"]
        lines.append(f"| {number} | {one['events_per_second']}/s | "
                     f"{many['events_per_second']}/s | {row['ratio']} | "
                     f"{one['evalsha_per_event']} / {many['evalsha_per_event']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, help="events per batch (3000; --quick 1000)")
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--rounds", type=int, help="rounds (2; --quick 1)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.events = options.events or (1000 if options.quick else 3000)
    options.rounds = options.rounds or (1 if options.quick else 2)
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
