"""Fanning one event out to 1,000 endpoints (``hookline.publish``) beside the same 1,000
deliveries sent one by one (``hookline.send_webhook`` per endpoint).

    python -m bench.fanout [--endpoints N] [--rounds R]   (part of ``make bench``)

On a private Redis (state and broker), one application with N endpoints all answered by one
loopback receiver (204):

(a) **Enqueued**: no worker runs. The fan-out: ``publish`` (the event recorded, its fan-out
    task queued: what the caller waits for), then the fan-out task's work done in this process
    (``hookline.delivery.fanout.expand``: the N deliveries on the queue). One by one: N
    ``send_webhook`` calls. Median of R rounds. Round trips: the requests this process sent
    to Redis (a pipeline or script call is one), per fan-out and for the N calls; beside them
    Redis's ``total_reads_processed`` (a request of several hundred KB takes several reads).
(b) **Delivered**: one worker (``-P threads -c 16``) running; the time from the first call
    until the receiver has had all N requests, the fan-out beside N ``send_webhook`` calls.

Prints a markdown table and writes ``bench/results/fanout.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import FastReceiver, Worker, control_redis, machine, run_bench

RESULTS = Path(__file__).resolve().parent / "results" / "fanout.json"
APP = "bench-tenant"
PAYLOAD = {"object": "order", "id": "ord_1", "amount": 1999, "currency": "EUR",
           "lines": [{"sku": "A-1", "quantity": 2}]}


class RoundTrips:
    """Requests this process sends to Redis (a pipeline or a script call is one: what waits
    for one reply), counted in redis-py's connection; the state client and kombu's alike."""

    def __init__(self) -> None:
        import redis.connection

        self.count = 0
        original = redis.connection.Connection.send_packed_command
        meter = self

        def counted(connection: Any, command: Any, check_health: bool = True) -> None:
            meter.count += 1
            original(connection, command, check_health)

        redis.connection.Connection.send_packed_command = counted  # type: ignore[method-assign]


def reads(client: Any) -> int:
    """Socket reads Redis served (a large pipeline or script call may take several)."""
    return int(client.info("stats")["total_reads_processed"])


def emptied_queue(client: Any) -> None:
    from hookline.core.messages import DELIVERY_QUEUE
    from hookline.store.keys import doorbell_key

    client.delete(DELIVERY_QUEUE, doorbell_key(DELIVERY_QUEUE))


def enqueue_round(client: Any, meter: RoundTrips, endpoint_ids: list[str],
                  tag: str) -> dict[str, float]:
    """(a) once: the fan-out, then the N calls; seconds and round trips of each."""
    import hookline
    from hookline.delivery.fanout import expand

    start_reads = reads(client)
    start_trips, start = meter.count, time.perf_counter()
    hookline.publish(APP, "order.paid", PAYLOAD, event_id=f"fan-{tag}")
    published = time.perf_counter()
    publish_trips = meter.count - start_trips
    expand(APP, f"fan-{tag}")
    fanned = time.perf_counter()
    fan_trips = meter.count - start_trips
    fan_reads = reads(client) - start_reads - 1
    emptied_queue(client)
    start_reads = reads(client)
    start_trips, start_one = meter.count, time.perf_counter()
    for number, endpoint_id in enumerate(endpoint_ids):
        hookline.send_webhook(endpoint_id, "order.paid", PAYLOAD, event_id=f"one-{tag}-{number}")
    one_by_one = time.perf_counter() - start_one
    one_trips = meter.count - start_trips
    one_reads = reads(client) - start_reads - 1
    emptied_queue(client)
    return {"publish_s": published - start, "fanout_s": fanned - start,
            "publish_round_trips": publish_trips, "fanout_round_trips": fan_trips,
            "fanout_redis_reads": fan_reads, "one_by_one_s": one_by_one,
            "one_by_one_round_trips": one_trips, "one_by_one_redis_reads": one_reads}


def delivered_run(receiver: FastReceiver, worker: Worker, endpoint_ids: list[str],
                  fan: bool, tag: str) -> float:
    """(b) once: seconds until the receiver has had every endpoint's request."""
    import hookline

    receiver.reset()
    start = time.perf_counter()
    if fan:
        hookline.publish(APP, "order.paid", PAYLOAD, event_id=f"deliver-fan-{tag}")
    else:
        for number, endpoint_id in enumerate(endpoint_ids):
            hookline.send_webhook(endpoint_id, "order.paid", PAYLOAD,
                                  event_id=f"deliver-one-{tag}-{number}")
    receiver.wait_for(len(endpoint_ids), timeout=600, worker=worker)
    return time.perf_counter() - start


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-fanout-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        server, client = control_redis(stack, workdir, HOOKLINE_LOG_FORMAT="text")
        from hookline.store.apps import AppRegistry
        from hookline.store.endpoints import EndpointRegistry

        receiver = FastReceiver()
        stack.callback(receiver.stop)
        AppRegistry(client).add(APP)
        registry = EndpointRegistry(client)
        endpoint_ids = [f"ep-{n:05d}" for n in range(options.endpoints)]
        for endpoint_id in endpoint_ids:
            registry.add(endpoint_id, receiver.url, app=APP)
        result: dict[str, Any] = {"machine": machine(client), "endpoints": options.endpoints,
                                  "rounds": options.rounds}
        meter = RoundTrips()
        enqueue_round(client, meter, endpoint_ids[:50], "warm")
        rounds = [enqueue_round(client, meter, endpoint_ids, str(number))
                  for number in range(options.rounds)]
        enqueued = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        enqueued["ratio"] = enqueued["one_by_one_s"] / enqueued["fanout_s"]
        enqueued["publish_ratio"] = enqueued["one_by_one_s"] / enqueued["publish_s"]
        result["enqueued"] = {**{k: round(v, 4) for k, v in enqueued.items()}, "rounds": rounds}
        print(f"enqueued: {result['enqueued']}", flush=True)
        worker = Worker({"REDIS_URL": server.url}, workdir / "worker.log", concurrency=16)
        stack.callback(worker.stop)
        delivered_run(receiver, worker, endpoint_ids[:20], False, "warm")  # worker consuming
        delivered: dict[str, list[float]] = {"fanout_s": [], "one_by_one_s": []}
        for number in range(options.delivery_rounds):  # in turn: the machine's speed drifts
            delivered["fanout_s"].append(
                delivered_run(receiver, worker, endpoint_ids, True, str(number)))
            delivered["one_by_one_s"].append(
                delivered_run(receiver, worker, endpoint_ids, False, str(number)))
        summary = {key: round(statistics.median(values), 3) for key, values in delivered.items()}
        summary["ratio"] = round(summary["one_by_one_s"] / summary["fanout_s"], 2)
        result["delivered"] = {**summary, "runs": delivered}
        return result


def report(result: dict[str, Any]) -> str:
    info, queued, sent = result["machine"], result["enqueued"], result["delivered"]
    n = result["endpoints"]
    return "\n".join([
        f"{info['date']}, {info['cpus']} cores {info['cpu_model']}, Python {info['python']}, "
        f"Celery {info['celery']}, kombu {info['kombu']}, Redis {info['redis_server']}, "
        f"commit {info['commit']}",
        "",
        f"| one event to {n} endpoints | fan-out (`publish`) | {n} x `send_webhook` | ratio |",
        "|---|---|---|---|",
        f"| `publish()` returns (event recorded, fan-out queued) | {queued['publish_s']*1000:.1f}"
        f" ms | - | - |",
        f"| all {n} deliveries enqueued (median of {result['rounds']}) | "
        f"{queued['fanout_s']*1000:.0f} ms | {queued['one_by_one_s']*1000:.0f} ms | "
        f"{queued['ratio']:.1f}x (target >= 10x) |",
        f"| Redis round trips to enqueue (requests; `publish()` alone: "
        f"{queued['publish_round_trips']:.0f}) | {queued['fanout_round_trips']:.0f} | "
        f"{queued['one_by_one_round_trips']:.0f} | - |",
        f"| Redis socket reads (a large request takes several) | "
        f"{queued['fanout_redis_reads']:.0f} | {queued['one_by_one_redis_reads']:.0f} | - |",
        f"| all {n} delivered, one worker -c 16 | {sent['fanout_s']:.2f} s | "
        f"{sent['one_by_one_s']:.2f} s | {sent['ratio']:.2f}x |",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5, help="enqueue rounds (median)")
    parser.add_argument("--delivery-rounds", type=int, default=2,
                        help="delivery rounds, fan-out and one by one in turn (median)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    if options.endpoints < 50 or options.rounds < 1 or options.delivery_rounds < 1:
        parser.error("--endpoints >= 50, --rounds and --delivery-rounds >= 1")
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
