"""Where a delivery's CPU goes: a budget per stage, Hookline beside the naive task.

    python -m bench.budget [--events N] [--rounds R] [--rate HZ] [--keep-stacks DIR]

Each contender runs on its own private Redis with one worker ``-P threads -c 16`` and the
loopback receiver answering 204 at once (Hookline through ``hookline.deliver`` with every gate,
signing, the attempt history, metrics and Flower's task events on; naive: ``bench/naive.py``).
N events are published at once while ``py-spy`` (a sampling profiler, ``--nonblocking`` so it
never stops the worker) records the worker; then, for each stage:

- **worker CPU per delivery**: the worker process's CPU time over the run (``psutil``) divided
  by the deliveries, shared out over the stages in proportion to py-spy's samples (only
  samples of running threads count: py-spy leaves idle ones out);
- **Redis time per delivery**: the time Redis spent executing the stage's commands, from
  ``SLOWLOG`` with a threshold of 0 (every command; a script's commands count under its
  EVALSHA, which is named after the script), beside Redis's whole CPU per delivery.

A sample is given to a stage by walking its stack from the innermost frame outwards: the
first frame that belongs to a stage decides (``STAGES``): so a log line written inside admit
counts as logs, and a socket read inside a Redis call inside admit as admit. Frames of no
stage (the socket module, redis-py, json) pass the sample on to their callers.

Prints a markdown table and writes ``bench/results/budget.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.common import FastReceiver, bench_environment, machine, private_redis, run_bench
from bench.redis_cost import Contender

RESULTS = Path(__file__).resolve().parent / "results" / "budget.json"

#: The stages, in the README's order, each with the frames that mark it: (path fragment,
#: function name or "" for any). Checked innermost frame first; the first match wins.
STAGES: list[tuple[str, list[tuple[str, str]]]] = [
    ("logs", [("/logging/", ""), ("pythonjsonlogger", ""), ("hookline/core/logs.py", "")]),
    ("metrics", [("prometheus_client", ""), ("hookline/core/metrics.py", "")]),
    # A worker publishes nothing but its task events (retries are parked by a script).
    ("task events", [("celery/events/", ""), ("hookline/worker/task_events.py", ""),
                     ("hookline/transport/push.py", "_put"),
                     ("hookline/transport/push.py", "_put_message"),
                     ("kombu/transport/virtual/base.py", "basic_publish")]),
    ("signing", [("standardwebhooks", ""), ("hookline/delivery/sender.py", "sign"),
                 ("hookline/delivery/sender.py", "build_headers"), ("/hmac.py", "")]),
    ("HTTP", [("requests/", ""), ("urllib3/", ""), ("http/client.py", "")]),
    ("admit", [("hookline/store/gates.py", "admit")]),
    ("settle, with the history", [("hookline/store/gates.py", "settle"),
                                  ("hookline/store/history.py", "")]),
    ("acknowledgement", [("kombu/transport/redis.py", "ack"),
                         ("hookline/transport/redis.py", "ack"),
                         ("kombu/transport/redis.py", "_remove_from_indices"),
                         ("hookline/transport/unacked.py", "_remove_from_indices"),
                         ("kombu/transport/virtual/base.py", "basic_ack"),
                         ("kombu/message.py", "ack"), ("celery/worker/request.py", "acknowledge"),
                         ("hookline/worker/request.py", "acknowledge")]),
    ("taking the message", [("hookline/transport/redis.py", ""), ("kombu/transport/redis.py", ""),
                            ("kombu/transport/virtual/", ""), ("kombu/utils/eventio.py", ""),
                            ("kombu/asynchronous/", ""), ("hookline/worker/consumer.py", "")]),
    ("Celery task machinery", [("celery/", ""), ("kombu/", ""), ("billiard/", ""),
                               ("vine/", ""), ("hookline/worker/", "")]),
    ("Hookline's own logic", [("hookline/", ""), ("bench/naive.py", "")]),
]
OTHER = "other (threads, json, ...)"
#: Hookline's frames that serve several stages and decide none: their callers do (the
#: script call under both admit and settle).
PASS_THROUGH = (("hookline/store/connection.py", "call_script"),)
#: Innermost frames of a thread that waits for work: py-spy, which cannot stop the worker
#: (``--nonblocking``), sometimes reports such a thread as running. Left out of the shares.
IDLE_LEAVES = (("_worker", "concurrent/futures/thread.py:81"),)
STAGE_NAMES = [name for name, _ in STAGES] + [OTHER]

#: Redis commands (top-level, as SLOWLOG names them) by stage; EVALSHA by script name.
REDIS_STAGES = {
    "consume": "taking the message", "lmpop": "taking the message",
    "blmpop": "taking the message", "brpop": "taking the message",
    "admit": "admit", "settle": "settle, with the history",
    "zrem": "acknowledgement", "hdel": "acknowledgement",
    "publish": "task events",
    "lpush": "publishing (the caller's)", "rpush": "publishing (the caller's)",
}


def stage_of(stack: str) -> str | None:
    """The stage of one py-spy raw stack (``frame;frame;...``, outermost first); None for a
    thread waiting for work."""
    frames = stack.split(";")
    leaf_function, _, leaf_where = frames[-1].partition(" (")
    if any(leaf_function == function and where in leaf_where for function, where in IDLE_LEAVES):
        return None
    for frame in reversed(frames):
        function, _, where = frame.partition(" (")
        if any(path in where and function == func for path, func in PASS_THROUGH):
            continue
        for name, marks in STAGES:
            for path, func in marks:
                # py-spy names methods Class.method: the name must match whole.
                if path in where and (not func or function == func
                                      or function.endswith("." + func)):
                    return name
    return OTHER


def read_samples(path: Path) -> tuple[Counter[str], Counter[str]]:
    """Samples per stage from py-spy's raw output (one ``stack count`` per line), and the
    innermost frames of the samples no stage took (what to look at next)."""
    found: Counter[str] = Counter()
    unplaced: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stage = stage_of(stack)
            if stage is None:
                continue
            found[stage] += int(count)
            if stage == OTHER:
                unplaced[" < ".join(reversed(stack.split(";")[-3:]))] += int(count)
    return found, unplaced


def script_names() -> dict[str, str]:
    """SHA1 -> script name for Hookline's Lua scripts."""
    from hookline.store import connection

    names = {}
    for path in Path(connection.__file__).parent.joinpath("lua").glob("*.lua"):
        if not path.stem.startswith("piece_"):
            text = connection.load_script(path.stem)
            names[hashlib.sha1(text.encode()).hexdigest()] = path.stem
    return names


def redis_commands(client: redis.Redis, scripts: dict[str, str]) -> Counter[str]:
    """Microseconds of command execution per command (scripts by name), from the SLOWLOG
    (threshold 0)."""
    found: Counter[str] = Counter()
    for entry in client.slowlog_get(-1):
        command = [part.decode() if isinstance(part, bytes) else str(part)
                   for part in entry["command"].split()] if isinstance(
            entry["command"], (bytes, str)) else list(entry["command"])
        name = command[0].lower() if command else ""
        if name in ("evalsha", "eval") and len(command) > 1:
            name = scripts.get(command[1], "script")
        if name in ("slowlog", "info", "config", "llen", "hlen", "zcard", "client"):
            continue
        found[name] += int(entry["duration"])
    return found


def profile(contender: Contender, events: int, prefix: str, rate: float, workdir: Path,
            spy: str | None) -> dict[str, Any]:
    """One run of ``events`` deliveries under the profiler; per-delivery costs by stage."""
    contender.wait_consuming()
    contender.receiver.reset()
    client = contender.client
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 50 * events + 10_000)
    client.slowlog_reset()
    before = client.info("cpu")
    worker = psutil.Process(contender.workers[0].process.pid)
    cpu_before = worker.cpu_times()
    raw = workdir / f"{contender.name}-{prefix}.txt"
    recorder = None
    if spy:
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(worker.pid), "--rate", str(int(rate)), "--format",
             "raw", "--output", str(raw), "--nonblocking", "--duration", "600"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        time.sleep(1.0)  # py-spy attaches
    started = time.monotonic()
    for n in range(events):
        contender.publish(n, prefix)
    contender.receiver.wait_for(events, 60 + events / 10, contender.workers[0])
    seconds = time.monotonic() - started
    contender.wait_settled()
    time.sleep(0.3)  # the last task events and acks
    cpu_after = worker.cpu_times()
    after = client.info("cpu")
    samples: Counter[str] = Counter()
    unplaced: Counter[str] = Counter()
    if recorder is not None:
        recorder.send_signal(2)  # SIGINT: py-spy writes what it has
        _, err = recorder.communicate(timeout=30)
        if raw.exists():
            samples, unplaced = read_samples(raw)
            if KEEP_STACKS is not None:
                KEEP_STACKS.mkdir(parents=True, exist_ok=True)
                shutil.copy(raw, KEEP_STACKS / raw.name)
        else:
            print(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}",
                  file=sys.stderr)
    client.config_set("slowlog-log-slower-than", 10_000)
    worker_ms = ((cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
                 ) * 1000 / events
    redis_ms = (float(after["used_cpu_user"]) + float(after["used_cpu_sys"])
                - float(before["used_cpu_user"]) - float(before["used_cpu_sys"])) * 1000 / events
    by_command = redis_commands(client, SCRIPTS)
    redis_us: Counter[str] = Counter()
    for name, us in by_command.items():
        redis_us[REDIS_STAGES.get(name, "other")] += us
    total = sum(samples.values())
    return {
        "events": events, "seconds": round(seconds, 2),
        "deliveries_per_second": round(events / seconds, 1),
        "worker_cpu_ms": round(worker_ms, 3), "redis_cpu_ms": round(redis_ms, 3),
        "samples": total,
        "worker_ms_by_stage": {name: round(worker_ms * samples[name] / total, 3) if total else None
                               for name in STAGE_NAMES},
        "redis_us_by_stage": {name: round(us / events, 1) for name, us in redis_us.items()},
        "redis_us_by_command": {name: round(us / events, 1)
                                for name, us in by_command.most_common()},
        "unplaced_samples": dict(unplaced.most_common(15)),
    }


SCRIPTS: dict[str, str] = {}
#: Where to copy py-spy's raw stacks (``--keep-stacks``), for a flame graph or a grep.
KEEP_STACKS: Path | None = None


def run(options: argparse.Namespace) -> dict[str, Any]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.access(spy, os.X_OK):
        print("py-spy not found (pip install py-spy, or make install): totals only",
              file=sys.stderr)
        spy = None
    SCRIPTS.update(script_names())
    with tempfile.TemporaryDirectory(prefix="hookline-budget-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        hook_server, hook_client = private_redis(stack, "hookline", workdir)
        naive_server, naive_client = private_redis(stack, "naive", workdir)
        bench_environment(workdir, REDIS_URL=hook_server.url,
                          BENCH_NAIVE_BROKER_URL=naive_server.url, HOOKLINE_LOG_FORMAT="text")
        receiver = FastReceiver()
        stack.callback(receiver.stop)
        result: dict[str, Any] = {"machine": machine(hook_client), "events": options.events,
                                  "rounds": options.rounds, "profiler": bool(spy),
                                  "runs": {"naive": [], "hookline": []}}
        contenders = {
            "naive": Contender("naive", stack, workdir, receiver, 1, 16, naive_server,
                               naive_client),
            "hookline": Contender("hookline", stack, workdir, receiver, 1, 16, hook_server,
                                  hook_client),
        }
        for contender in contenders.values():
            profile(contender, min(300, options.events), "warm", options.rate, workdir, None)
        for number in range(options.rounds):  # in turn: the machine's speed drifts
            for name, contender in contenders.items():
                run_result = profile(contender, options.events, f"r{number}", options.rate,
                                     workdir, spy)
                result["runs"][name].append(run_result)
                print(f"{name} round {number + 1}: {run_result['deliveries_per_second']}/s, "
                      f"worker {run_result['worker_cpu_ms']} ms, Redis "
                      f"{run_result['redis_cpu_ms']} ms per delivery", flush=True)
        result["summary"] = {name: summarise(runs) for name, runs in result["runs"].items()}
        return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the rounds, weighted by events."""
    events = sum(r["events"] for r in runs)

    def mean(value: Any) -> float:
        return round(sum((value(r) or 0.0) * r["events"] for r in runs) / events, 3)

    redis_names = sorted({name for r in runs for name in r["redis_us_by_stage"]})
    return {
        "worker_cpu_ms": mean(lambda r: r["worker_cpu_ms"]),
        "redis_cpu_ms": mean(lambda r: r["redis_cpu_ms"]),
        "deliveries_per_second": mean(lambda r: r["deliveries_per_second"]),
        "worker_ms_by_stage": {name: mean(lambda r, n=name: r["worker_ms_by_stage"][n])
                               for name in STAGE_NAMES},
        "redis_us_by_stage": {name: mean(lambda r, n=name: r["redis_us_by_stage"].get(n, 0.0))
                              for name in redis_names},
    }


def report(result: dict[str, Any]) -> str:
    info = result["machine"]
    hook, naive = result["summary"]["hookline"], result["summary"]["naive"]
    lines = [
        f"{info['date']}, {info['cpus']} cores {info['cpu_model']}, load {info['load_average']}, "
        f"Celery {info['celery']}, Redis {info['redis_server']}, commit {info.get('commit', '')}; "
        f"{result['events']} events at once, {result['rounds']} rounds, one worker "
        "-P threads -c 16 each, receiver answering at once",
        "",
        "| stage | Hookline worker CPU, ms per delivery | naive | Hookline Redis time, µs | "
        "naive |",
        "|---|---|---|---|---|",
    ]
    redis_names = sorted(set(hook["redis_us_by_stage"]) | set(naive["redis_us_by_stage"]))
    for name in [*STAGE_NAMES, *(n for n in redis_names if n not in STAGE_NAMES)]:
        cells = [hook["worker_ms_by_stage"].get(name), naive["worker_ms_by_stage"].get(name),
                 hook["redis_us_by_stage"].get(name), naive["redis_us_by_stage"].get(name)]
        if not any(cells):
            continue
        lines.append(f"| {name} | " + " | ".join("" if c is None else f"{c:g}" for c in cells)
                     + " |")
    lines.append(f"| **all (measured CPU)** | **{hook['worker_cpu_ms']:g}** | "
                 f"**{naive['worker_cpu_ms']:g}** | **{hook['redis_cpu_ms'] * 1000:g}** "
                 f"(Redis CPU) | **{naive['redis_cpu_ms'] * 1000:g}** |")
    lines.append("")
    lines.append(f"Deliveries/s: Hookline {hook['deliveries_per_second']:g}, naive "
                 f"{naive['deliveries_per_second']:g} (under the profiler).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3000, help="events per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=250.0, help="py-spy samples per second")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--keep-stacks", type=Path, metavar="DIR",
                        help="copy py-spy's raw stacks (one 'frame;frame;... count' per line) "
                             "here, one file per contender and round")
    options = parser.parse_args(argv)
    global KEEP_STACKS
    KEEP_STACKS = options.keep_stacks
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
