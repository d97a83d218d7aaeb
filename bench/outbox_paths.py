"""Parts 2 and 3 of ``bench.outbox``: what the outbox costs an event on its way, and what it
costs the web request that writes it.

**Latency, commit to receiver** (part 2). One ``celery -A app worker -P threads -c 8`` with
``HOOKLINE_OUTBOX=on`` and ``HOOKLINE_OUTBOX_URL`` naming a PostgreSQL database of the
benchmark's own (its relay polls every 50 ms, the default), one receiver
(``examples.receiver``, its own process, recording each request's arrival time), one endpoint.
This process commits transactions at ``rate`` a second, each inserting an order row, in blocks
of up to 300 that alternate between the two paths:

- ``direct``: ``send_webhook`` right after the commit (this process has HOOKLINE_OUTBOX off);
- ``outbox``: ``add_webhook`` in the transaction; the worker's relay publishes the row.

Latency = the receiver's arrival time minus the time the commit returned (one machine, one
clock), per event id. The worker is the same for both, relay included.

**The insert on the web path** (part 3). The same kind of transaction through a pooled
SQLAlchemy engine, one order row, with and without also ``add_webhook``'s outbox row, the two
interleaved (ABBA), after a warm-up; no relay runs meanwhile. Reported: p50 and p90 of each and
the difference.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from bench.chaos_procs import ReceiverProcess
from bench.common import Worker
from bench.compare_procs import EVENT_TYPE, payload
from bench.outbox_relay import hookline_outbox

LATENCY_ENDPOINT = "shop-lat"
BLOCK = 300
#: Seconds the last event of a block may take to arrive.
ARRIVAL_TIMEOUT = 60.0


def orders_table(metadata: MetaData) -> Table:
    return Table("bench_orders", metadata,
                 Column("id", Integer, primary_key=True, autoincrement=True),
                 Column("customer", String(64), nullable=False),
                 Column("amount", Integer, nullable=False),
                 Column("currency", String(3), nullable=False),
                 Column("created_at", Float(precision=53), nullable=False))


def shop_database(stack: ExitStack) -> tuple[str, Engine, Table]:
    """A database with the outbox's table and an orders table; its URL, a pooled engine on it
    (as a web application's) and the orders table."""
    url = hookline_outbox(stack)
    engine = create_engine(url, pool_size=5)
    stack.callback(engine.dispose)
    metadata = MetaData()
    orders = orders_table(metadata)
    metadata.create_all(engine)
    return url, engine, orders


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = (len(ordered) - 1) * q
    low = int(index)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    return {name: round(percentile(seconds, q) * 1000, 3)
            for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}


def order_values(n: int) -> dict[str, Any]:
    return {"customer": f"cus_{n % 997:05d}", "amount": 1999 + n % 100, "currency": "eur",
            "created_at": time.time()}


# -- part 2 ------------------------------------------------------------------------------------

def commit_direct(engine: Engine, orders: Table, n: int, event_id: str) -> float:
    """An order committed, then ``send_webhook``; the time the commit returned."""
    from hookline import send_webhook

    with Session(engine) as session, session.begin():
        session.execute(orders.insert().values(**order_values(n)))
    committed = time.time()
    send_webhook(LATENCY_ENDPOINT, EVENT_TYPE, payload(n), event_id=event_id)
    return committed


def commit_outbox(engine: Engine, orders: Table, n: int, event_id: str) -> float:
    """An order and its event's outbox row committed together; the time the commit returned."""
    from hookline.contrib.sqlalchemy import add_webhook

    with Session(engine) as session, session.begin():
        session.execute(orders.insert().values(**order_values(n)))
        add_webhook(session, LATENCY_ENDPOINT, EVENT_TYPE, payload(n), event_id=event_id)
    return time.time()


PATHS: dict[str, Callable[[Engine, Table, int, str], float]] = {"direct": commit_direct,
                                                                "outbox": commit_outbox}


def arrivals(record: Path) -> dict[str, float]:
    """webhook-id -> first arrival time, from the receiver's record."""
    found: dict[str, float] = {}
    for line in record.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            found.setdefault(entry["webhook_id"], entry["at"])
    return found


def send_block(engine: Engine, orders: Table, path: str, prefix: str, count: int,
               rate: float) -> dict[str, float]:
    """``count`` transactions of ``path`` at ``rate`` a second; event id -> commit time."""
    commits: dict[str, float] = {}
    start = time.monotonic()
    for n in range(count):
        wait = start + n / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        event_id = f"{prefix}-{n}"
        commits[event_id] = PATHS[path](engine, orders, n, event_id)
    return commits


def wait_arrived(record: Path, ids: set[str], worker: Worker) -> dict[str, float]:
    deadline = time.monotonic() + ARRIVAL_TIMEOUT
    while True:
        seen = arrivals(record)
        if ids <= seen.keys():
            return seen
        worker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(ids - seen.keys())} of {len(ids)} events never arrived")
        time.sleep(0.2)


def latency_part(client: redis.Redis, events: int, rate: float,
                 workdir: Path) -> dict[str, Any]:
    """Part 2: ``events`` per path at ``rate`` a second, in alternating blocks."""
    from hookline.store.endpoints import EndpointRegistry

    with ExitStack() as stack:
        url, engine, orders = shop_database(stack)
        record = workdir / "receiver-latency.jsonl"
        receiver = ReceiverProcess("examples.receiver", record)
        stack.callback(receiver.stop)
        EndpointRegistry().add(LATENCY_ENDPOINT, receiver.url("/latency"))
        worker = Worker({"HOOKLINE_OUTBOX": "on", "HOOKLINE_OUTBOX_URL": url},
                        workdir / "worker-latency.log", concurrency=8)
        stack.callback(worker.stop)
        # Warm-up: the worker's start, its relay's first pass, every connection made.
        for path in PATHS:
            commits = send_block(engine, orders, path, f"warm-{path}", 25, rate)
            deadline = time.monotonic() + 90
            while not set(commits) <= arrivals(record).keys():
                worker.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {path} warm-up never arrived: "
                                       f"{worker.log_path.read_text()[-3000:]}")
                time.sleep(0.2)
        latencies: dict[str, list[float]] = {path: [] for path in PATHS}
        blocks = max(1, -(-events // BLOCK))
        for number in range(blocks):
            size = min(BLOCK, events - number * BLOCK)
            order = list(PATHS) if number % 2 == 0 else list(PATHS)[::-1]
            for path in order:
                commits = send_block(engine, orders, path, f"{path}-{number}", size, rate)
                seen = wait_arrived(record, set(commits), worker)
                latencies[path] += [seen[i] - at for i, at in commits.items()]
                print(f"    {path} block {number}: p50 "
                      f"{percentile(latencies[path][-size:], 0.5) * 1000:.1f} ms", flush=True)
        result: dict[str, Any] = {"events_per_path": events, "rate": rate,
                                  "worker": "celery -A app worker -P threads -c 8",
                                  "relay_poll_s": 0.05}
        for path, values in latencies.items():
            result[path] = {"events": len(values), **summary_ms(values)}
        result["added_ms"] = {q: round(result["outbox"][q] - result["direct"][q], 3)
                              for q in ("p50", "p90", "p99")}
        result["target_p50_added_ms"] = 50
        result["met"] = result["added_ms"]["p50"] <= 50
        return result


# -- part 3 ------------------------------------------------------------------------------------

def insert_part(count: int) -> dict[str, Any]:
    """Part 3: ``count`` transactions each, with and without the outbox row, interleaved."""
    from hookline.contrib.sqlalchemy import add_webhook

    with ExitStack() as stack:
        _, engine, orders = shop_database(stack)

        def transaction(n: int, outbox: bool) -> float:
            started = time.perf_counter()
            with Session(engine) as session, session.begin():
                session.execute(orders.insert().values(**order_values(n)))
                if outbox:
                    add_webhook(session, LATENCY_ENDPOINT, EVENT_TYPE, payload(n))
            return time.perf_counter() - started

        for n in range(200):
            transaction(n, n % 2 == 0)
        times: dict[bool, list[float]] = {False: [], True: []}
        for n in range(count):
            for outbox in ((False, True) if n % 2 == 0 else (True, False)):
                times[outbox].append(transaction(n, outbox))
        without, with_row = summary_ms(times[False]), summary_ms(times[True])
        added = {q: round(with_row[q] - without[q], 3) for q in ("p50", "p90", "p99")}
        return {"transactions_each": count, "without_outbox_ms": without,
                "with_outbox_ms": with_row, "added_ms": added, "target_p50_added_ms": 1.0,
                "met": added["p50"] <= 1.0}
