"""What a web process pays to send: modules loaded and wall time, side by side in one run.

    python -m bench.imports [--rounds R] [--quick]                     (or: make bench-imports)

Every measure is a fresh interpreter (``tests/support/web_path.py``'s scenarios, the same the
tests assert on), timed from just before its first import, against one private
``redis-server``:

1. **The first enqueue**: a bare Celery app's first ``.delay()`` of a task (``Celery(broker=
   ...)``, one ``@app.task``) beside ``import hookline`` and a first ``hookline.send_webhook``
   to a registered endpoint. Targets: Hookline at most 1.1x the modules and 1.1x the time.
   A first ``hookline.publish`` (to an application with one subscribed endpoint) is shown
   beside them, without a target.
2. **django.setup()** of a project with Django's usual apps, without and with
   ``hookline.contrib.django``. Target: the app adds at most 30 modules.
3. **The outbox's web path**: ``HOOKLINE_OUTBOX=on``, ``send_webhook_on_commit`` in
   ``transaction.atomic()`` on SQLite. Target: no module of Celery, kombu, billiard or amqp in
   the process.

``rounds`` times (7; --quick 3) after one warm-up of each, the two sides of each comparison in
turn, the first side alternating from round to round. Medians are reported: wall time (the
target), and the process's CPU time over the same span, which another job on the machine
disturbs less. Every module's bytecode is compiled once, in the warm-up, and kept
(``PYTHONPYCACHEPREFIX`` in the run's directory), as it is for an installed package: a
checkout run with ``PYTHONDONTWRITEBYTECODE`` would compile Hookline's sources in every
process, and Celery's never. Writes ``bench/results/imports.json`` and prints a markdown
table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import control_redis, machine, run_bench
from bench.compare_plots import RESULTS
from tests.support.web_path import BROKER, heavy, run_scenario

OUTPUT = RESULTS / "imports.json"
#: Hookline's first send_webhook against a bare Celery app's first .delay(): modules and time.
RATIO_TARGET = 1.1
#: Modules hookline.contrib.django may add to django.setup().
DJANGO_TARGET = 30

#: The measures, in pairs compared within a round: (name, scenario, extra environment).
PAIRS = [
    (("celery_delay", "celery_delay", {}), ("send_webhook", "send_webhook", {})),
    (("django_without", "django_setup", {}),
     ("django_with", "django_setup", {"WEB_PATH_HOOKLINE_APP": "1"})),
]
SINGLES = [("publish", "publish", {}), ("outbox_on_commit", "outbox_on_commit",
                                        {"HOOKLINE_OUTBOX": "on"})]


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-imports-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        control, client = control_redis(stack, workdir)
        from hookline.store.apps import AppRegistry
        from hookline.store.endpoints import EndpointRegistry

        EndpointRegistry().add("shop", "http://127.0.0.1:9/shop")
        AppRegistry().add("shopapp")
        EndpointRegistry().add("shopsub", "http://127.0.0.1:9/shopsub", app="shopapp")
        info = machine(client)
        env = {"BARE_BROKER_URL": control.url, "WEB_PATH_ENDPOINT": "shop",
               "WEB_PATH_APP": "shopapp"}
        databases = iter(range(1_000_000))

        def measure(scenario: str, extra: dict[str, str]) -> dict[str, Any]:
            db = str(workdir / f"outbox-{next(databases)}.sqlite3")
            report = run_scenario(scenario, {**env, "WEB_PATH_DB": db, **extra},
                                  bytecode=workdir / "bytecode")
            return {"modules": len(report["loaded"]), "ms": report["ms"],
                    "cpu_ms": report["cpu_ms"], "heavy": heavy(report["loaded"]),
                    "broker_modules": len(heavy(report["present"], BROKER))}

        measures = [side for pair in PAIRS for side in pair] + SINGLES
        for _, scenario, extra in measures:  # warm-up: the page cache, compiled bytecode
            measure(scenario, extra)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in measures}
        for number in range(options.rounds):
            for pair in PAIRS:
                for name, scenario, extra in (pair if number % 2 == 0 else pair[::-1]):
                    runs[name].append(measure(scenario, extra))
            for name, scenario, extra in SINGLES:
                runs[name].append(measure(scenario, extra))
            print(f"  round {number}: " + ", ".join(
                f"{name} {found[-1]['modules']} modules {found[-1]['ms']:.0f} ms"
                for name, found in runs.items()), flush=True)
        results = {name: summary(found) for name, found in runs.items()}
        first, bare = results["send_webhook"], results["celery_delay"]
        verdicts = {
            "modules_ratio": round(first["modules"] / bare["modules"], 3),
            "time_ratio": round(first["ms"] / bare["ms"], 3),
            "cpu_ratio": round(first["cpu_ms"] / bare["cpu_ms"], 3),
            "django_added_modules": (results["django_with"]["modules"]
                                     - results["django_without"]["modules"]),
            "outbox_broker_modules": results["outbox_on_commit"]["broker_modules"],
        }
        met = {"modules_ratio": verdicts["modules_ratio"] <= RATIO_TARGET,
               "time_ratio": verdicts["time_ratio"] <= RATIO_TARGET,
               "django_added_modules": verdicts["django_added_modules"] <= DJANGO_TARGET,
               "outbox_broker_modules": verdicts["outbox_broker_modules"] == 0}
        return {"machine": info, "options": vars(options) | {"output": str(options.output)},
                "results": results, "runs": runs, **verdicts,
                "targets": {"modules_ratio": RATIO_TARGET, "time_ratio": RATIO_TARGET,
                            "django_added_modules": DJANGO_TARGET, "outbox_broker_modules": 0},
                "met": met}


def summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one measure's rounds, the heavy modules any round loaded, and the most
    modules of Celery, kombu, billiard and amqp a round's process held."""
    return {"modules": int(statistics.median(run["modules"] for run in found)),
            "ms": round(statistics.median(run["ms"] for run in found), 1),
            "cpu_ms": round(statistics.median(run["cpu_ms"] for run in found), 1),
            "ms_range": [min(run["ms"] for run in found), max(run["ms"] for run in found)],
            "heavy": sorted({module for run in found for module in run["heavy"]}),
            "broker_modules": max(run["broker_modules"] for run in found)}


def report(result: dict[str, Any]) -> str:
    results = result["results"]
    labels = {"celery_delay": "bare Celery app: first `.delay()`",
              "send_webhook": "`import hookline` + first `send_webhook`",
              "publish": "`import hookline` + first `publish`",
              "django_without": "`django.setup()`, Django's apps",
              "django_with": "`django.setup()`, + `hookline.contrib.django`",
              "outbox_on_commit": "outbox on: `send_webhook_on_commit` in a transaction"}
    rows = [f"| {labels[name]} | {found['modules']} | {found['ms']:.0f} | {found['cpu_ms']:.0f} | "
            f"{', '.join(found['heavy']) or '-'} |" for name, found in results.items()]
    met = result["met"]

    def verdict(key: str) -> str:
        return "met" if met[key] else "MISSED"

    return "\n".join([
        "| measure (fresh process) | modules loaded | wall ms | CPU ms | heavy modules |",
        "|---|---:|---:|---:|---|", *rows, "",
        f"send_webhook / bare .delay(): modules {result['modules_ratio']:.3f}x "
        f"({verdict('modules_ratio')}), time {result['time_ratio']:.3f}x "
        f"({verdict('time_ratio')}); target <= {RATIO_TARGET}x; CPU time "
        f"{result['cpu_ratio']:.3f}x",
        f"hookline.contrib.django adds {result['django_added_modules']} modules to "
        f"django.setup() (target <= {DJANGO_TARGET}: {verdict('django_added_modules')})",
        f"outbox on: {result['outbox_broker_modules']} Celery/kombu modules in the process "
        f"(target 0: {verdict('outbox_broker_modules')})"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="rounds of every measure (7; --quick 3)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.rounds = options.rounds or (3 if options.quick else 7)
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
