"""Render the Grafana dashboard's panels from real data (docs/images/dashboard.png): a worker
delivering to a loopback receiver, a real Prometheus scraping it, then every panel of
deploy/grafana/hookline.json queried through Prometheus's HTTP API and drawn with matplotlib,
laid out on the dashboard's own grid (its rows, titles, units, thresholds and value names).

    .venv/bin/python scripts/dashboard_screenshot.py [--redis-port 6394] [--duration 75]
        [--output docs/images/dashboard.png]

Not run by the tests; needs Debian's ``prometheus`` (``scripts/ensure-prometheus.sh``) and
matplotlib (the ``dev`` extra). Starts everything it uses and stops it at the end: a private
``redis-server`` on ``--redis-port`` (nothing kept on disk; the port must be free), a loopback
receiver, two workers (one is killed with SIGKILL half-way: a process declared dead, its
messages restored), the ``hookline metrics`` exporter with the outbox on (a SQLite file whose
rows nobody relays), and ``prometheus`` on a free loopback port scraping the workers and the
exporter every second, with the shipped alert rules loaded. For ``--duration`` seconds it sends
a steady mix: deliveries, retries, 4xx dead letters, a 410 that disables an endpoint, a
receiver down until its breaker opens, a slow receiver at its in-flight cap, a rate limit, a
Retry-After, an ordered endpoint whose heads fail twice, a paused endpoint and duplicates.

The queries run as Grafana would run them, with its variables replaced: ``$topn`` by 5 and
``$__rate_interval`` by 15s (over a run this short, Grafana's own default of four scrape
intervals draws a noisier line). Table panels are instant queries at the end of the run.
``--keep-data FILE`` saves what Prometheus answered; ``--from-data FILE`` draws from such a file
without running anything (to work on the drawing).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.console_screenshots import listening, pings, start, wait  # noqa: E402
from tests.support.prometheus import (  # noqa: E402
    ALERT_RULES,
    PrometheusServer,
    dashboard,
    prometheus_unavailable,
)
from tests.support.servers import free_port, stop_process  # noqa: E402

#: What the dashboard's Grafana variables stand for here.
VARIABLES = {"$__rate_interval": "15s", "$topn": "5"}
#: Seconds between the points of a range query.
STEP = 1
#: Seconds an outbox row has waited when the run starts.
OUTBOX_AGE = 900

# -- the run -------------------------------------------------------------------------------


def settings(redis_url: str) -> dict[str, str]:
    """The deployment's settings: short backoffs and a short breaker, so that retries, dead
    letters and breakers all happen within a minute; loopback receivers allowed."""
    return {
        "REDIS_URL": redis_url,
        "HOOKLINE_INITIAL_BACKOFF": "1", "HOOKLINE_BACKOFF_MULTIPLIER": "2",
        "HOOKLINE_MAX_BACKOFF": "4", "HOOKLINE_JITTER": "0.2", "HOOKLINE_MAX_ATTEMPTS": "4",
        "HOOKLINE_MAX_AGE": "60", "HOOKLINE_RETRY_AFTER_CAP": "5",
        "HOOKLINE_CONNECT_TIMEOUT": "1", "HOOKLINE_READ_TIMEOUT": "3",
        "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
        "HOOKLINE_BREAKER_THRESHOLD": "5", "HOOKLINE_BREAKER_COOLDOWN": "8",
        "HOOKLINE_BREAKER_MAX_COOLDOWN": "16",
        "HOOKLINE_DLQ_SPOOL": str(Path(tempfile.gettempdir()) / "hookline-dashboard-spool.jsonl"),
    }


def worker(name: str, metrics_port: int, env: dict[str, str],
           work: Path) -> subprocess.Popen[bytes]:
    log = work / f"worker-{name}.log"
    process = start([sys.executable, "-m", "celery", "-A", "app", "worker", "-l", "info",
                     "-P", "threads", "-c", "8", "-n", f"{name}@%h", "--without-gossip",
                     "--without-mingle", "--without-heartbeat"],
                    env | {"HOOKLINE_METRICS_PORT": str(metrics_port)}, log)
    wait(lambda: process.poll() is not None or " ready." in log.read_text(errors="replace"),
         f"worker {name}", timeout=60)
    if process.poll() is not None:
        raise SystemExit(f"worker {name} exited:\n{log.read_text(errors='replace')}")
    return process


def seed_endpoints(receiver: Any) -> None:
    from examples.receiver import Reply, always, fail_first
    from hookline.store.endpoints import EndpointRegistry

    registry = EndpointRegistry()
    route = receiver.route
    registry.add("shop", route("/shop", always(Reply(204, delay=0.03))))
    registry.add("billing", route("/billing", fail_first(1, Reply(503), Reply(200))))
    registry.add("crm", route("/crm", always(Reply(400, body=b"unknown field"))))
    registry.add("legacy", route("/legacy", always(Reply(410))))
    registry.add("search", route("/search", always(Reply(503))))
    registry.add("reports", route("/reports", always(Reply(204, delay=0.9))), max_in_flight=2)
    registry.add("mailer", route("/mailer", always(Reply(204))), rate="2/s", burst=1)
    registry.add("partner", route("/partner", fail_first(
        1, Reply(429, headers={"Retry-After": "3"}))))
    registry.add("ledger", route("/ledger", fail_first(2, Reply(503))), ordered=True)
    registry.add("archive", route("/archive", always(Reply(204))))
    registry.pause("archive")


def send_traffic(tick: int, outbox: Any) -> None:
    """One second's events."""
    from hookline import send_webhook

    body = {"order": 1000 + tick, "total": "42.00"}
    for n in range(3):
        send_webhook("shop", "order.created", body, f"shop-{tick}-{n}")
    if tick % 10 == 5:
        send_webhook("shop", "order.created", {"order": 1000 + tick - 5, "total": "42.00"},
                     f"shop-{tick - 5}-0")  # delivered already: a duplicate
    send_webhook("billing", "invoice.sent", body)
    if tick % 3 == 0:
        send_webhook("crm", "contact.updated", body)
    if tick % 6 == 0:
        send_webhook("legacy", "order.created", body)
    send_webhook("search", "order.indexed", body)
    for _ in range(2):
        send_webhook("reports", "order.created", body)
    for _ in range(3):
        send_webhook("mailer", "receipt.sent", body)
    if tick % 4 == 0:
        send_webhook("partner", "order.shipped", body)
    send_webhook("ledger", "entry.posted", body, ordering_key=f"account-{tick % 3}")
    if tick % 5 == 0:
        send_webhook("archive", "order.archived", body)
    if tick % 10 == 0:
        outbox(tick)


def run(arguments: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Everything started, the traffic sent, the dashboard's queries answered."""
    redis_url = f"redis://127.0.0.1:{arguments.redis_port}/0"
    os.environ.update(settings(redis_url))
    for name in ("HOOKLINE_BROKER_URL", "HOOKLINE_REDIS_URL"):
        os.environ.pop(name, None)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("CELERY_")} | {"PYTHONUNBUFFERED": "1"}
    if listening(arguments.redis_port):
        raise SystemExit(f"port {arguments.redis_port} is taken: pass --redis-port")

    processes = [start(["redis-server", "--port", str(arguments.redis_port), "--bind",
                        "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(work)],
                       env, work / "redis.log")]
    prometheus: PrometheusServer | None = None
    try:
        import redis

        wait(lambda: pings(redis.Redis.from_url(redis_url)), "redis-server")
        from sqlalchemy.orm import Session

        from examples.receiver import Receiver
        from hookline.contrib.sqlalchemy import add_webhook
        from tests.support.sql import database

        with Receiver() as receiver, database("sqlite", work) as db:
            seed_endpoints(receiver)

            def outbox(tick: int) -> None:
                with Session(db.engine) as session, session.begin():
                    add_webhook(session, "shop", "order.created", {"n": tick}, f"outbox-{tick}")
                with db.engine.begin() as connection:
                    connection.exec_driver_sql(
                        f"UPDATE hookline_outbox SET due_at = due_at - {OUTBOX_AGE} "
                        f"WHERE event_id = 'outbox-{tick}'")

            ports = {"main": free_port(), "doomed": free_port(), "exporter": free_port()}
            processes.append(start(
                [os.path.join(os.path.dirname(sys.executable), "hookline"), "metrics",
                 "--port", str(ports["exporter"]), "--address", "127.0.0.1"],
                env | {"HOOKLINE_OUTBOX": "on", "HOOKLINE_OUTBOX_URL": db.url},
                work / "exporter.log"))
            processes.append(worker("main", ports["main"], env, work))
            doomed = worker("doomed", ports["doomed"], env, work)
            processes.append(doomed)
            (work / "prometheus").mkdir()
            prometheus = PrometheusServer(
                work / "prometheus", free_port(),
                {"hookline-workers": [f"127.0.0.1:{ports['main']}",
                                      f"127.0.0.1:{ports['doomed']}"],
                 "hookline-exporter": [f"127.0.0.1:{ports['exporter']}"]},
                rule_files=[ALERT_RULES]).start()
            began = time.time()
            print(f"prometheus on {prometheus.url}; sending for {arguments.duration} s")
            for tick in range(arguments.duration):
                send_traffic(tick, outbox)
                if tick == arguments.duration // 2:
                    doomed.send_signal(signal.SIGKILL)  # mid-delivery: its messages restored
                time.sleep(max(0.0, began + tick + 1 - time.time()))
            time.sleep(2)  # the last scrapes
            return fetch(prometheus, began + 1, time.time())
    finally:
        if prometheus is not None:
            prometheus.stop()
        for process in reversed(processes):
            stop_process(process)


def fetch(prometheus: PrometheusServer, start: float, end: float) -> dict[str, Any]:
    """Each panel's answers: per target, a range (or, for a table, an instant) query."""
    answers: dict[str, Any] = {"start": start, "end": end, "panels": {}}
    for panel in _panels(dashboard()):
        results = []
        for target in panel.get("targets", []):
            expr = runnable(target["expr"])
            if panel["type"] == "table":
                data = prometheus.api("query", query=expr, time=str(end))["result"]
            else:
                data = prometheus.api("query_range", query=expr, start=str(start),
                                      end=str(end), step=str(STEP))["result"]
            results.append(data)
        answers["panels"][str(panel["id"])] = results
    return answers


def runnable(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


# -- the drawing ---------------------------------------------------------------------------

WIDTH_PX = 1600
DPI = 100
#: Inches per grid unit of height (Grafana's is 30 px plus a margin), and a row header's.
UNIT_HEIGHT = 0.34
ROW_HEIGHT = 0.5
MARGIN = 0.06  # inches between panels
COLOURS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
           "#705da0", "#508642", "#cca300"]
NAMED = {"green": "#56a64b", "orange": "#ff9830", "red": "#e02f44", "yellow": "#fade2a",
         "blue": "#3274d9"}
PANEL_BG, BORDER, TEXT, MUTED = "#ffffff", "#d8d9da", "#1f1f20", "#8e8e8e"


def fmt(value: float, unit: str | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "percentunit":
        return f"{value:.1%}" if abs(value) < 0.9995 or value >= 1 else f"{value:.2%}"
    if unit == "s":
        magnitude = abs(value)
        if magnitude == 0:
            return "0 s"
        if magnitude < 1:
            return f"{value * 1000:.0f} ms"
        if magnitude < 120:
            return f"{value:.1f} s" if magnitude < 10 else f"{value:.0f} s"
        return f"{value / 60:.3g} min"
    text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text}/s" if unit == "ops" else text


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip()


def series(panel: dict[str, Any], results: list[list[dict[str, Any]]]
           ) -> list[tuple[str, list[float], list[float]]]:
    """(name, times, values) for every series the panel's targets answered."""
    found = []
    for target, answer in zip(panel.get("targets", []), results, strict=True):
        for item in answer:
            name = legend(target.get("legendFormat", ""), item["metric"]) or item["metric"].get(
                "__name__", "value")
            points = item.get("values") or [item["value"]]
            times = [float(t) for t, _ in points]
            values = [float(v) for _, v in points]
            found.append((name, times, values))
    return found


def colour_for(value: float, defaults: dict[str, Any]) -> str:
    for mapping in defaults.get("mappings", []):
        option = mapping.get("options", {}).get(str(int(value)) if value == int(value) else "")
        if option:
            return NAMED.get(option.get("color", ""), option.get("color", TEXT))
    colour = NAMED["green"]
    for step in defaults.get("thresholds", {}).get("steps", []):
        if step["value"] is None or value >= step["value"]:
            colour = NAMED.get(step["color"], step["color"])
    return colour


def mapped(value: float, defaults: dict[str, Any]) -> str | None:
    for mapping in defaults.get("mappings", []):
        if value == int(value):
            option = mapping.get("options", {}).get(str(int(value)))
            if option:
                return str(option["text"])
    return None


def draw(answers: dict[str, Any], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    board = dashboard()
    panels = _panels(board)
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    row_units = {p["gridPos"]["y"] for p in panels if p["type"] == "row"}
    heights = [ROW_HEIGHT if y in row_units else UNIT_HEIGHT for y in range(bottom)]
    title_height = 0.75
    tops = [title_height + sum(heights[:y]) for y in range(bottom + 1)]
    width_in = WIDTH_PX / DPI
    height_in = tops[-1] + MARGIN * 2
    figure = plt.figure(figsize=(width_in, height_in), dpi=DPI, facecolor="#f4f5f5")
    unit_width = (width_in - MARGIN) / 24
    start, end = answers["start"], answers["end"]
    window = f"{datetime.fromtimestamp(start):%H:%M:%S} to {datetime.fromtimestamp(end):%H:%M:%S}"
    figure.text(MARGIN * 2 / width_in, 1 - 0.3 / height_in, board["title"], fontsize=17,
                weight="bold", color=TEXT, va="center")
    figure.text(1 - MARGIN * 2 / width_in, 1 - 0.3 / height_in,
                f"deploy/grafana/hookline.json on a real Prometheus, {window} "
                f"({int(end - start)} s); \\$topn = {VARIABLES['$topn']}, "
                f"\\$__rate_interval = {VARIABLES['$__rate_interval']}",
                fontsize=9.5, color=MUTED, va="center", ha="right")

    def box(grid: dict[str, int]) -> tuple[float, float, float, float]:
        """A panel's rectangle in figure fractions (left, bottom, width, height)."""
        left = MARGIN + grid["x"] * unit_width
        top = tops[grid["y"]] + MARGIN / 2
        low = tops[grid["y"] + grid["h"]] - MARGIN / 2
        return (left / width_in, 1 - low / height_in,
                (grid["w"] * unit_width - MARGIN) / width_in, (low - top) / height_in)

    for panel in panels:
        rect = box(panel["gridPos"])
        if panel["type"] == "row":
            figure.text(rect[0], rect[1] + rect[3] * 0.35, panel["title"], fontsize=13,
                        weight="bold", color=TEXT)
            continue
        frame = figure.add_axes(rect)
        frame.set_axis_off()
        frame.add_patch(Rectangle((0, 0), 1, 1, transform=frame.transAxes, facecolor=PANEL_BG,
                                  edgecolor=BORDER, linewidth=1))
        pixels_w, pixels_h = rect[2] * width_in * DPI, rect[3] * height_in * DPI
        title = runnable(panel["title"]).replace("$", r"\$")  # as Grafana shows it
        frame.text(8 / pixels_w, 1 - 14 / pixels_h, title, fontsize=9.5,
                   weight="bold", color=TEXT, va="center", transform=frame.transAxes)
        found = series(panel, answers["panels"].get(str(panel["id"]), []))
        found = [item for item in found if any(not math.isnan(v) for v in item[2])]
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        unit = defaults.get("unit")
        if not found:
            frame.text(0.5, 0.45, "No data", fontsize=13, color=MUTED, ha="center",
                       va="center", transform=frame.transAxes)
            continue
        inner = (rect[0] + 8 / DPI / width_in, rect[1], rect[2] - 16 / DPI / width_in,
                 rect[3] - 28 / DPI / height_in)
        if panel["type"] == "stat":
            stat(figure, inner, found, defaults, unit)
        elif panel["type"] == "table":
            table(frame, found, pixels_w, pixels_h)
        elif panel["type"] == "state-timeline":
            timeline(figure, inner, found, defaults, start, end, mdates)
        else:
            graph(figure, inner, found, unit, start, end, pixels_w, mdates, defaults)

    output.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, facecolor=figure.get_facecolor())
    plt.close(figure)
    try:
        from PIL import Image
    except ImportError:
        output.write_bytes(buffer.getvalue())
    else:  # a small palette: text and flat colours stay sharp, the file a fraction the size
        image = Image.open(buffer).convert("RGB")
        image.quantize(colors=128, dither=Image.Dither.NONE).save(output, optimize=True)
    shown = output.relative_to(ROOT) if output.is_relative_to(ROOT) else output
    print(f"{shown}: {output.stat().st_size // 1024} KB")


def graph(figure: Any, inner: tuple[float, float, float, float],
          found: list[tuple[str, list[float], list[float]]], unit: str | None, start: float,
          end: float, pixels_w: float, mdates: Any, defaults: dict[str, Any]) -> None:
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    height_px = inner[3] * figure.get_figheight() * DPI
    columns = max(1, int(pixels_w // 150))
    legend_rows = math.ceil(len(found) / columns)
    side = height_px < 150  # a short panel: the legend beside the plot
    bottom_px = 20 if side else 22 + 14 * legend_rows
    left_px = 52
    right_px = 130 if side else 6
    width_px = inner[2] * figure.get_figwidth() * DPI
    axes = figure.add_axes((inner[0] + left_px / width_px * inner[2],
                            inner[1] + bottom_px / height_px * inner[3],
                            inner[2] * (1 - (left_px + right_px) / width_px),
                            inner[3] * (1 - (bottom_px + 4) / height_px)))
    for index, (name, times, values) in enumerate(found):
        axes.plot([datetime.fromtimestamp(t) for t in times], values, linewidth=1.4,
                  color=COLOURS[index % len(COLOURS)], label=name)
    for step in defaults.get("thresholds", {}).get("steps", []):
        if step["value"] is not None:
            axes.axhline(step["value"], color=NAMED.get(step["color"], step["color"]),
                         linewidth=0.8, linestyle="--")
    axes.set_xlim(datetime.fromtimestamp(start), datetime.fromtimestamp(end))
    low = min(min(v for v in values if not math.isnan(v)) for _, _, values in found)
    axes.set_ylim(bottom=min(0.0, low))
    if axes.get_ylim()[1] <= 0:
        axes.set_ylim(top=1)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    axes.xaxis.set_major_locator(mdates.SecondLocator(bysecond=range(0, 60, 20 if pixels_w
                                                                           > 400 else 30)))
    axes.yaxis.set_major_formatter(lambda value, _: fmt(value, unit))
    counts = unit in (None, "short") and all(
        v == int(v) for _, _, values in found for v in values if not math.isnan(v))
    axes.yaxis.set_major_locator(MaxNLocator(nbins=4 if height_px > 150 else 2,
                                             integer=counts))
    top = axes.get_ylim()[1]
    if unit == "s" and top > 120:  # whole minutes
        step = next((m for m in (60, 120, 300, 600, 900, 1800) if top / m <= 4), 3600)
        axes.yaxis.set_major_locator(MultipleLocator(step))
    axes.tick_params(labelsize=7.5, colors=MUTED, length=0)
    axes.grid(True, color="#ececec", linewidth=0.8)
    for spine in axes.spines.values():
        spine.set_visible(False)
    if side:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5, frameon=False,
                    handlelength=1.2, borderaxespad=0)
    else:
        axes.legend(loc="upper left", bbox_to_anchor=(-left_px / (width_px - left_px - right_px),
                                                      -18 / (height_px - bottom_px - 4)),
                    ncol=columns, fontsize=7.5, frameon=False, handlelength=1.2,
                    columnspacing=1.2, borderaxespad=0)


def stat(figure: Any, inner: tuple[float, float, float, float],
         found: list[tuple[str, list[float], list[float]]], defaults: dict[str, Any],
         unit: str | None) -> None:
    name, times, values = found[0]
    last = next(v for v in reversed(values) if not math.isnan(v))
    colour = colour_for(last, defaults)
    text = mapped(last, defaults) or fmt(last, unit)
    spark = figure.add_axes((inner[0], inner[1] + inner[3] * 0.04, inner[2], inner[3] * 0.26))
    spark.set_axis_off()
    if len(values) > 1:
        spark.fill_between(times, values, color=colour, alpha=0.18, linewidth=0)
        spark.plot(times, values, color=colour, linewidth=1)
        spark.set_ylim(bottom=min(0.0, min(values)))
        if spark.get_ylim()[1] <= 0:
            spark.set_ylim(top=1)
    size = 26 if inner[3] * figure.get_figheight() * DPI > 150 else 20
    figure.text(inner[0] + inner[2] / 2, inner[1] + inner[3] * 0.66, text, fontsize=size,
                weight="bold", color=colour, ha="center", va="center")
    figure.text(inner[0] + inner[2] / 2, inner[1] + inner[3] * 0.4,
                name, fontsize=8, color=MUTED, ha="center", va="center")


def table(frame: Any, found: list[tuple[str, list[float], list[float]]], pixels_w: float,
          pixels_h: float) -> None:
    rows = sorted(((name, values[-1]) for name, _, values in found), key=lambda r: -r[1])
    line = 17 / pixels_h
    y = 1 - 40 / pixels_h
    frame.text(10 / pixels_w, y, "series", fontsize=8, color=MUTED, weight="bold",
               transform=frame.transAxes)
    frame.text(1 - 10 / pixels_w, y, "in the last hour", fontsize=8, color=MUTED,
               weight="bold", ha="right", transform=frame.transAxes)
    for name, value in rows:
        y -= line
        if y < 8 / pixels_h:
            break
        frame.plot([8 / pixels_w, 1 - 8 / pixels_w], [y + line * 0.8] * 2, color="#ececec",
                   linewidth=0.6, transform=frame.transAxes)
        frame.text(10 / pixels_w, y, name, fontsize=8.5, color=TEXT, transform=frame.transAxes)
        frame.text(1 - 10 / pixels_w, y, f"{value:.0f}", fontsize=8.5, color=TEXT, ha="right",
                   transform=frame.transAxes)


def timeline(figure: Any, inner: tuple[float, float, float, float],
             found: list[tuple[str, list[float], list[float]]], defaults: dict[str, Any],
             start: float, end: float, mdates: Any) -> None:
    width_px = inner[2] * figure.get_figwidth() * DPI
    height_px = inner[3] * figure.get_figheight() * DPI
    left_px = 70
    axes = figure.add_axes((inner[0] + left_px / width_px * inner[2],
                            inner[1] + 20 / height_px * inner[3],
                            inner[2] * (1 - (left_px + 6) / width_px),
                            inner[3] * (1 - 24 / height_px)))
    for row, (_, times, values) in enumerate(found):
        for time_, value in zip(times, values, strict=True):
            if not math.isnan(value):
                axes.broken_barh([(mdates.date2num(datetime.fromtimestamp(time_)),
                                   STEP / 86400)], (row - 0.4, 0.8),
                                 color=colour_for(value, defaults), linewidth=0)
    axes.set_yticks(range(len(found)), [name for name, _, _ in found])
    axes.set_ylim(-0.6, len(found) - 0.4)
    axes.set_xlim(datetime.fromtimestamp(start), datetime.fromtimestamp(end))
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    axes.xaxis.set_major_locator(mdates.SecondLocator(bysecond=range(0, 60, 30)))
    axes.tick_params(labelsize=7.5, colors=MUTED, length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)
    names = [(NAMED["orange"], "half-open"), (NAMED["red"], "open")]
    for index, (colour, label) in enumerate(names):
        axes.text(1 - index * 0.12, 1.02, label, color=colour, fontsize=7.5, ha="right",
                  transform=axes.transAxes)


# -- the command -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-port", type=int, default=6394)
    parser.add_argument("--duration", type=int, default=75, help="seconds of traffic")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    parser.add_argument("--keep-data", type=Path, help="save Prometheus's answers here")
    parser.add_argument("--from-data", type=Path, help="draw from saved answers; run nothing")
    arguments = parser.parse_args()
    if arguments.from_data:
        answers = json.loads(arguments.from_data.read_text())
    else:
        reason = prometheus_unavailable()
        if reason:
            raise SystemExit(reason)
        work = Path(tempfile.mkdtemp(prefix="hookline-dashboard-"))
        try:
            answers = run(arguments, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if arguments.keep_data:
            arguments.keep_data.write_text(json.dumps(answers))
    empty = [panel["title"] for panel in _panels(dashboard()) if panel["type"] != "row"
             and not any(answers["panels"].get(str(panel["id"]), []))]
    if empty:
        print("panels with no data: " + "; ".join(empty))
    draw(answers, arguments.output.resolve())


if __name__ == "__main__":
    main()
