"""The shipped alert rules and dashboard, as files: ``promtool check rules`` passes,
``promtool test rules`` runs hookline-alerts.test.yml, in which every alert fires on a synthetic
series and stays quiet on a healthy one; every rule links its runbook, a section of
docs/operations/alerts.md; the dashboard picks its Prometheus through a variable. (Whether the
series exist: tests/store/test_dashboard_metrics.py; a real Prometheus:
tests/integration/test_prometheus.py.)"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
import yaml

from tests.support.prometheus import (
    ALERT_RULES,
    RULE_TESTS,
    RUNBOOK_BASE,
    RUNBOOKS,
    alert_rules,
    dashboard,
    names,
    panels,
    prometheus_unavailable,
    promtool,
)

#: What the rules cover, each by one alert or more.
REQUIRED_ALERTS = {"HooklineNoLiveWorker", "HooklineRetryScheduleLagGrowing",
                   "HooklineDeadLettersRising", "HooklineBreakerOpen",
                   "HooklineEndpointDisabled", "HooklineOutboxBehind"}

needs_promtool = pytest.mark.skipif(prometheus_unavailable() is not None,
                                    reason=prometheus_unavailable() or "")


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", str(ALERT_RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_test_where_it_fires_and_one_where_it_stays_quiet() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        expected = defaultdict(list)
        for check in case.get("alert_rule_test", []):
            expected[check["alertname"]].append(bool(check["exp_alerts"]))
        for alert, firing in expected.items():
            (fires if any(firing) else quiet).add(alert)
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts >= REQUIRED_ALERTS
    assert alerts - fires == set(), "alerts no test sees firing"
    assert alerts - quiet == set(), "alerts no test sees quiet on a healthy series"


def _slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (the toc extension's slugify)."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def test_every_rule_links_its_runbook_section() -> None:
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.M)
    sections = {_slug(heading): heading for heading in headings}
    for rule in alert_rules():
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOK_BASE}#{_slug(rule['alert'])}", rule["alert"]
        assert _slug(rule["alert"]) in sections, f"no runbook section for {rule['alert']}"
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    runbook_alerts = {heading for heading in headings if heading.startswith("Hookline")}
    assert runbook_alerts == {rule["alert"] for rule in alert_rules()}


def test_each_runbook_says_what_it_means_what_to_check_and_how_to_fix_it() -> None:
    text = RUNBOOKS.read_text()
    for rule in alert_rules():
        section = text.split(f"## {rule['alert']}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**What it means.**", "**First checks.**", "**Fixes.**"):
            assert part in section, f"{rule['alert']}: no {part}"


def test_the_dashboard_picks_its_prometheus_through_a_variable() -> None:
    board = dashboard()
    [variable] = [v for v in board["templating"]["list"] if v["name"] == "datasource"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    sources = [panel.get("datasource") for panel in panels(board) if panel["type"] != "row"]
    sources += [target.get("datasource") for panel in panels(board)
                for target in panel.get("targets", [])]
    assert sources and all(source == {"type": "prometheus", "uid": "${datasource}"}
                           for source in sources)
    assert "__inputs" not in board  # nothing to map on import


def test_the_dashboard_covers_what_an_on_call_engineer_asks() -> None:
    rows = {panel["title"] for panel in dashboard()["panels"] if panel["type"] == "row"}
    assert rows == {"Deliveries and outcomes", "Latency by endpoint", "Retry schedule",
                    "Dead letters", "Breakers and endpoint state", "In flight against caps",
                    "Workers", "Ordered lines", "Outbox (HOOKLINE_OUTBOX=on)"}
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))


def test_promql_names_are_read_from_selectors_functions_and_groupings() -> None:
    found = names('60 * sum by (endpoint, reason) (rate(hookline_deliveries_total'
                  '{outcome="dead_lettered",reason=~"a|b"}[5m])) / ignoring(reason) '
                  'hookline_responses_total offset 10m or vector(0) > bool 1e3')
    assert found.series == {
        "hookline_deliveries_total": [("outcome", "=", "dead_lettered"),
                                      ("reason", "=~", "a|b")],
        "hookline_responses_total": []}
    assert found.grouping == {"endpoint", "reason"}
