"""Part 8 of ``bench.compare``: what a failed attempt costs next to a first delivery, on one
worker, side by side in one run.

    python -m bench.compare_retries [--events N] [--rounds R] [--quick] [--profile PATH]

One Hookline worker as in part 1 (``celery -A app worker -P threads -c 64``, its own Redis),
with ``HOOKLINE_INITIAL_BACKOFF=3600`` (a failed event's next attempt is due in about an hour:
each event is attempted once and parked, nothing is released during the run) and
``HOOKLINE_BREAKER_THRESHOLD=1000000000`` (the circuit breaker never opens: with the default
of 5, the events after the fifth failure would be deferred without an attempt, which is not a
retry). After a warm-up of both kinds, in turn, ``rounds`` times:

- first deliveries: N events to an endpoint answering 200 at once; events/s from the push to
  the receiver's last arrival (as part 1);
- retries parked: N events to an endpoint answering 500 at once; parks/s from the push to the
  first look at the schedule's due set (``ZCARD hookline:{schedule}:due``, every 20 ms) that
  holds all N. Also reported: the rate over the middle of the batch (10% -> 90% parked).

Ratio = parked/s / first deliveries/s, target >= 0.6 (the issue's "retries are cheap"). Checked
on the way: each failing event reached the receiver once, none was dead-lettered; and no module
of the code under test touches billiard's exception info (``einfo``), the private classes a
patch once made cheap. ``--profile PATH`` runs ``py-spy record --format raw --gil`` (the
thread holding the GIL: where the worker's Python CPU goes) on the worker through the last
round's parking batch (PATH) and first-delivery batch (PATH-first), which slows them (a
profiled run's rates are not the measure), and prints where the time goes.
Standalone, it writes ``bench/results/retries.json``; ``bench.compare`` runs :func:`retries`
as part 8 and keeps it in ``compare.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import ROOT, control_redis, machine, run_bench, stop_process
from bench.compare_meters import CpuMeter
from bench.compare_parts import start, target
from bench.compare_procs import Contender, ReceiverProcess
from bench.compare_report import RESULTS, retries_row

OUTPUT = RESULTS / "retries.json"
#: The worker's environment on top of part 1's: retries due in an hour, no breaker.
RETRY_ENV = {"HOOKLINE_INITIAL_BACKOFF": "3600", "HOOKLINE_BREAKER_THRESHOLD": "1000000000"}
TARGET = 0.6
POLL_SECONDS = 0.02
#: Where the code under test lives (bench/common.code_version's list, plus the package).
CODE = ("hookline", "app", "tasks", "celeryconfig.py")


def _cpu(meter: CpuMeter, count: int, polls: int = 0) -> dict[str, Any]:
    cpu, calls = meter.per_event(count)
    if polls and "zcard" in calls:  # this script's own looks at the due set
        calls["zcard"] = round(calls["zcard"] - polls / count, 3)
        if calls["zcard"] <= 0:
            del calls["zcard"]
    return {"cpu_ms": cpu, "redis_commands": round(sum(calls.values()), 2),
            "redis_commands_by_name": calls}


def first_batch(contender: Contender, receiver: ReceiverProcess, name: str,
                count: int, profile: Path | None = None) -> dict[str, Any]:
    """``count`` events to an endpoint answering 200 at once: push -> last arrival."""
    messages = contender.messages(target(contender, receiver, name, status=200), name, count)
    spy = _spy(contender, profile) if profile else None
    meter = CpuMeter(contender.workers, contender.client, receiver.process.pid)
    try:
        started = contender.push(messages)
        stats = receiver.wait(name, count, 60 + count / 10, contender.workers)
    finally:
        _unspy(spy)
    seconds = stats["last"] - started
    return {"events": count, "seconds": round(seconds, 3),
            "per_second": round(count / seconds, 1),
            "duplicates": stats["hits"] - stats["distinct"], **_cpu(meter, count)}


def park_batch(contender: Contender, receiver: ReceiverProcess, name: str, count: int,
               profile: Path | None = None) -> dict[str, Any]:
    """``count`` events to an endpoint answering 500 at once: push -> all ``count`` parked in
    the schedule's due set."""
    from hookline.store.keys import DLQ_INDEX_KEY, DUE_KEY

    client = contender.client
    messages = contender.messages(target(contender, receiver, name, status=500), name, count)
    parked_before, dead_before = client.zcard(DUE_KEY), client.zcard(DLQ_INDEX_KEY)
    spy = _spy(contender, profile) if profile else None
    meter = CpuMeter(contender.workers, contender.client, receiver.process.pid)
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 60 + count / 5
    try:
        started = contender.push(messages)
        while True:
            parked = int(client.zcard(DUE_KEY)) - parked_before
            samples.append((time.time() - started, parked))
            if parked >= count:
                break
            for worker in contender.workers:
                worker.check_alive()
            if time.monotonic() > deadline:
                dead = client.zcard(DLQ_INDEX_KEY) - dead_before
                raise TimeoutError(f"{name}: {parked} of {count} parked ({dead} dead-lettered)")
            time.sleep(POLL_SECONDS)
    finally:
        _unspy(spy)
    cost = _cpu(meter, count, polls=len(samples))
    seconds = samples[-1][0]
    stats = receiver.stats(name)

    def when(share: float) -> tuple[float, int]:
        return next(s for s in samples if s[1] >= share * count)

    (t10, p10), (t90, p90) = when(0.1), when(0.9)
    middle = (p90 - p10) / (t90 - t10) if t90 > t10 else None
    return {"events": count, "seconds": round(seconds, 3),
            "per_second": round(count / seconds, 1),
            "per_second_10_90": round(middle, 1) if middle else None,
            "attempts": stats["hits"],
            "attempted_once": stats["distinct"] == stats["hits"] == count,
            "dead_lettered": client.zcard(DLQ_INDEX_KEY) - dead_before, **cost}


def combine(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds as one: events/s over all of them, mean CPU and Redis commands per event."""
    events = sum(b["events"] for b in batches)
    seconds = sum(b["seconds"] for b in batches)
    out = {**batches[-1], "events": events, "seconds": round(seconds, 3),
           "per_second": round(events / seconds, 1),
           "cpu_ms": {key: round(sum(b["cpu_ms"][key] for b in batches) / len(batches), 3)
                      for key in batches[0]["cpu_ms"]},
           "redis_commands": round(sum(b["redis_commands"] for b in batches) / len(batches), 2),
           "rounds": [b["per_second"] for b in batches]}
    for key in ("dead_lettered", "attempts"):
        if key in out:
            out[key] = sum(b[key] for b in batches)
    if "attempted_once" in out:
        out["attempted_once"] = all(b["attempted_once"] for b in batches)
    return out


def billiard_patched() -> list[str]:
    """Files of the code under test that name billiard's exception info (``einfo``): the
    private classes (``billiard.einfo.Traceback``, ``_Frame``, ``_Code``) a retry once had to
    patch. Empty is what the target asks."""
    found = []
    for top in CODE:
        path = ROOT / top
        files = [path] if path.is_file() else sorted(path.rglob("*.py")) if path.exists() else []
        for file in files:
            if re.search(r"\beinfo\b|ExceptionInfo", file.read_text(errors="replace")):
                found.append(str(file.relative_to(ROOT)))
    return found


def retries(workdir: Path, receiver: ReceiverProcess, events: int, rounds: int = 1,
            profile: Path | None = None) -> dict[str, Any]:
    """Part 8: first deliveries/s and retries parked/s on one worker, in turn."""
    contender = start("hookline", workdir, name="retries", env=RETRY_ENV)
    try:
        contender.wait_consuming()
        warm = min(200, events)
        first_batch(contender, receiver, "retries-warm-ok", warm)
        park_batch(contender, receiver, "retries-warm-failing", warm)
        firsts: list[dict[str, Any]] = []
        parks: list[dict[str, Any]] = []
        for number in range(rounds):
            last = number == rounds - 1
            firsts.append(first_batch(contender, receiver, f"retries-ok{number}", events,
                                      profile=first_profile(profile) if last else None))
            print(f"  first deliveries: {firsts[-1]['per_second']:.0f}/s", flush=True)
            parks.append(park_batch(contender, receiver, f"retries-failing{number}", events,
                                    profile=profile if last else None))
            print(f"  retries parked:   {parks[-1]['per_second']:.0f}/s", flush=True)
    finally:
        contender.stop()
    first, parked = combine(firsts), combine(parks)
    ratio = round(parked["per_second"] / first["per_second"], 3)
    patched = billiard_patched()
    return {"events": events, "rounds": rounds, "worker_env": RETRY_ENV,
            "first": first, "parked": parked, "ratio": ratio, "target": TARGET,
            "met": ratio >= TARGET and not patched, "billiard_einfo_in": patched,
            "worker_cpu_ratio": round(parked["cpu_ms"]["worker"] / first["cpu_ms"]["worker"], 2),
            "profiled": profile is not None}


def _spy(contender: Contender, path: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    process = subprocess.Popen([spy, "record", "--pid", str(contender.workers[0].process.pid),
                                "--format", "raw", "--rate", "250", "--nonblocking", "--gil",
                                "-o", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    time.sleep(1.0)  # attached before the push
    return process


def _unspy(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            stop_process(spy)


def first_profile(path: Path | None) -> Path | None:
    """Where the first-delivery batch's profile goes: beside the parking batch's."""
    return None if path is None else path.with_name(f"{path.stem}-first{path.suffix}")


def _frame(text: str) -> tuple[str, str]:
    """``('Class.func (pkg/module.py)', 'Class.func (pkg/module.py:line)')`` of a py-spy frame."""
    name, _, where = text.partition(" (")
    where = re.sub(r"^.*/site-packages/", "", where.rstrip(")"))
    file = where.rpartition(":")[0]
    return f"{name} ({file or where})", f"{name} ({where})"


def summarize(path: Path, top: int = 30) -> str:
    """Where the sampled time went, from py-spy's raw (collapsed) stacks: how the samples
    split between the task (``deliver``), the consumer's event loop and other threads; then,
    within the task, each function's inclusive share (on the stack, line numbers merged;
    the frames above ``deliver`` left out) and the lines where time was spent (self)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    where: Counter[str] = Counter()
    total = in_task = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame(f) for f in stack.split(";")]
        names = [name for name, _ in frames]
        task = next((i for i, name in enumerate(names)
                     if name.startswith("deliver (hookline/worker/tasks.py")), None)
        if task is None:
            if any(x.startswith("asynloop (") for x in names):
                kind = "consumer loop (asynloop: kombu, the broker transport, Celery, acks)"
            elif names[-1].startswith("_worker ("):
                kind = "pool threads taking work off the executor's queue"
            elif any(x.startswith(("_WorkItem.run (", "fast_trace_task (")) for x in names):
                kind = "pool threads outside deliver(): Celery's tracer (context, result, events)"
            elif len(names) < 3:
                kind = "unattributed (stacks py-spy could not walk)"
            else:
                kind = "other threads (releaser, timers, ...)"
            where[kind] += n
            own[f"[outside the task] {frames[-1][1]}"] += n
            continue
        in_task += n
        where["the task: deliver() and below"] += n
        for name in set(names[task + 1:]):
            inclusive[name] += n
        own[frames[-1][1]] += n
    if not total:
        return "no samples"
    lines = [f"{total:,} samples of the thread holding the GIL:"]
    lines += [f"  {n / total:6.1%}  {kind}" for kind, n in where.most_common()]
    lines.append(f"Within the task ({in_task:,} samples = 100%), inclusive:")
    lines += [f"  {n / max(in_task, 1):6.1%}  {name}" for name, n in inclusive.most_common(top)]
    lines.append("Self, share of all samples (file:line at the top of the stack):")
    lines += [f"  {n / total:6.1%}  {name}" for name, n in own.most_common(top)]
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    info, part = result["machine"], result["retries"]
    lines = [f"Retries vs first deliveries, {info['date']}: {info['cpus']} CPUs, load "
             f"{info['load_average']}; code {info['commit']}"
             + (f" plus uncommitted {', '.join(info['uncommitted'])}" if info["uncommitted"]
                else "") + f"; {part['events']:,} events per batch, {part['rounds']} round(s).",
             "", "| measure | value | target | met |", "|---|---|---|---|", retries_row(part)]
    if part["profiled"]:
        lines += ["", "PROFILED: py-spy slowed the last parking batch; its rates are not the "
                  "measure."]
    if summary := result.get("profile_summary"):
        lines += ["", summary]
    return "\n".join(lines)


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-retries-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        _, client = control_redis(stack, workdir)
        from hookline.worker.celery import worker_app as celery_app

        stack.callback(celery_app.close)
        info = machine(client)
        receiver = ReceiverProcess([], workdir / "receiver.log")
        stack.callback(receiver.stop)
        print(f"part 8: retries, {options.events:,} events, {options.rounds} round(s)",
              flush=True)
        part = retries(workdir, receiver, options.events, options.rounds, options.profile)
        info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        result: dict[str, Any] = {"machine": info, "options": vars(options) | {
            "output": str(options.output), "profile": str(options.profile or "")},
            "retries": part}
        if options.profile and options.profile.exists():
            first = first_profile(options.profile)
            result["profile_summary"] = (
                f"Parking batch ({options.profile}):\n{summarize(options.profile)}"
                + (f"\n\nFirst-delivery batch ({first}):\n{summarize(first)}"
                   if first and first.exists() else ""))
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, help="events per batch (3000; --quick 1000)")
    parser.add_argument("--rounds", type=int, help="rounds of both batches (2; --quick 1)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the last parking batch "
                        "(and PATH-first: of the last first-delivery batch)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.events = options.events or (1000 if options.quick else 3000)
    options.rounds = options.rounds or (1 if options.quick else 2)
    if options.events < 50:
        parser.error("--events must be at least 50")
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
