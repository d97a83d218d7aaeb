"""The shipped dashboard (deploy/grafana/hookline.json) and alert rules
(deploy/prometheus/hookline-alerts.yml) ask only for what Hookline exports: every series, label
and label value their PromQL names is checked against the engine's metric definitions
(hookline.core.metrics) and what the collectors serve from a real Redis (the gauges, the
worker registry's, the outbox's). A renamed metric or label fails here. And the dashboard
shows every metric Hookline exports."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from hookline.core import metrics
from hookline.outbox import status
from hookline.outbox.status import OutboxCollector, OutboxDepth
from hookline.store.dead_letter_queue import REASONS
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule
from hookline.transport.gauges import RedisStateCollector
from tests.support.prometheus import (
    Exported,
    Query,
    dashboard_queries,
    exported,
    family,
    names,
    rule_queries,
    unknown,
)


@pytest.fixture
def catalog(quiet_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Exported:
    """What Hookline serves, with state behind every gauge: a registered endpoint with a
    scheduled retry, an ordered endpoint, and the outbox on (its depth read as 3 rows)."""
    registry = EndpointRegistry(quiet_redis)
    registry.add("dash-ep", "http://127.0.0.1:9/hook")
    registry.add("dash-ordered", "http://127.0.0.1:9/hook", ordered=True)
    RetrySchedule(quiet_redis).park(endpoint_id="dash-ep", event_id="e1", countdown=600,
                                    message="{}")
    monkeypatch.setattr(status, "outbox_depth",
                        lambda config=None: OutboxDepth(3, 12.0, "sqlite:///outbox.db"))
    families = [*RedisStateCollector(quiet_redis, quiet_redis).collect(),
                *OutboxCollector().collect()]
    empty = [item.name for item in families if not item.samples]
    assert empty == [], f"collected with no sample (give them state above): {empty}"
    definitions = [item for item in vars(metrics).values()
                   if isinstance(item, MetricWrapperBase)]
    values = {
        ("hookline_deliveries_total", "outcome"): frozenset(metrics.FINAL_OUTCOMES),
        ("hookline_deliveries_total", "reason"): frozenset({"", *REASONS}),
        ("hookline_responses_total", "status_class"): frozenset(
            metrics.status_class(status) for status in (200, 300, 400, 500, None)),
        ("hookline_queue_depth", "queue"): frozenset(metrics.QUEUES),
    }
    return exported(families, definitions, values)


def test_every_series_label_and_value_the_dashboard_queries_is_exported(catalog) -> None:
    queries = dashboard_queries()
    assert len(queries) > 30
    wrong = [problem for query in queries for problem in unknown(query, catalog)]
    assert wrong == [], "the dashboard asks for what Hookline does not export:\n  " + \
        "\n  ".join(wrong)


def test_every_series_label_and_value_the_alert_rules_read_is_exported(catalog) -> None:
    wrong = [problem for query in rule_queries() for problem in unknown(query, catalog)]
    assert wrong == [], "the alert rules read what Hookline does not export:\n  " + \
        "\n  ".join(wrong)


def test_the_dashboard_shows_every_metric_hookline_exports(catalog) -> None:
    shown = {family(series) for query in dashboard_queries()
             for series in names(query.runnable).series}
    missing = sorted({family(series) for series in catalog.labels} - shown)
    assert missing == [], f"metrics the dashboard does not show: {missing}"


@pytest.mark.parametrize(("expr", "problem"), [
    # A metric renamed (or its _total forgotten), a label renamed, a value that never comes,
    # a bucket bound written as Prometheus never stores it, a grouping label nobody has.
    ("sum(rate(hookline_deliveries[5m]))", "no series hookline_deliveries"),
    ('sum(hookline_breaker_state{endpoint_id="x"})', "has no label endpoint_id"),
    ('sum(rate(hookline_deliveries_total{outcome="failed"}[5m]))', "is never 'failed'"),
    ('rate(hookline_deliveries_total{reason=~"rejected|gone"}[5m])', "is never 'gone'"),
    ('rate(hookline_delivery_lag_seconds_bucket{le="300"}[5m])', "is never '300'"),
    ("sum by (status) (rate(hookline_responses_total[5m]))", "groups by status"),
])
def test_the_check_finds_a_renamed_metric_label_or_value(catalog, expr: str,
                                                         problem: str) -> None:
    found = unknown(Query("a panel", expr), catalog)
    assert len(found) == 1 and problem in found[0], found
