"""What one delivery costs Redis, Hookline beside the naive task, and what idle workers add.

    python -m bench.redis_cost [--events N] [--rate R] [--seconds S] [--idle-workers W]
    (part of ``make bench``)

Each contender runs on its own private Redis (Hookline: broker and state on the same one, the
default set-up), with the bench process publishing and a loopback receiver answering 204.

1. **Per delivery** (``cost``): Hookline (``hookline.deliver.delay``, every gate on:
   idempotency, breaker, a rate limit far above the load, attempt history) and the naive task
   (``bench/naive.py``), one worker ``-P threads -c 16`` each. N events published at once
   (``batch``), then the same number paced at R events/s (``paced``: every delivery finds the
   workers idle, so it also pays for waking them). Per delivery: Redis commands (``INFO
   commandstats`` after ``CONFIG RESETSTAT``, which counts the commands Lua scripts run too),
   scripts (EVAL/EVALSHA), round trips (``INFO stats`` ``total_reads_processed``: socket reads
   Redis served; a pipeline or a blocking command's wake-up is one), Redis CPU
   (``used_cpu_user + used_cpu_sys``). The bench's own INFO/CONFIG calls are left out.
2. **Idle workers** (``idle``): 1 then W Hookline worker processes (``-P threads -c 4``) on a
   fresh Redis each, every one consuming and idle, then S seconds of R events/s; in turn for
   ``--rounds`` rounds (the machine's speed drifts). Redis CPU per event with W over with 1
   (the issue's target: at most 1.2), and consume calls (LMPOP) per event.

Prints a markdown table and writes ``bench/results/redis_cost.json``. Everything it starts is
stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis

from bench.common import (
    FastReceiver,
    RedisServer,
    Worker,
    bench_environment,
    machine,
    private_redis,
    run_bench,
)
from hookline.transport.records import held_count

RESULTS = Path(__file__).resolve().parent / "results" / "redis_cost.json"
ENDPOINT = "cost"
#: What the bench's control connection sends while counting (left out of the counts).
OWN_COMMANDS = ("info", "config|resetstat", "client|list", "llen", "hlen")


class Meter:
    """Redis counters between two reads: commands by name, socket reads, CPU seconds."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        client.config_resetstat()
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        stats = self.client.info("stats")
        cpu = self.client.info("cpu")
        return {"reads": float(stats["total_reads_processed"]),
                "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])}

    def per_event(self, events: int, own_reads: int) -> dict[str, Any]:
        end = self._read()
        stats = self.client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(value["calls"])
                 for name, value in stats.items()}
        usec = {name.removeprefix("cmdstat_"): int(value["usec"]) for name, value in stats.items()}
        for name in OWN_COMMANDS:
            calls.pop(name, None)
            usec.pop(name, None)
        scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
        return {
            "events": events,
            "commands": round(sum(calls.values()) / events, 2),
            "scripts": round(scripts / events, 2),
            # Each of the bench's own calls is one read; +3 for the two INFO and CONFIG here.
            "round_trips": round((end["reads"] - self.start["reads"] - own_reads - 3) / events,
                                 2),
            "redis_cpu_ms": round((end["cpu"] - self.start["cpu"]) * 1000 / events, 3),
            "by_command": {n: round(c / events, 2) for n, c in
                           sorted(calls.items(), key=lambda item: -item[1])},
            # Redis's own time in each command (EVALSHA's includes the commands its script
            # ran, which are counted under their names too), microseconds per delivery.
            "usec_by_command": {n: round(u / events, 1) for n, u in
                                sorted(usec.items(), key=lambda item: -item[1])},
        }


class Contender:
    """One private Redis, its worker processes and the way to publish one event."""

    def __init__(self, name: str, stack: ExitStack, workdir: Path, receiver: FastReceiver,
                 workers: int, concurrency: int, server: RedisServer, client: redis.Redis
                 ) -> None:
        self.name, self.receiver, self.client, self.server = name, receiver, client, server
        self.workers: list[Worker] = []
        hookline = name == "hookline"
        env = ({"REDIS_URL": server.url} if hookline else
               {"BENCH_NAIVE_BROKER_URL": server.url})
        for number in range(workers):
            worker = Worker(env, workdir / f"{name}-{number}.log", concurrency=concurrency,
                            app="app" if hookline else "bench.naive")
            stack.callback(worker.stop)
            self.workers.append(worker)
        if hookline:
            from hookline.store.endpoints import EndpointRegistry

            EndpointRegistry(client).add(ENDPOINT, receiver.url, rate="1000/s", burst=1000)

    def publish(self, n: int, prefix: str) -> None:
        payload = {"n": n, "object": "order", "amount": 1999}
        if self.name == "hookline":
            import hookline

            hookline.deliver.delay(ENDPOINT, "order.paid", payload, event_id=f"{prefix}-{n}")
        else:
            from bench import naive

            naive.webhook.delay(self.receiver.url, {"type": "order.paid", "data": payload})

    def check_alive(self) -> None:
        for worker in self.workers:
            worker.check_alive()

    def wait_consuming(self, timeout: float = 90.0) -> None:
        """Until every worker's consumer blocks (BRPOP, or Hookline's BLMPOP on its doorbell;
        0.2.0's XREAD) and its releaser too (BLPOP), so that a measure starts with all of
        them idle."""
        deadline = time.monotonic() + timeout
        blocking = {"brpop", "blpop", "blmpop", "xread"}
        releasers = len(self.workers) if self.name == "hookline" else 0  # BLPOP on the wake key
        while True:
            blocked = sum(c.get("cmd") in blocking for c in self.client.client_list())
            if blocked >= len(self.workers) + releasers:
                return
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: {blocked} blocked clients after "
                                   f"{timeout:.0f}s")
            time.sleep(0.1)

    def wait_settled(self, timeout: float = 60.0) -> None:
        """Until the queues and the unacknowledged hash are empty (the last acks are in)."""
        deadline = time.monotonic() + timeout
        while self.client.llen("hookline" if self.name == "hookline" else "celery") or \
                held_count(self.client):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: not drained after {timeout:.0f}s")
            time.sleep(0.05)


def batch(contender: Contender, prefix: str, count: int, rate: float = 0.0) -> dict[str, Any]:
    """``count`` events, at once (``rate`` 0) or paced at ``rate``/s; Redis cost per event."""
    contender.wait_consuming()
    contender.receiver.reset()
    meter = Meter(contender.client)
    started = time.monotonic()
    for n in range(count):
        if rate:
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
        contender.publish(n, prefix)
    contender.receiver.wait_for(count, 60 + count / 10, contender.workers[0])
    seconds = time.monotonic() - started
    contender.wait_settled()
    time.sleep(0.3)  # the last task events (published every 0.1 s) and acks
    own = 4 + int(seconds / 0.05)  # wait_consuming's list, the settle polls (upper bound)
    result = contender.receiver.hits - contender.receiver.distinct
    cost = meter.per_event(count, own)
    return {**cost, "seconds": round(seconds, 2), "duplicates": result,
            "rate": rate or None}


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-cost-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        hook_server, hook_client = private_redis(stack, "hookline", workdir)
        naive_server, naive_client = private_redis(stack, "naive", workdir)
        bench_environment(workdir, REDIS_URL=hook_server.url,
                          BENCH_NAIVE_BROKER_URL=naive_server.url, HOOKLINE_LOG_FORMAT="text")
        info = machine(hook_client)
        receiver = FastReceiver()
        stack.callback(receiver.stop)
        result: dict[str, Any] = {"machine": info, "events": options.events,
                                  "rate": options.rate, "rounds": options.rounds, "cost": {},
                                  "idle": {}}
        with ExitStack() as part:
            contenders = {
                "naive": Contender("naive", part, workdir, receiver, 1, 16, naive_server,
                                   naive_client),
                "hookline": Contender("hookline", part, workdir, receiver, 1, 16, hook_server,
                                      hook_client),
            }
            for name, contender in contenders.items():
                batch(contender, "warm", min(200, options.events))
                result["cost"][name] = {
                    "batch": batch(contender, "batch", options.events),
                    "paced": batch(contender, "paced", options.events // 4, options.rate),
                }
                print(f"{name}: {result['cost'][name]}", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {"1": [], str(options.idle_workers): []}
        for number in range(options.rounds):  # in turn: the machine's speed drifts
            for workers in (1, options.idle_workers):
                with ExitStack() as part:  # a fresh Redis for each
                    server, client = private_redis(part, f"idle{workers}-{number}", workdir)
                    os.environ["REDIS_URL"] = server.url
                    from hookline.core.config import configure

                    configure()  # this process publishes there too
                    contender = Contender("hookline", part, workdir, receiver, workers, 4,
                                          server, client)
                    batch(contender, f"idle{workers}-warm", 20 * workers)
                    events = round(options.rate * options.seconds)
                    runs[str(workers)].append(batch(contender, f"idle{workers}-{number}",
                                                    events, options.rate))
                    print(f"{workers} workers: {runs[str(workers)][-1]['redis_cpu_ms']} ms",
                          flush=True)
        for key, each in runs.items():
            events = sum(run["events"] for run in each)
            result["idle"][key] = {
                "redis_cpu_ms": round(sum(run["redis_cpu_ms"] * run["events"] for run in each)
                                      / events, 3),
                "rounds_redis_cpu_ms": [run["redis_cpu_ms"] for run in each],
                "consume_calls": round(sum(run["by_command"].get("lmpop", 0) * run["events"]
                                           for run in each) / events, 2),
                "runs": each,
            }
        one, many = (result["idle"][str(n)]["redis_cpu_ms"] for n in (1, options.idle_workers))
        result["idle"]["ratio"] = round(many / one, 2) if one else None
        return result


def report(result: dict[str, Any]) -> str:
    info = result["machine"]
    cost, idle = result["cost"], result["idle"]
    workers = next(key for key in idle if key not in ("1", "ratio"))
    lines = [
        f"{info['date']}, {info['cpus']} cores {info['cpu_model']}, Python {info['python']}, "
        f"Celery {info['celery']}, kombu {info['kombu']}, Redis {info['redis_server']}, "
        f"commit {info['commit']}",
        "",
        "| per delivery | naive, at once | Hookline, at once | naive, paced | Hookline, paced |",
        "|---|---|---|---|---|",
    ]
    for key, label in (("commands", "Redis commands (scripts' included)"),
                       ("scripts", "scripts run"), ("round_trips", "round trips"),
                       ("redis_cpu_ms", "Redis CPU, ms")):
        row = [cost[c][m][key] for m in ("batch", "paced") for c in ("naive", "hookline")]
        lines.append(f"| {label} | {row[0]} | {row[1]} | {row[2]} | {row[3]} |")
    lines += ["", f"Idle workers, {result['rate']} events/s, {result['rounds']} rounds in "
              f"turn: Redis CPU per event {idle['1']['redis_cpu_ms']} ms with 1 worker "
              f"(rounds {idle['1']['rounds_redis_cpu_ms']}), {idle[workers]['redis_cpu_ms']} ms "
              f"with {workers} ({idle[workers]['rounds_redis_cpu_ms']}): ratio {idle['ratio']} "
              f"(target <= 1.2); consume calls per event {idle['1']['consume_calls']} / "
              f"{idle[workers]['consume_calls']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="events at once per contender")
    parser.add_argument("--rate", type=float, default=20.0, help="paced events per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="idle-workers run length")
    parser.add_argument("--idle-workers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="idle-workers rounds, in turn")
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    if options.events < 4 or options.rate <= 0 or options.seconds <= 0 or \
            options.idle_workers < 2 or options.rounds < 1:
        parser.error("--events >= 4, --rate and --seconds > 0, --idle-workers >= 2, "
                     "--rounds >= 1")
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
