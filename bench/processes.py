"""``hookline worker`` with one process against one per core: deliveries/s, in one run.

    python -m bench.processes [--events N] [--rounds R] [--delay MS]   (part of ``make bench``)

Each contender is ``hookline worker --app app --processes P -c 64`` (P = 1, then the usable
cores) on its own private Redis, publishing N events at once through ``hookline.deliver`` to a
loopback receiver answering 204 after ``--delay`` ms (0 and 100 by default); the time from the
first publish to the receiver's N-th request gives deliveries/s. Contenders run in turn, for
``--rounds`` rounds (the machine's speed drifts). Prints a markdown table and writes
``bench/results/processes.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    FastReceiver,
    bench_environment,
    machine,
    private_redis,
    run_bench,
    stop_process,
)
from hookline.cli.worker import usable_cores

RESULTS = Path(__file__).resolve().parent / "results" / "processes.json"


class SlowReceiver(FastReceiver):
    """:class:`FastReceiver`, answering after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        super().__init__()

    def _record(self, webhook_id: str, signed: bool) -> None:
        if self.delay:
            time.sleep(self.delay)
        super()._record(webhook_id, signed)


def run_once(processes: int, events: int, delay: float, workdir: Path, prefix: str
             ) -> dict[str, Any]:
    with ExitStack() as stack:
        server, client = private_redis(stack, f"p{processes}-{prefix}", workdir)
        os.environ["REDIS_URL"] = server.url
        from hookline.core.config import configure

        configure()
        receiver = SlowReceiver(delay)
        stack.callback(receiver.stop)
        from hookline.store.endpoints import EndpointRegistry

        EndpointRegistry(client).add("procs", receiver.url)
        log = workdir / f"worker-{processes}-{prefix}.log"
        with open(log, "wb") as out:
            worker = subprocess.Popen(
                [str(Path(sys.executable).with_name("hookline")), "worker", "--app", "app",
                 "--processes", str(processes), "-c", "64", "-l", "warning",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=ROOT, env={**os.environ, "HOOKLINE_METRICS_PORT": "0"}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(stop_process, worker)
        deadline = time.monotonic() + 60
        while sum(c.get("cmd") == "blmpop" for c in client.client_list()) < processes:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"workers not consuming:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        import hookline

        started = time.monotonic()
        for n in range(events):
            hookline.deliver.delay("procs", "order.paid", {"n": n}, event_id=f"{prefix}-{n}")
        published = time.monotonic() - started

        class Alive:
            def check_alive(self) -> None:
                if worker.poll() is not None:
                    raise RuntimeError(f"the workers exited:\n{log.read_text()[-3000:]}")

        receiver.wait_for(events, 120 + events / 20, Alive())  # type: ignore[arg-type]
        seconds = time.monotonic() - started
        return {"processes": processes, "events": events, "delay_ms": delay * 1000,
                "seconds": round(seconds, 2), "publish_seconds": round(published, 2),
                "per_second": round(events / seconds, 1),
                "duplicates": receiver.hits - receiver.distinct}


def run(options: argparse.Namespace) -> dict[str, Any]:
    cores = usable_cores()
    with tempfile.TemporaryDirectory(prefix="hookline-procs-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        bench_environment(workdir)
        _, control = private_redis(stack, "control", workdir)
        result: dict[str, Any] = {"machine": machine(control), "cores": cores,
                                  "events": options.events, "runs": []}
        for delay in options.delays:
            for number in range(options.rounds):
                for processes in sorted({1, cores}):
                    one = run_once(processes, options.events, delay / 1000, workdir,
                                   f"d{delay}-r{number}-p{processes}")
                    result["runs"].append(one)
                    print(f"{delay} ms, {processes} process(es), round {number + 1}: "
                          f"{one['per_second']}/s", flush=True)
        return result


def report(result: dict[str, Any]) -> str:
    info = result["machine"]
    lines = [f"{info['date']}, {info['cpus']} cores {info['cpu_model']}, load "
             f"{info['load_average']}, commit {info.get('commit', '')}; {result['events']} "
             "events at once, hookline worker -c 64 per process", "",
             "| receiver answers after | 1 process, deliveries/s | one per core "
             f"({result['cores']}), deliveries/s | ratio |", "|---|---|---|---|"]
    delays = sorted({run["delay_ms"] for run in result["runs"]})
    for delay in delays:
        def rates(processes: int, delay: float = delay) -> list[float]:
            return [r["per_second"] for r in result["runs"]
                    if r["delay_ms"] == delay and r["processes"] == processes]
        one, many = rates(1), rates(result["cores"])
        ratio = (sum(many) / len(many)) / (sum(one) / len(one)) if one and many else 0
        lines.append(f"| {delay:g} ms | {' / '.join(f'{x:g}' for x in one)} | "
                     f"{' / '.join(f'{x:g}' for x in many)} | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--delays", type=lambda t: [float(x) for x in t.split(",")],
                        default=[0.0, 100.0], help="receiver delays, ms (0,100)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    return run_bench(run, parser.parse_args(argv), report)


if __name__ == "__main__":
    sys.exit(main())
