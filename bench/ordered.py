"""Ordered endpoints measured: order under faults, a blocked key beside the others, and what
ordering costs, each on private Redis servers and real ``celery -A app worker`` processes.

    python -m bench.ordered [--fault-events N] [--events N] [--rounds R] [--quick]
                                                                   (or: make bench-ordered)

Workers as in part 1 of ``bench.compare`` (``-P threads -c 64``); the receiver is
bench/ordered_receiver.py in its own process. Events are ready-made broker messages pushed at
once, event ``n`` on key ``n % 200`` (so each key's events are spread over the whole queue).

1. Order under faults: N events (20,000) on 200 keys to one ordered endpoint (first retry
   after 0.5 s), two workers, the receiver answering 503 to the first attempt of 20% of the
   events (chosen by a hash of the event id) and 204 after 5 ms to the rest; when a third and
   when two thirds of the events are delivered, a worker is killed (SIGKILL) and a replacement
   started. The workers run with HOOKLINE_HEARTBEAT_INTERVAL=0.5 and
   HOOKLINE_LIVENESS_WINDOW=2, so a killed worker's messages come back within seconds. Per key,
   from the receiver's 204s in arrival order: inversions (an event delivered after a later one
   of its key; a repeat of the event just before, a head sent again after a crash, is a
   duplicate instead), sequence headers that are not the event's place in its key, events
   delivered, the most requests of one key in flight at once, and the lines left once done.
2. A blocked key holds back only itself: M events (10,000) on 200 keys to an ordered endpoint
   (policy ``block``) answering 204 at once, beside the same with key 0's first event answered
   400 (dead-lettered at once: key 0 then waits); the other 199 keys' events/s, from the push
   to the last of them. In turn, R rounds (2), each endpoint fresh. Target: >= 0.9.
3. Speed: M events to an ordered endpoint on 200 keys beside M to an unordered endpoint, the
   receiver answering 204 at once; events/s (push to last arrival), worker CPU and Redis
   commands per delivery (INFO commandstats). In turn, R rounds. Target: ordered >= 0.5.

``--quick``: 4,000 events in part 1, 2,000 in parts 2 and 3 (about two minutes). Writes
``bench/results/ordered.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.common import control_redis, machine, run_bench
from bench.compare_parts import CONTENDERS, batch, combine, start, worker_env
from bench.compare_plots import RESULTS
from bench.compare_procs import EVENT_TYPE, Contender, PoolWorker, ReceiverProcess, payload

OUTPUT = RESULTS / "ordered.json"
KEYS = 200
FAIL_PERCENT = 20
FAULT_DELAY_MS = 5
#: Part 1's endpoint: its 503s retried soon, so the run is about ordering, not waiting.
FAULT_RETRY = {"initial_backoff": 0.5}
#: Workers declared dead this soon after a kill (their messages restored to the others).
LIVENESS = {"HOOKLINE_HEARTBEAT_INTERVAL": "0.5", "HOOKLINE_LIVENESS_WINDOW": "2"}
#: When a worker is killed in part 1: at these shares of the events delivered.
KILLS_AT = (1 / 3, 2 / 3)
BLOCKED_TARGET, SPEED_TARGET = 0.9, 0.5


class OrderReceiver(ReceiverProcess):
    """bench/ordered_receiver.py's process: an endpoint's lines, and waits on events delivered
    (distinct ids answered 204) rather than on requests."""

    def __init__(self, log_path: Path) -> None:
        super().__init__([], log_path, module="bench.ordered_receiver")

    def endpoint_url(self, name: str, **behaviour: Any) -> str:
        """Where endpoint ``name`` delivers: ``fail``, ``delay``, ``refuse`` as the receiver
        reads them."""
        query = urlencode({k: v for k, v in behaviour.items() if v})
        return f"http://127.0.0.1:{self.port}/o/{name}" + (f"?{query}" if query else "")

    def lines(self, name: str) -> dict[str, list[list[Any]]]:
        """Per ordering key, its 204s in arrival order: [event id, sequence, Unix time]."""
        return dict(self._get(f"/_lines/{name}", timeout=60))

    def wait_delivered(self, name: str, count: int, deadline: float,
                       workers: list[PoolWorker]) -> dict[str, Any]:
        """Until ``count`` events of ``name`` were answered 204 (``deadline``: monotonic)."""
        while True:
            stats = self.wait(name, count, deadline - time.monotonic(), workers)
            if stats["distinct"] >= count:
                return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"receiver {name}: {stats['distinct']} of {count} events")


def key_name(key: int) -> str:
    return f"k{key:03d}"


def event_name(prefix: str, key: int, place: int) -> str:
    """Event ``place`` (from 0) of key ``key``: its place in its key is its last part."""
    return f"{prefix}-{key_name(key)}-{place:05d}"


def place_of(event_id: str) -> int:
    return int(event_id.rsplit("-", 1)[1])


def ordered_messages(endpoint_id: str, count: int, keys: int = KEYS) -> list[str]:
    """Broker messages of ``count`` events to ``endpoint_id``, event ``n`` on key
    ``n % keys`` (the ``ordering_key`` argument, which becomes the ``hookline_okey`` header)."""
    from hookline.core.messages import DELIVERY_QUEUE, TASK_NAME
    from hookline.transport.envelope import build_message
    from hookline.worker.celery import worker_app as celery_app

    built = []
    for n in range(count):
        event_id = event_name(endpoint_id, n % keys, n // keys)
        kwargs = {"event_id": event_id, "ordering_key": key_name(n % keys)}
        built.append(build_message(celery_app, task_name=TASK_NAME, task_id=event_id,
                                   args=[endpoint_id, EVENT_TYPE, payload(n)], kwargs=kwargs,
                                   retries=0, queue=DELIVERY_QUEUE))
    return built


def add_endpoint(contender: Contender, receiver: OrderReceiver, name: str, *,
                 ordered: bool = True, retry_policy: dict[str, Any] | None = None,
                 **behaviour: Any) -> str:
    from hookline.store.endpoints import EndpointRegistry

    EndpointRegistry(contender.client).add(name, receiver.endpoint_url(name, **behaviour),
                                           ordered=ordered, retry_policy=retry_policy)
    return name


def judge(lines: dict[str, list[list[Any]]]) -> dict[str, int]:
    """Per key, the 204s in arrival order against each event's place in its key: inversions
    (delivered after a later one of its key), duplicates (the event just before, again) and
    sequence headers other than the place + 1."""
    inversions = duplicates = keys_inverted = wrong_sequences = 0
    for arrivals in lines.values():
        highest, previous, inverted = -1, None, 0
        for event_id, sequence, _ in arrivals:
            if event_id == previous:
                duplicates += 1
                continue
            place = place_of(event_id)
            inverted += place < highest
            wrong_sequences += sequence != place + 1
            highest, previous = max(highest, place), event_id
        inversions += inverted
        keys_inverted += inverted > 0
    return {"inversions": inversions, "keys_with_inversions": keys_inverted,
            "duplicates": duplicates, "wrong_sequences": wrong_sequences}


def lines_left(contender: Contender, endpoint_id: str, timeout: float = 15.0) -> dict[str, Any]:
    """Once every event is in: the keys still with a head and the deliveries still waiting
    (both 0 when every line ran empty), and the first few such lines."""
    from hookline.store.ordering import OrderLines

    lines = OrderLines(contender.client)
    deadline = time.monotonic() + timeout
    while (counts := lines.counts(endpoint_id)) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)  # the last settle lands just after its 204
    stuck = [vars(line) for line in lines.lines(endpoint_id, limit=5)] if any(counts) else []
    return {"keys_with_head": counts[0], "waiting": counts[1], "stuck": stuck}


def longest_pause(lines: dict[str, list[list[Any]]]) -> float:
    """The longest time between two 204s of the endpoint, any keys (a breaker's hold shows)."""
    times = sorted(arrival[2] for arrivals in lines.values() for arrival in arrivals)
    return round(max((b - a for a, b in itertools.pairwise(times)), default=0.0), 2)


def breaker_openings(workdir: Path, contender: Contender) -> int:
    """How often the contender's workers logged their endpoint's breaker opening (5 failures
    in a row, HOOKLINE_BREAKER_THRESHOLD: at 20% 503s a run of five comes every few thousand
    attempts, and holds the endpoint for HOOKLINE_BREAKER_COOLDOWN, 30 s)."""
    return sum(log.read_text(errors="replace").count("breaker.opened")
               for log in workdir.glob(f"worker-{contender.name}-*.log"))


def replace_worker(contender: Contender, workdir: Path, number: int) -> None:
    """SIGKILL the oldest worker, start another like it (``number``: its name and log)."""
    contender.workers.pop(0).kill()
    app, _, _, pool, concurrency = CONTENDERS["hookline"]
    contender.workers.append(PoolWorker(
        worker_env(app, contender.server.url, workdir) | LIVENESS,
        workdir / f"worker-{contender.name}-{number}.log", app=app, pool=pool,
        concurrency=concurrency, name=f"{contender.name}{number}"))


def under_faults(workdir: Path, receiver: OrderReceiver, events: int) -> dict[str, Any]:
    """Part 1."""
    from hookline.store.dead_letter_queue import DeadLetterQueue

    contender = start("hookline", workdir, workers=2, name="faults", env=LIVENESS)
    try:
        contender.wait_consuming()
        name = add_endpoint(contender, receiver, "faults", retry_policy=FAULT_RETRY,
                            fail=FAIL_PERCENT, delay=FAULT_DELAY_MS)
        messages = ordered_messages(name, events)
        deadline = time.monotonic() + 120 + events / 20
        started = contender.push(messages)
        kills = []
        for number, share in enumerate(KILLS_AT, start=len(contender.workers)):
            receiver.wait_delivered(name, int(events * share), deadline, contender.workers)
            replace_worker(contender, workdir, number)
            kills.append(round(time.time() - started, 2))
            print(f"  killed a worker at {kills[-1]:.1f}s", flush=True)
        try:
            stats = receiver.wait_delivered(name, events, deadline, contender.workers)
        except TimeoutError as exc:
            print(f"  {exc}", flush=True)
            stats = receiver.stats(name)
        left = lines_left(contender, name)
        dead = DeadLetterQueue(contender.client).count()
    finally:
        contender.stop()
    seconds = (stats["last"] or started) - started
    lines = receiver.lines(name)
    return {"events": events, "keys": KEYS, "workers": 2, "fail_percent": FAIL_PERCENT,
            "delay_ms": FAULT_DELAY_MS, "retry_policy": FAULT_RETRY, "kills_at_seconds": kills,
            "delivered": stats["distinct"], "all_delivered": stats["distinct"] == events,
            **judge(lines), "most_in_flight_per_key": stats["most_in_flight"],
            "keys_overlapping": stats["keys_overlapping"], "requests": stats["requests"],
            "statuses": stats["statuses"], "dead_letters": dead, "lines_left": left,
            "breaker_openings": breaker_openings(workdir, contender),
            "longest_pause_seconds": longest_pause(lines),
            "seconds": round(seconds, 2), "per_second": round(stats["distinct"] / seconds, 1)}


def blocked_batch(contender: Contender, receiver: OrderReceiver, name: str, events: int,
                  blocked: bool) -> dict[str, Any]:
    """Part 2's batch: the 199 keys other than key 0, from the push to the last of them."""
    refused = event_name(name, 0, 0) if blocked else ""
    add_endpoint(contender, receiver, name, refuse=refused)
    messages = ordered_messages(name, events)
    others = sum(1 for n in range(events) if n % KEYS)
    started = contender.push(messages)
    receiver.wait_delivered(name, others if blocked else events,
                            time.monotonic() + 60 + events / 10, contender.workers)
    lines = receiver.lines(name)
    ended = max(arrivals[-1][2] for key, arrivals in lines.items() if key != key_name(0))
    result = {"events": others, "seconds": round(ended - started, 3),
              "per_second": round(others / (ended - started), 1)}
    if blocked:
        from hookline.store.ordering import OrderLines

        head = OrderLines(contender.client).head(name, key_name(0))
        result |= {"blocked_key_delivered": len(lines.get(key_name(0), [])),
                   "blocked_head": list(head) if head else None}
    return result


def blocked_key(contender: Contender, receiver: OrderReceiver, events: int,
                rounds: int) -> dict[str, Any]:
    """Part 2: in turn, ``rounds`` times, without and with a blocked key."""
    runs: dict[str, list[dict[str, Any]]] = {"clear": [], "blocked": []}
    for number in range(rounds):
        for kind in runs:
            runs[kind].append(blocked_batch(contender, receiver, f"{kind}{number}", events,
                                            kind == "blocked"))
            print(f"  {kind} round {number}: {runs[kind][-1]['per_second']:.0f}/s", flush=True)
    rate = {kind: round(sum(b["events"] for b in batches) / sum(b["seconds"] for b in batches),
                        1) for kind, batches in runs.items()}
    ratio = round(rate["blocked"] / rate["clear"], 3)
    return {"events": events, "keys": KEYS, "rounds": runs, "per_second": rate,
            "ratio": ratio, "target": BLOCKED_TARGET, "met": ratio >= BLOCKED_TARGET}


def speed(contender: Contender, receiver: OrderReceiver, events: int,
          rounds: int) -> dict[str, Any]:
    """Part 3: in turn, ``rounds`` times, ordered on 200 keys and unordered."""
    runs: dict[str, list[dict[str, Any]]] = {"unordered": [], "ordered": []}
    for number in range(rounds):
        for kind in runs:
            name = add_endpoint(contender, receiver, f"{kind}{number}",
                                ordered=kind == "ordered")
            messages = (ordered_messages(name, events) if kind == "ordered"
                        else contender.messages(name, name, events))
            runs[kind].append(batch(contender, receiver, name, events, registered=True,
                                    messages=messages))
            print(f"  {kind} round {number}: {runs[kind][-1]['per_second']:.0f}/s, "
                  f"{runs[kind][-1]['redis_commands']:.1f} Redis commands/delivery", flush=True)
    result = {kind: combine(batches) for kind, batches in runs.items()}
    ratio = round(result["ordered"]["per_second"] / result["unordered"]["per_second"], 3)
    return {"events": events, "keys": KEYS, **result, "ratio": ratio, "target": SPEED_TARGET,
            "met": ratio >= SPEED_TARGET}


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-ordered-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        _, client = control_redis(stack, workdir)
        info = machine(client)
        receiver = OrderReceiver(workdir / "receiver.log")
        stack.callback(receiver.stop)
        print("1. order under faults", flush=True)
        faults = under_faults(workdir, receiver, options.fault_events)
        contender = start("hookline", workdir, name="speed")
        stack.callback(contender.stop)
        contender.wait_consuming()
        for kind in ("ordered", "unordered"):  # warm-up: connections opened, scripts loaded
            name = add_endpoint(contender, receiver, f"warm-{kind}", ordered=kind == "ordered")
            batch(contender, receiver, name, 500, registered=True,
                  messages=ordered_messages(name, 500) if kind == "ordered" else None)
        print("2. a blocked key", flush=True)
        blocked = blocked_key(contender, receiver, options.events, options.rounds)
        print("3. speed", flush=True)
        fast = speed(contender, receiver, options.events, options.rounds)
        return {"machine": info, "options": vars(options) | {"output": str(options.output)},
                "faults": faults, "blocked": blocked, "speed": fast}


def report(result: dict[str, Any]) -> str:
    faults, blocked, fast = result["faults"], result["blocked"], result["speed"]
    left = faults["lines_left"]
    rows = [f"| {kind} | {fast[kind]['per_second']:.0f} | {fast[kind]['cpu_ms']['worker']:.3f} "
            f"| {fast[kind]['redis_commands']:.1f} |" for kind in ("unordered", "ordered")]
    return "\n".join([
        f"Order under faults: {faults['events']:,} events on {faults['keys']} keys, "
        f"{faults['fail_percent']}% first attempts 503, two kill -9",
        "", "| measure | value |", "|---|---:|",
        f"| events delivered | {faults['delivered']:,} of {faults['events']:,} |",
        f"| inversions (keys with one) | {faults['inversions']} "
        f"({faults['keys_with_inversions']}) |",
        f"| duplicates (a head sent again after a kill) | {faults['duplicates']} |",
        f"| sequence headers off | {faults['wrong_sequences']} |",
        f"| most in flight per key | {faults['most_in_flight_per_key']} |",
        f"| lines left (keys with a head, waiting) | {left['keys_with_head']}, "
        f"{left['waiting']} |",
        f"| 503s / requests / dead letters | {faults['statuses'].get('503', 0)} / "
        f"{faults['requests']} / {faults['dead_letters']} |",
        f"| breaker openings (longest pause) | {faults['breaker_openings']} "
        f"({faults['longest_pause_seconds']:.1f} s) |",
        f"| duration | {faults['seconds']:.1f} s ({faults['per_second']:.0f}/s) |", "",
        f"A blocked key: the other 199 keys' events/s, {blocked['per_second']['clear']:.0f} "
        f"without, {blocked['per_second']['blocked']:.0f} with key 0 blocked: ratio "
        f"{blocked['ratio']:.3f} (target >= {blocked['target']}: "
        f"{'met' if blocked['met'] else 'MISSED'})", "",
        "| endpoint | events/s | worker CPU ms/delivery | Redis commands/delivery |",
        "|---|---:|---:|---:|", *rows, "",
        f"ordered / unordered: {fast['ratio']:.3f} (target >= {fast['target']}: "
        f"{'met' if fast['met'] else 'MISSED'})"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault-events", type=int, help="part 1's events (20000; --quick 4000)")
    parser.add_argument("--events", type=int, help="events per batch, parts 2 and 3 (10000; "
                                                   "--quick 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="batches per side, in turn (2)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.fault_events = options.fault_events or (4000 if options.quick else 20_000)
    options.events = options.events or (2000 if options.quick else 10_000)
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
