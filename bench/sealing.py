"""What encryption at rest costs a worker: worker CPU per delivery with
``HOOKLINE_ENCRYPTION_KEYS`` set beside the same worker without it, side by side in one run.

    python -m bench.sealing [--events N] [--rounds R] [--quick]      (or: make bench-sealing)

Two Hookline contenders as in ``bench.compare`` part 1 (``celery -A app worker -P threads
-c 64``), each on its own Redis: ``plain`` (no keys: secrets and header values stored in plain
text) and ``sealed`` (one key: both sealed with AES-256-GCM). Each batch goes to a fresh
endpoint with a header credential, registered under the contender's own setting. In turn,
``rounds`` times: N events to a receiver answering 204 at once, worker CPU ms per delivery
(the sum over the worker's process tree, from /proc). Ratio = sealed / plain, target <= 1.05.
Also: one ``Endpoint.from_hash`` (what a worker does per delivery) in this process, sealed
and plain, in microseconds: the first one of a record opens it, every later one reads the
keyring's memo.

Writes ``bench/results/sealing.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
import timeit
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import control_redis, machine, run_bench
from bench.compare_parts import batch, combine, start
from bench.compare_plots import RESULTS
from bench.compare_procs import Contender, ReceiverProcess

OUTPUT = RESULTS / "sealing.json"
TARGET = 1.05


def sealed_batch(contender: Contender, receiver: ReceiverProcess, name: str, count: int,
                 keys: str) -> dict[str, Any]:
    """One batch, its endpoint registered (with a header) under ``keys`` ("" for none)."""
    from hookline.core import config
    from hookline.store.endpoints import EndpointRegistry

    config.configure({"HOOKLINE_ENCRYPTION_KEYS": keys})
    try:
        EndpointRegistry(contender.client).add(name, receiver.url(name),
                                               headers={"Authorization": "Bearer bench"})
        return batch(contender, receiver, name, count, registered=True)
    finally:
        config.configure()


def from_hash_micros(keys: str) -> float:
    """Microseconds per ``Endpoint.from_hash`` of one record with a header, under ``keys``."""
    from hookline.core import config
    from hookline.core.endpoint import Endpoint

    config.configure({"HOOKLINE_ENCRYPTION_KEYS": keys})
    try:
        stored = Endpoint(id="bench", url="http://127.0.0.1:9/", secrets=("whsec_" + "A" * 44,),
                          headers={"Authorization": "Bearer bench"}).to_hash()
        calls = 20_000
        seconds = timeit.timeit(lambda: Endpoint.from_hash("bench", stored), number=calls)
        return round(seconds / calls * 1e6, 2)
    finally:
        config.configure()


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-sealing-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        _, client = control_redis(stack, workdir)
        from hookline.core import sealing

        key = sealing.generate_key()
        info = machine(client)
        receiver = ReceiverProcess([], workdir / "receiver.log")
        stack.callback(receiver.stop)
        keys = {"plain": "", "sealed": key}
        contenders = {name: start("hookline", workdir, name=name,
                                  env={"HOOKLINE_ENCRYPTION_KEYS": keys[name]})
                      for name in keys}
        for contender in contenders.values():
            stack.callback(contender.stop)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in keys}
        for contender in contenders.values():
            contender.wait_consuming()
            sealed_batch(contender, receiver, f"{contender.name}-warm", 500, keys[contender.name])
        for number in range(options.rounds):
            for name, contender in contenders.items():
                runs[name].append(sealed_batch(contender, receiver, f"{name}-{number}",
                                               options.events, keys[name]))
                print(f"  {name} round {number}: {runs[name][-1]['per_second']:.0f}/s, worker "
                      f"{runs[name][-1]['cpu_ms']['worker']:.3f} ms/delivery", flush=True)
        result = {name: combine(batches) for name, batches in runs.items()}
        ratio = round(result["sealed"]["cpu_ms"]["worker"] / result["plain"]["cpu_ms"]["worker"],
                      3)
        return {"machine": info, "options": vars(options) | {"output": str(options.output)},
                **result, "worker_cpu_ratio": ratio, "target": TARGET, "met": ratio <= TARGET,
                "from_hash_us": {name: from_hash_micros(value) for name, value in keys.items()}}


def report(result: dict[str, Any]) -> str:
    rows = [f"| {name} | {result[name]['per_second']:.0f} | {result[name]['cpu_ms']['worker']:.3f} "
            f"| {result['from_hash_us'][name]:.1f} |" for name in ("plain", "sealed")]
    verdict = "met" if result["met"] else "MISSED"
    return "\n".join([
        "| secrets at rest | events/s | worker CPU ms/delivery | from_hash µs |",
        "|---|---:|---:|---:|", *rows, "",
        f"worker CPU sealed / plain: {result['worker_cpu_ratio']:.3f} (target <= "
        f"{result['target']}: {verdict})"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, help="events per batch (4000; --quick 1500)")
    parser.add_argument("--rounds", type=int, help="batches per contender, in turn (3; --quick 2)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.events = options.events or (1500 if options.quick else 4000)
    options.rounds = options.rounds or (2 if options.quick else 3)
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
