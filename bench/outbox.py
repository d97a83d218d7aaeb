"""The transactional outbox (issue 32): relay throughput against django-celery-outbox, the
latency it adds between a commit and the receiver, and what its insert costs the web request.

    python -m bench.outbox [--quick] [--rows 100000] [--only relay|latency|insert]
                                                                  (or: make bench-outbox)

On one private ``redis-server`` and PostgreSQL databases of the benchmark's own (created on
the local server, ``HOOKLINE_TEST_POSTGRES``, and dropped afterwards), in one run:

1. **Relay throughput** (bench/outbox_relay.py): a backlog of ``--rows`` committed rows
   (100,000; --quick 10,000) drained to the broker by Hookline's relay (``hookline outbox
   relay --once``) and by django-celery-outbox 0.4.3's (``manage.py celery_outbox_relay``, at
   Hookline's batch size 500 and at its default 100). Rows/s from the first row to the last
   reaching the broker; targets: Hookline >= 5,000 rows/s on this 2-core machine and >= 2x the
   better of django-celery-outbox's runs. The broker must hold exactly the rows' messages.
2. **Latency, commit to receiver** (bench/outbox_paths.py): ``--events`` per path (1,500;
   --quick 300) at 50 transactions a second, ``send_webhook`` after the commit against the
   outbox row relayed by the worker. Target: outbox p50 at most 50 ms above direct.
3. **The insert on the web path** (bench/outbox_paths.py): ``--inserts`` transactions (2,000)
   inserting an order, with and without the outbox row, interleaved. Target: at most 1 ms
   added at p50.

django-celery-outbox must be installed (``make bench-outbox`` installs 0.4.3 first). Writes
``bench/results/outbox.json`` (with ``--only``, the other parts already there are kept) and
prints a markdown table. Everything it starts is stopped and every database dropped on the
way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import control_redis, machine, run_bench
from bench.compare_plots import RESULTS

OUTPUT = RESULTS / "outbox.json"
PARTS = ("relay", "latency", "insert")
DCO_VERSION = "0.4.3"


def dco_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("django-celery-outbox")
    except PackageNotFoundError:
        return None


def run(options: argparse.Namespace) -> dict[str, Any]:
    parts = options.only or list(PARTS)
    theirs = dco_version()
    if "relay" in parts and theirs is None:
        raise SystemExit("django-celery-outbox is not installed: .venv/bin/pip install "
                         f"django-celery-outbox=={DCO_VERSION} (make bench-outbox does)")
    with tempfile.TemporaryDirectory(prefix="hookline-outbox-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        control, client = control_redis(stack, workdir)
        from bench.outbox_paths import insert_part, latency_part
        from bench.outbox_relay import relay_part

        info = machine(client) | {"django_celery_outbox": theirs}
        result: dict[str, Any] = {"machine": info,
                                  "options": vars(options) | {"output": str(options.output)}}
        if options.only and options.output.exists():
            previous = json.loads(options.output.read_text())
            result |= {part: previous[part] for part in PARTS
                       if part not in parts and part in previous}
        if "relay" in parts:
            print("part 1: relay throughput", flush=True)
            result["relay"] = {"machine": machine(client) | {"django_celery_outbox": theirs},
                               **relay_part(client, control.url, options.rows,
                                            options.dco_batches, workdir)}
            client.flushall()
        if "latency" in parts:
            print("part 2: latency, commit to receiver", flush=True)
            result["latency"] = {"machine": machine(client),
                                 **latency_part(client, options.events, options.rate, workdir)}
            client.flushall()
        if "insert" in parts:
            print("part 3: the insert on the web path", flush=True)
            result["insert"] = {"machine": machine(client), **insert_part(options.inserts)}
        return result


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def load(part: dict[str, Any]) -> str:
    averages = part.get("machine", {}).get("load_average") or ["?"]
    return f" (load {averages[0]} at its start)"


def report(result: dict[str, Any]) -> str:
    lines: list[str] = []
    if relay := result.get("relay"):
        lines += [f"Relay throughput, {relay['rows']:,} rows each, PostgreSQL to Redis"
                  f"{load(relay)}:", "",
                  "| relay | batch | rows/s | CPU µs/row: relay | Redis | PostgreSQL | broker |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for name, run in relay["runs"].items():
            label = "Hookline" if name == "hookline" else "django-celery-outbox 0.4.3"
            batch = run.get("batch", 500)
            check = "ok" if run["broker"]["ok"] and run["left_in_table"] == 0 else "WRONG"
            lines.append(f"| {label} | {batch} | {run['rows_per_s']:,} | "
                         f"{run.get('relay_cpu_us_per_row', '?')} | "
                         f"{run['redis_cpu_us_per_row']} | {run['postgres_cpu_us_per_row']} | "
                         f"{check} "
                         f"({run['broker']['messages']:,} messages) |")
        lines += ["", f"Hookline {relay['hookline_rows_per_s']:,} rows/s (target >= 5,000: "
                      f"{verdict(relay['met']['rows_per_s'])}); ratio to django-celery-outbox's "
                      f"best {relay['ratio']} (target >= 2: {verdict(relay['met']['ratio'])})",
                  ""]
    if latency := result.get("latency"):
        lines += [f"Latency, commit to receiver, {latency['events_per_path']:,} events per path "
                  f"at {latency['rate']:g}/s{load(latency)}:", "",
                  "| path | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|"]
        for path in ("direct", "outbox"):
            row = latency[path]
            lines.append(f"| {path} | {row['p50']:.1f} | {row['p90']:.1f} | {row['p99']:.1f} | "
                         f"{row['max']:.1f} |")
        added = latency["added_ms"]
        lines += ["", f"outbox - direct: p50 {added['p50']:+.1f} ms, p90 {added['p90']:+.1f} ms, "
                      f"p99 {added['p99']:+.1f} ms (target p50 <= +50 ms: "
                      f"{verdict(latency['met'])})", ""]
    if insert := result.get("insert"):
        lines += [f"Web-path transaction (one order row), {insert['transactions_each']:,} each, "
                  f"interleaved{load(insert)}:", "", "| transaction | p50 ms | p90 ms | p99 ms |",
                  "|---|---:|---:|---:|"]
        for label, key in (("order only", "without_outbox_ms"),
                           ("order + outbox row", "with_outbox_ms")):
            row = insert[key]
            lines.append(f"| {label} | {row['p50']:.3f} | {row['p90']:.3f} | {row['p99']:.3f} |")
        added = insert["added_ms"]
        lines += ["", f"added: p50 {added['p50']:+.3f} ms, p90 {added['p90']:+.3f} ms "
                      f"(target p50 <= +1 ms: {verdict(insert['met'])})"]
    return "\n".join(lines).rstrip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, help="backlog per relay (100000; --quick 10000)")
    parser.add_argument("--dco-batches", type=lambda s: [int(b) for b in s.split(",")],
                        default=[500, 100],
                        help="django-celery-outbox relay batch sizes to run (500,100)")
    parser.add_argument("--events", type=int, help="latency events per path (1500; --quick 300)")
    parser.add_argument("--rate", type=float, default=50.0, help="latency transactions/s (50)")
    parser.add_argument("--inserts", type=int,
                        help="web-path transactions each way (2000; --quick 500)")
    parser.add_argument("--only", action="append", choices=PARTS,
                        help="run this part only (repeatable); keep the others' results")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.rows = options.rows or (10_000 if options.quick else 100_000)
    options.events = options.events or (300 if options.quick else 1500)
    options.inserts = options.inserts or (500 if options.quick else 2000)
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
