"""The shipped Grafana dashboard and Prometheus alert rules (``deploy/``), as the tests read
them: the dashboard's queries and the rules' expressions, the series and labels each PromQL
expression names, the series Hookline exports (from the metric definitions and the collectors
themselves), and Debian's ``prometheus`` and ``promtool`` (a server on loopback that a test
starts and stops). Nothing here imports pytest or the test configuration."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "hookline.json"
ALERT_RULES = ROOT / "deploy" / "prometheus" / "hookline-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "hookline-alerts.test.yml"
RUNBOOKS = ROOT / "docs" / "operations" / "alerts.md"
#: Where the runbooks are published (mkdocs.yml's site_url, then the page).
RUNBOOK_BASE = "https://hookline.github.io/hookline/operations/alerts/"

PROMETHEUS = os.environ.get("HOOKLINE_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("HOOKLINE_PROMTOOL", "/usr/bin/promtool")

#: What the dashboard's Grafana variables stand for when a query runs outside Grafana.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$topn": "10"}
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"instance", "job"})


def prometheus_unavailable() -> str | None:
    """Why the Prometheus tests cannot run here, or None when they can."""
    missing = [path for path in (PROMETHEUS, PROMTOOL) if not os.access(path, os.X_OK)]
    if missing:
        return (f"{' and '.join(missing)} not installed: run scripts/ensure-prometheus.sh "
                "(Debian's prometheus package; make test runs it)")
    return None


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60,
                          check=False, cwd=ROOT)


# -- what the dashboard and the rules ask ---------------------------------------------------------

@dataclass(frozen=True)
class Query:
    """One PromQL expression of the dashboard (``where``: its panel) or of a rule."""

    where: str
    expr: str

    @property
    def runnable(self) -> str:
        """The expression with Grafana's variables replaced, as Prometheus takes it."""
        expr = self.expr
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        return expr


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in (board or dashboard())["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(board: dict[str, Any] | None = None) -> list[Query]:
    return [Query(panel["title"], target["expr"]) for panel in panels(board)
            for target in panel.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rule_queries() -> list[Query]:
    return [Query(rule["alert"], rule["expr"]) for rule in alert_rules()]


# -- the series and labels an expression names ----------------------------------------------------

#: Words of PromQL that are not series names.
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and",
                      "or", "unless", "bool", "offset", "inf", "nan"})
STRING = r'"(?:[^"\\]|\\.)*"'
SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)?\s*\{([^{}]*)\}")
MATCHER = re.compile(rf"([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*({STRING})")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")


@dataclass
class Names:
    """What one expression names: each series with its matchers (label, operator, value),
    and the labels it groups or matches by."""

    series: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    grouping: set[str] = field(default_factory=set)


def names(expr: str) -> Names:
    found = Names()
    rest = expr
    for match in SELECTOR.finditer(expr):
        matchers = [(label, op, json.loads(value))
                    for label, op, value in MATCHER.findall(match.group(2))]
        found.series.setdefault(match.group(1) or "", []).extend(matchers)
    rest = SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", rest)
    for match in GROUPING.finditer(rest):
        found.grouping.update(label.strip() for label in match.group(2).split(",")
                              if label.strip())
    rest = GROUPING.sub(" ", rest)
    rest = re.sub(STRING, " ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # ranges and subqueries
    rest = re.sub(r"\boffset\s+\d+[a-z]+", " ", rest)
    for word in IDENTIFIER.findall(rest):
        if word.lower() not in KEYWORDS and not re.fullmatch(r"\d[\w.]*", word):
            found.series.setdefault(word, [])
    found.series.pop("", None)
    return found


# -- what Hookline exports ---------------------------------------------------------------------

@dataclass
class Exported:
    """Sample names Hookline serves, each with its label names, and the label values some
    labels can take (None: any)."""

    labels: dict[str, frozenset[str]] = field(default_factory=dict)
    values: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def add(self, name: str, labels: Iterable[str]) -> None:
        self.labels[name] = self.labels.get(name, frozenset()) | frozenset(labels)


def exported(families: Iterable[Any], definitions: Iterable[Any],
             values: dict[tuple[str, str], frozenset[str]]) -> Exported:
    """The catalog: ``families`` collected from the gauge collectors (each family with
    samples), ``definitions`` the prometheus-client metric objects the engine moves (read
    from their definitions: they have no samples until something happens), and ``values``
    the values a series' label can take ((series, label) -> values: ``outcome``, ...)."""
    from prometheus_client.utils import floatToGoString

    catalog = Exported()
    for family in families:
        for sample in family.samples:
            catalog.add(sample.name, sample.labels)
    for metric in definitions:
        name, labels = metric._name, metric._labelnames
        if metric._type == "counter":
            catalog.add(f"{name}_total", labels)
        elif metric._type == "histogram":
            catalog.add(f"{name}_bucket", (*labels, "le"))
            catalog.add(f"{name}_sum", labels)
            catalog.add(f"{name}_count", labels)
            catalog.values[(f"{name}_bucket", "le")] = frozenset(
                floatToGoString(bound) for bound in metric._upper_bounds)
        else:
            catalog.add(name, labels)
    catalog.values.update(values)
    return catalog


def family(series: str) -> str:
    """The metric a sample name belongs to (``hookline_deliveries_total``: its family
    ``hookline_deliveries``)."""
    return re.sub(r"_(total|bucket|sum|count)$", "", series)


def unknown(query: Query, catalog: Exported) -> list[str]:
    """What ``query`` names that Hookline does not export: series, labels, label values."""
    found = names(query.runnable)
    wrong: list[str] = []
    for series, matchers in found.series.items():
        if series not in catalog.labels:
            wrong.append(f"{query.where}: no series {series}")
            continue
        labels = catalog.labels[series] | TARGET_LABELS
        for label, op, value in matchers:
            if label not in labels:
                wrong.append(f"{query.where}: {series} has no label {label}")
                continue
            allowed = catalog.values.get((series, label))
            if allowed is None:
                continue
            if op in ("=", "!=") and value not in allowed:
                wrong.append(f"{query.where}: {series}{{{label}}} is never {value!r}")
            elif op in ("=~", "!~"):
                wrong += [f"{query.where}: {series}{{{label}}} is never {literal!r}"
                          for literal in value.split("|") if literal not in allowed]
    known = set().union(*(catalog.labels.get(s, frozenset()) for s in found.series))
    wrong += [f"{query.where}: groups by {label}, which none of its series has"
              for label in sorted(found.grouping - known - TARGET_LABELS)]
    return wrong


# -- a Prometheus server on loopback ----------------------------------------------------------

class PrometheusServer:
    """Debian's ``prometheus`` on ``127.0.0.1:port``, scraping ``jobs`` (job name -> targets
    ``host:port``) and evaluating ``rule_files`` every ``interval`` seconds; its data in
    ``directory``. Stopped by :meth:`stop`."""

    def __init__(self, directory: Path, port: int, jobs: dict[str, list[str]],
                 rule_files: Iterable[Path] = (), interval: float = 1.0) -> None:
        self.directory = directory
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = directory / "prometheus.log"
        every = f"{int(interval * 1000)}ms"
        config = {
            "global": {"scrape_interval": every, "scrape_timeout": every,
                       "evaluation_interval": every},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in jobs.items()],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None
        self.port = port

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.directory / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not get ready:\n{self.log()}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """``/api/v1/<path>``'s data; raises RuntimeError with Prometheus's error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            reply = json.loads(exc.read() or b"{}")
        if reply.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {reply.get('errorType')}: {reply.get('error')}")
        return reply["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

