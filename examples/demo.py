"""The whole pipeline on your machine in under a minute: ``make demo``.

``python -m examples.demo`` runs it too, once a Redis answers (``make redis``).

Starts the demo receiver in this process and Celery workers beside it (``hookline worker``: one
per core), registers one endpoint per
receiver behaviour, sends a few hundred events and follows each to its final state: delivered,
or in the dead-letter queue with a reason. Uses the Redis at ``REDIS_URL`` (default
``redis://127.0.0.1:6379/0``) and touches only the ``demo-*`` endpoints and their state, which
it clears first, so it can be run again and again.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Short backoffs and timeouts so that every retry happens within the demo. Set before `app` is
# imported (settings are read once) and inherited by the worker.
DEMO_SETTINGS = {
    "HOOKLINE_INITIAL_BACKOFF": "0.5",
    "HOOKLINE_MAX_BACKOFF": "4",
    "HOOKLINE_MAX_ATTEMPTS": "4",
    "HOOKLINE_RETRY_AFTER_CAP": "5",
    "HOOKLINE_CONNECT_TIMEOUT": "2",
    "HOOKLINE_READ_TIMEOUT": "1.5",
    "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",  # the receiver is on loopback
    # The demo's flaky and slow routes fail every event's first attempts on purpose, which a
    # real circuit breaker would read as an outage and hold for its cool-down (30 s). Here it
    # opens only on a long run of failures, and a cool-down is short.
    "HOOKLINE_BREAKER_THRESHOLD": "100",
    "HOOKLINE_BREAKER_COOLDOWN": "2",
}
os.environ.update(DEMO_SETTINGS)
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")

import redis  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from examples.receiver import DEMO_ROUTES, Receiver  # noqa: E402
from hookline import send_webhook  # noqa: E402
from hookline.cli.worker import processes_to_run  # noqa: E402
from hookline.store import connection as store  # noqa: E402
from hookline.store.dead_letter_queue import DLQ_KEY, DeadLetter, DeadLetterFilter, DeadLetterQueue  # noqa: E402
from hookline.store.delivery import delivered  # noqa: E402
from hookline.store.endpoints import EndpointRegistry  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKER_LOG = ROOT / ".demo-worker.log"
#: Seconds the events get to reach a final state once sent.
TIMEOUT = 60.0


@dataclass(frozen=True)
class Demo:
    """One endpoint of the demo: its receiver route, what the route answers, how many events
    are sent to it and what should become of them."""

    route: str
    answers: str
    events: int
    expect: str


ENDPOINTS: dict[str, Demo] = {
    "demo-ok": Demo("/ok", "204", 200, "delivered"),
    "demo-flaky": Demo("/flaky", "503, 503, then 204", 30, "delivered"),
    "demo-throttled": Demo("/throttled", "first request 429 Retry-After: 1 (blocks all), then 204",
                           25, "delivered"),
    "demo-slow": Demo("/slow", "200 after 3 s (> 1.5 s read timeout), then fast", 15,
                      "delivered"),
    "demo-gone": Demo("/gone", "410 Gone", 15, "endpoint_gone"),
    "demo-rejects": Demo("/rejects", "400", 15, "rejected"),
}

console = Console()


def clean_up(client: redis.Redis, registry: EndpointRegistry, dlq: DeadLetterQueue) -> None:
    """Remove what earlier demo runs left: demo-* endpoints, their dead letters and their keys
    (delivered markers, leases), so that this run starts from nothing."""
    names = set(ENDPOINTS) | {e.id for e in registry.list() if e.id.startswith("demo-")}
    for name in sorted(names):
        if registry.get(name) is not None:
            registry.remove(name)
        dlq.purge(DeadLetterFilter(endpoint_id=name))
    stale = list(client.scan_iter("hookline:{demo-*}:*", count=1000))
    for start in range(0, len(stale), 500):
        client.delete(*stale[start : start + 500])


@contextmanager
def celery_worker(log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``hookline worker --app app`` (one Celery worker per core, hookline/cli/worker.py) in a
    subprocess, ready when yielded (its first worker is), always stopped after."""
    command = [str(Path(sys.executable).with_name("hookline")), "worker", "--app", "app",
               "-l", "info", "-c", "16", "--without-gossip", "--without-mingle",
               "--without-heartbeat"]
    with open(log_path, "w") as log:
        # Its own session: Ctrl-C reaches only this process, which then stops the worker itself.
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while " ready." not in log_path.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = "\n".join(log_path.read_text().splitlines()[-20:])
                    raise RuntimeError(f"the worker did not start; end of {log_path}:\n{tail}")
                time.sleep(0.1)
            yield process
        finally:
            stop(process)


def stop(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM (warm shutdown: running attempts finish), then SIGKILL after ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        process.kill()
        process.wait()


def send_events(receiver: Receiver, registry: EndpointRegistry) -> dict[str, str]:
    """Register the endpoints, then send their events in a shuffled order like real traffic;
    returns event id -> endpoint id."""
    for name, demo in ENDPOINTS.items():
        registry.add(name, receiver.url(demo.route))
    targets = [name for name, demo in ENDPOINTS.items() for _ in range(demo.events)]
    random.shuffle(targets)
    return {
        send_webhook(name, "order.paid", {"order": n, "amount_cents": 1000 + n}): name
        for n, name in enumerate(targets, 1)
    }


def final_states(client: redis.Redis, events: dict[str, str]) -> dict[str, str]:
    """Event id -> "delivered" or the dead-letter reason, for the events that reached either."""
    ids = list(events)
    marked = delivered(client, [(events[event_id], event_id) for event_id in ids])
    pipe = client.pipeline(transaction=False)
    for event_id in ids:
        pipe.hget(DLQ_KEY, f"{events[event_id]}/{event_id}")
    states: dict[str, str] = {}
    for event_id, done, letter in zip(ids, marked, pipe.execute(), strict=True):
        if done:
            states[event_id] = "delivered"
        elif letter:
            states[event_id] = DeadLetter.from_json(letter).reason
    return states


def follow(client: redis.Redis, events: dict[str, str]) -> dict[str, str]:
    """Show a progress bar until every event is final or :data:`TIMEOUT` passes."""
    states: dict[str, str] = {}
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("settling", total=len(events))
        deadline = time.monotonic() + TIMEOUT
        while len(states) < len(events) and time.monotonic() < deadline:
            pending = {e: name for e, name in events.items() if e not in states}
            states.update(final_states(client, pending))
            delivered = sum(state == "delivered" for state in states.values())
            progress.update(bar, completed=len(states), description=(
                f"[green]{delivered} delivered[/] [red]{len(states) - delivered} dead-lettered[/]"
            ))
            time.sleep(0.2)
    return states


def summary(receiver: Receiver, events: dict[str, str], states: dict[str, str]) -> Table:
    requests = [r for r in receiver.received if r.webhook_id in events]
    attempts = Counter(r.webhook_id for r in requests)
    table = Table(title="Hookline demo: one row per endpoint")
    for column in ("endpoint", "sent", "delivered", "retried", "dead-lettered", "requests"):
        left = column in ("endpoint", "dead-lettered")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    for name, demo in ENDPOINTS.items():
        mine = [e for e, endpoint in events.items() if endpoint == name]
        outcomes = Counter(states[e] for e in mine if e in states)
        delivered = outcomes.pop("delivered", 0)
        letters = ", ".join(f"{n} {reason}" for reason, n in sorted(outcomes.items())) or "-"
        expected = delivered if demo.expect == "delivered" else outcomes.get(demo.expect, 0)
        # red: some events reached no final state; yellow: not what this route should give
        style = "red" if any(e not in states for e in mine) else (
            "" if expected == len(mine) else "yellow")
        table.add_row(name, str(len(mine)), str(delivered),
                      str(sum(attempts[e] > 1 for e in mine)), letters,
                      str(sum(attempts[e] for e in mine)), style=style)
    return table


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the worker
    client = store.client()
    url = client.connection_pool.connection_kwargs
    try:
        client.ping()
    except redis.RedisError as exc:
        console.print(f"[red]No Redis answers at {os.environ['REDIS_URL']} ({exc}).[/] "
                      "Run [bold]make redis[/] (or scripts/ensure-redis.sh) to get one.")
        return 2
    registry, dlq = EndpointRegistry(client), DeadLetterQueue(client)
    clean_up(client, registry, dlq)
    backlog = client.llen("hookline") + client.llen("hookline.retry")
    if backlog:
        console.print(f"[yellow]{backlog} older messages wait in Hookline's queues; "
                      "the worker sends them too.[/]")
    started = time.monotonic()
    with Receiver() as receiver:
        for path, behaviour in DEMO_ROUTES.items():
            receiver.route(path, behaviour)
        console.print(f"receiver on {receiver.url()}; each event's attempts there get:")
        for name, demo in ENDPOINTS.items():
            console.print(f"  {name:<15} {demo.route:<11} {demo.answers}")
        console.print(f"starting `hookline worker` ({processes_to_run()} worker processes, one "
                      f"per core) on Redis db {url.get('db', 0)} (log: {WORKER_LOG.name})")
        with celery_worker(WORKER_LOG):
            sending = time.monotonic()
            events = send_events(receiver, registry)
            console.print(f"sent {len(events)} events to {len(ENDPOINTS)} endpoints "
                          f"in {time.monotonic() - sending:.1f} s")
            states = follow(client, events)
        console.print(summary(receiver, events, states))
    console.print(f"finished in {time.monotonic() - started:.1f} s. Inspect the dead letters:\n"
                  "  .venv/bin/hookline dlq list\n"
                  "  .venv/bin/hookline dlq show <id>\n"
                  "  .venv/bin/hookline dlq replay --endpoint demo-rejects --dry-run")
    stuck = sorted(e for e in events if e not in states)
    undelivered = [e for e, name in events.items()
                   if name == "demo-ok" and states.get(e) != "delivered"]
    if stuck or undelivered:
        console.print(f"[red]FAILED:[/] {len(stuck)} events reached no final state within "
                      f"{TIMEOUT:g} s, {len(undelivered)} demo-ok events were not delivered.")
        listed = stuck or undelivered
        for event_id in listed[:20]:
            console.print(f"  {events[event_id]}/{event_id}: {states.get(event_id, 'pending')}")
        if len(listed) > 20:
            console.print(f"  ... and {len(listed) - 20} more")
        console.print(f"See {WORKER_LOG} for the worker's side.")
        return 1
    console.print("[green]OK:[/] every event was delivered or dead-lettered.")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; the worker was stopped[/]")
        sys.exit(130)
