"""Part 1 of ``bench.outbox``: relay throughput, Hookline's against django-celery-outbox
0.4.3's, each draining a backlog of N committed rows from PostgreSQL to the same private Redis.

Each outbox is a database of the benchmark's own on the same PostgreSQL server, filled with
COPY just before its relay runs, then ``VACUUM ANALYZE``-d:

- Hookline's ``hookline_outbox``: rows as ``add_webhook`` writes them (``webhook_row``: the
  checked payload, its content digest, due now) for one endpoint registered on the private
  Redis; the relay is ``hookline outbox relay --once`` (batches of 500, the default), each
  batch claimed, published in one pipeline onto the ``hookline`` queue and deleted in one
  transaction.
- django-celery-outbox's ``celery_outbox`` (its migrations applied by ``manage.py migrate``):
  rows as its ``OutboxCelery.send_task`` writes them (task id, name, args, kwargs, empty
  options, a Sentry trace id, schema 1, pending), the same payloads; the relay is ``manage.py
  celery_outbox_relay`` (bench/outbox_dco.py's settings), publishing with ``Celery.send_task``
  onto the ``celery`` queue, stopped (SIGTERM) once its table is empty. Run with Hookline's
  batch size (500) and with its own default (100).

Both relays are subprocesses; this process watches the broker's queue (LLEN every 5 ms). The
rate counts the rows that reached the broker from the first observation with some there to the
observation with all N there, over that time: process start-up is left out. The relay's CPU
(from /proc), Redis's (INFO) and the PostgreSQL server's (all its processes, from /proc) over
the same span are reported per row. Afterwards the queue
must hold exactly N messages of the right task and the table none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from bench.common import ROOT, stop_process
from bench.compare_procs import EVENT_TYPE, payload

POSTGRES = os.environ.get("HOOKLINE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432")
ENDPOINT = "shop-42"
HOOKLINE_QUEUE = "hookline"  # hookline.core.messages.DELIVERY_QUEUE
DCO_QUEUE = "celery"
DCO_TASK = "shop.deliver_webhook"
#: Seconds a relay may take to drain its backlog before the run gives up.
TIMEOUT = 900.0
TICK = os.sysconf("SC_CLK_TCK")


def own_database(stack: ExitStack, kind: str) -> str:
    """A database of the benchmark's own on the PostgreSQL server, dropped (connections and
    all) by ``stack``; its SQLAlchemy URL."""
    name = f"hookline_bench_{kind}_{uuid.uuid4().hex[:8]}"
    server = create_engine(f"{POSTGRES}/postgres", isolation_level="AUTOCOMMIT",
                           poolclass=NullPool)
    with server.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))

    def drop() -> None:
        with server.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        server.dispose()

    stack.callback(drop)
    return f"{POSTGRES}/{name}"


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A plain psycopg connection to the database a SQLAlchemy URL names."""
    parsed = make_url(url)
    return psycopg.connect(host=parsed.host, port=parsed.port or 5432, user=parsed.username,
                           password=parsed.password, dbname=parsed.database,
                           autocommit=autocommit)


def hookline_outbox(stack: ExitStack) -> str:
    """A database with Hookline's outbox table; its URL."""
    from sqlalchemy import MetaData

    from hookline.contrib.sqlalchemy import outbox_table

    url = own_database(stack, "hookline")
    engine = create_engine(url, poolclass=NullPool)
    metadata = MetaData()
    outbox_table(metadata)
    metadata.create_all(engine)
    engine.dispose()
    return url


def dco_env(url: str, broker: str) -> dict[str, str]:
    parsed = make_url(url)
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.outbox_dco", "PYTHONUNBUFFERED": "1",
            "OUTBOX_BENCH_DB": str(parsed.database), "OUTBOX_BENCH_BROKER": broker,
            "OUTBOX_BENCH_PG_HOST": parsed.host or "127.0.0.1",
            "OUTBOX_BENCH_PG_PORT": str(parsed.port or 5432),
            "OUTBOX_BENCH_PG_USER": parsed.username or "postgres"}


def dco_outbox(stack: ExitStack, broker: str, workdir: Path) -> str:
    """A database with django-celery-outbox's tables, made by its own migrations; its URL."""
    url = own_database(stack, "dco")
    done = subprocess.run([sys.executable, "-m", "django", "migrate", "-v", "0"], cwd=ROOT,
                          env=dco_env(url, broker), capture_output=True, text=True, timeout=120,
                          start_new_session=True, check=False)
    (workdir / "dco-migrate.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise RuntimeError(f"django-celery-outbox's migrate failed:\n{done.stderr[-3000:]}")
    return url


def fill_hookline(url: str, rows: int) -> float:
    """``rows`` rows as ``add_webhook`` writes them, by COPY; seconds taken."""
    from hookline.core.specs import EventSpec
    from hookline.outbox.rows import COLUMNS, webhook_row

    started = time.monotonic()
    statement = f"COPY hookline_outbox ({', '.join(COLUMNS)}) FROM STDIN"
    with connect(url) as connection, connection.cursor() as cursor, \
            cursor.copy(statement) as copy:
        for n in range(rows):
            values = webhook_row(EventSpec(ENDPOINT, EVENT_TYPE, payload(n))).values()
            copy.write_row([values[column] for column in COLUMNS])
    analyze(url, "hookline_outbox")
    return time.monotonic() - started


DCO_COLUMNS = ("created_at", "retries", "task_id", "task_name", "args", "kwargs", "options",
               "sentry_trace_id", "schema_version")


def fill_dco(url: str, rows: int) -> float:
    """``rows`` rows as ``OutboxCelery.send_task(DCO_TASK, args=[endpoint, type, payload],
    kwargs={"event_id": ...})`` writes them, by COPY; seconds taken."""
    started = time.monotonic()
    now = datetime.now(UTC)
    statement = f"COPY celery_outbox ({', '.join(DCO_COLUMNS)}) FROM STDIN"
    with connect(url) as connection, connection.cursor() as cursor, \
            cursor.copy(statement) as copy:
        for n in range(rows):
            copy.write_row([now, 0, str(uuid.uuid4()), DCO_TASK,
                            json.dumps([ENDPOINT, EVENT_TYPE, payload(n)]),
                            json.dumps({"event_id": str(uuid.uuid4())}), "{}",
                            f"{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}", 1])
    analyze(url, "celery_outbox")
    return time.monotonic() - started


def analyze(url: str, table: str) -> None:
    with connect(url, autocommit=True) as connection:
        connection.execute(f"VACUUM ANALYZE {table}")


def count_rows(url: str, table: str) -> int:
    with connect(url) as connection:
        found = connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        return int(found[0]) if found else 0


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) of a running or not yet reaped process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL server process now (the whole server: another client's
    work shows too)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().split(") ", 1)
        except (OSError, ValueError):
            continue
        if name.endswith("(postgres"):
            fields = rest.split()
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def watch(process: subprocess.Popen[bytes], client: redis.Redis, queue: str, rows: int,
          log: Path) -> dict[str, Any]:
    """Watch ``queue`` fill while ``process`` relays: the rate from the first rows seen there
    to all ``rows``, with the relay's and Redis's CPU over that span."""
    started = time.monotonic()
    first: tuple[float, int, float | None, float, float] | None = None
    while True:
        now = time.monotonic()
        depth = int(client.llen(queue))
        if first is None and depth > 0:
            first = (now, depth, process_cpu(process.pid), redis_cpu(client), postgres_cpu())
        if depth >= rows:
            cpu, server, database = process_cpu(process.pid), redis_cpu(client), postgres_cpu()
            break
        if process.poll() is not None and int(client.llen(queue)) < rows:
            raise RuntimeError(f"the relay exited ({process.returncode}) with "
                               f"{client.llen(queue)} of {rows} rows moved:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        if now - started > TIMEOUT:
            raise RuntimeError(f"the relay moved {depth} of {rows} rows in {TIMEOUT:.0f}s")
        time.sleep(0.005)
    assert first is not None
    seconds = now - first[0]
    moved = rows - first[1]
    result: dict[str, Any] = {
        "rows": rows, "from_start_s": round(now - started, 2),
        "measured_rows": moved, "measured_s": round(seconds, 3),
        "rows_per_s": round(moved / seconds) if seconds > 0 else None,
        "redis_cpu_us_per_row": round((server - first[3]) / moved * 1e6, 1) if moved else None,
        "postgres_cpu_us_per_row": round((database - first[4]) / moved * 1e6, 1)
        if moved else None}
    if cpu is not None and first[2] is not None and moved:
        result["relay_cpu_us_per_row"] = round((cpu - first[2]) / moved * 1e6, 1)
        result["relay_cpu_share"] = round((cpu - first[2]) / seconds, 2)
    return result


def check_queue(client: redis.Redis, queue: str, rows: int, task: str) -> dict[str, Any]:
    """The queue holds exactly ``rows`` messages; its first and last are tasks ``task``."""
    depth = int(client.llen(queue))
    tasks = {json.loads(str(client.lindex(queue, index)))["headers"]["task"]
             for index in (0, -1)} if depth else set()
    return {"messages": depth, "expected": rows, "task": sorted(tasks),
            "ok": depth == rows and tasks == {task}}


def hookline_relay(stack: ExitStack, client: redis.Redis, broker: str, rows: int,
                   workdir: Path) -> dict[str, Any]:
    """Hookline's relay draining ``rows`` rows."""
    from hookline.store.endpoints import EndpointRegistry

    url = hookline_outbox(stack)
    EndpointRegistry().add(ENDPOINT, "http://127.0.0.1:9/hook")
    fill_s = fill_hookline(url, rows)
    log = workdir / "relay-hookline.log"
    script = Path(sys.executable).parent / "hookline"
    command = ([str(script)] if script.exists()
               else [sys.executable, "-c", "from hookline.cli import main; main()"])
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, "outbox", "relay", "--once"], cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "REDIS_URL": broker, "HOOKLINE_OUTBOX": "on",
                 "HOOKLINE_OUTBOX_URL": url})
    stack.callback(stop_process, process)
    result = watch(process, client, HOOKLINE_QUEUE, rows, log)
    process.wait(60)
    result |= {"fill_s": round(fill_s, 1), "exit": process.returncode,
               "left_in_table": count_rows(url, "hookline_outbox"),
               "broker": check_queue(client, HOOKLINE_QUEUE, rows, "hookline.deliver"),
               "said": log.read_text(errors="replace").strip().splitlines()[-1:]}
    client.delete(HOOKLINE_QUEUE)
    return result


def dco_relay(stack: ExitStack, client: redis.Redis, broker: str, rows: int, batch: int,
              workdir: Path) -> dict[str, Any]:
    """django-celery-outbox's relay draining ``rows`` rows, ``batch`` at a time."""
    url = dco_outbox(stack, broker, workdir)
    fill_s = fill_dco(url, rows)
    log = workdir / f"relay-dco-{batch}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "celery_outbox_relay", "--batch-size", str(batch)],
            cwd=ROOT, env=dco_env(url, broker), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    stack.callback(stop_process, process)
    result = watch(process, client, DCO_QUEUE, rows, log)
    deadline = time.monotonic() + 60
    while (left := count_rows(url, "celery_outbox")) and time.monotonic() < deadline:
        time.sleep(0.1)  # the last batch's rows are deleted after its publish
    stop_process(process, timeout=40)
    result |= {"fill_s": round(fill_s, 1), "exit": process.returncode, "left_in_table": left,
               "broker": check_queue(client, DCO_QUEUE, rows, DCO_TASK), "batch": batch}
    client.delete(DCO_QUEUE)
    return result


def relay_part(client: redis.Redis, broker: str, rows: int, dco_batches: list[int],
               workdir: Path) -> dict[str, Any]:
    """Part 1: both relays in turn on backlogs of ``rows`` (Hookline, then django-celery-outbox
    at each batch size); everything started here is stopped and dropped on the way out."""
    runs: dict[str, Any] = {}
    with ExitStack() as stack:
        print(f"  relay: Hookline, {rows:,} rows", flush=True)
        runs["hookline"] = hookline_relay(stack, client, broker, rows, workdir)
        print(f"    {runs['hookline']['rows_per_s']:,} rows/s", flush=True)
    for batch in dco_batches:
        with ExitStack() as stack:
            print(f"  relay: django-celery-outbox, {rows:,} rows, batch {batch}", flush=True)
            runs[f"dco_batch_{batch}"] = dco_relay(stack, client, broker, rows, batch, workdir)
            print(f"    {runs[f'dco_batch_{batch}']['rows_per_s']:,} rows/s", flush=True)
    theirs = max((run["rows_per_s"] for name, run in runs.items() if name.startswith("dco")),
                 default=None)
    ours = runs["hookline"]["rows_per_s"]
    checks = all(run["broker"]["ok"] and run["left_in_table"] == 0 for run in runs.values())
    ratio = round(ours / theirs, 2) if theirs else None
    return {"rows": rows, "runs": runs, "hookline_rows_per_s": ours,
            "dco_best_rows_per_s": theirs, "ratio": ratio,
            "targets": {"rows_per_s": 5000, "ratio": 2.0},
            "met": {"rows_per_s": ours >= 5000, "ratio": ratio is not None and ratio >= 2.0},
            "broker_checks_ok": checks}
