"""What ``send_webhook``'s checks cost beside a plain ``.delay()``, by payload size: the same
event enqueued both ways, side by side in one run, on the benchmark's own Redis, no worker.

    python -m bench.enqueue_sizes [--calls N] [--quick]      (or: make bench-enqueue-sizes)

``bench.compare`` part 7 measures the two at one small payload. ``send_webhook`` also checks
the payload (one JSON serialisation, its depth and size) and binds the event id to its content
(a digest of the canonical JSON), each a pass over the payload that ``.delay()`` does not make,
so the ratio grows with the payload. Payloads of about 100 B, 2 KB and 20 KB (an order with
its lines, built before the clock starts); in turn, four blocks of each call per size after a
warm-up of 100. Ratio = ``send_webhook`` / ``deliver.delay()`` per call; target <= 1.2 (part
7's) at every size.

Writes ``bench/results/enqueue-sizes.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import control_redis, machine, run_bench
from bench.compare_plots import RESULTS

OUTPUT = RESULTS / "enqueue-sizes.json"
TARGET = 1.2
SIZES = (100, 2_000, 20_000)
BLOCKS = 4


def order(size: int, n: int) -> dict[str, Any]:
    """An order of about ``size`` bytes of compact JSON: its number and its lines."""
    lines = [{"sku": f"s{i}", "qty": i, "price": 1.5 * i} for i in range(max(1, size // 40))]
    return {"order": n, "items": lines}


def per_call(calls: int) -> list[dict[str, Any]]:
    """Microseconds per call of each way, at each size (the endpoint registered first)."""
    from hookline import deliver, send_webhook
    from hookline.store.endpoints import EndpointRegistry

    EndpointRegistry().add("enqueue", "http://127.0.0.1:9/hook")
    rows = []
    for size in SIZES:
        # Built before the clock starts: only the enqueueing is timed.
        orders = [order(size, n) for n in range(16)]
        ways = {
            "send_webhook_us": lambda n, orders=orders: send_webhook(
                "enqueue", "order.created", orders[n % 16]),
            "delay_us": lambda n, orders=orders: deliver.delay(
                "enqueue", "order.created", orders[n % 16]),
        }
        for call in ways.values():
            for n in range(100):
                call(n)
        took = dict.fromkeys(ways, 0.0)
        block = max(1, calls // BLOCKS)
        for _ in range(BLOCKS):
            for key, call in ways.items():
                started = time.perf_counter()
                for n in range(block):
                    call(n)
                took[key] += time.perf_counter() - started
        row: dict[str, Any] = {key: round(value * 1e6 / (block * BLOCKS), 1)
                               for key, value in took.items()}
        row.update(payload_bytes=len(json.dumps(order(size, 1), separators=(",", ":"))),
                   calls=block * BLOCKS,
                   ratio=round(took["send_webhook_us"] / took["delay_us"], 3))
        rows.append(row)
    return rows


def run(options: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="enqsizes-")))
        _control, client = control_redis(stack, workdir)
        return {"machine": machine(client), "target": TARGET, "sizes": per_call(options.calls)}


def report(result: dict[str, Any]) -> str:
    lines = ["| payload | send_webhook, µs per call | deliver.delay(), µs | ratio |",
             "|---|---|---|---|"]
    for row in result["sizes"]:
        lines.append(f"| {row['payload_bytes']:,} B | {row['send_webhook_us']} | "
                     f"{row['delay_us']} | {row['ratio']} |")
    worst = max(row["ratio"] for row in result["sizes"])
    verdict = "holds" if worst <= TARGET else "missed"
    lines.append(f"\nTarget <= {TARGET} at every size: {verdict} (worst {worst}).")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per way and size (4000)")
    parser.add_argument("--quick", action="store_true", help="400 calls per way and size")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args()
    if options.quick:
        options.calls = 400
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
