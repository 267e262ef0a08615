"""Finding metric names in PromQL and in prometheus-client code."""

from __future__ import annotations

from pathlib import Path

from offpeak_dashboard.metricnames import (
    definitions_in_source,
    definitions_in_tree,
    exported_series,
    promql_metric_names,
    undefined_names,
)


def test_promql_names_ignore_label_values_functions_and_strings() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le) (rate(offpeak_a_seconds_bucket{kind="offpeak_not_a_metric"}[5m])))'
        " / on() group_left offpeak_b"
    )
    assert promql_metric_names(expr) == {"offpeak_a_seconds_bucket", "offpeak_b"}


def test_definitions_resolve_constants_and_namespace() -> None:
    source = '''
from prometheus_client import Counter, Gauge, Histogram
import prometheus_client as pc
EVICTIONS = "offpeak_evictions_total"
c = Counter(EVICTIONS, "evictions", ["reason"])
h = pc.Histogram("decision_seconds", "latency", namespace="offpeak", subsystem="extender")
g = Gauge(name="offpeak_jobs", documentation="jobs")
other = Gauge("node_cpu", "not ours")
'''
    found = {(d.name, d.kind) for d in definitions_in_source(source)}
    assert found == {
        ("offpeak_evictions_total", "Counter"),
        ("offpeak_extender_decision_seconds", "Histogram"),
        ("offpeak_jobs", "Gauge"),
    }
    series = exported_series(definitions_in_source(source))
    assert "offpeak_evictions_total" in series
    assert "offpeak_evictions_total_total" not in series
    assert {"offpeak_extender_decision_seconds_bucket", "offpeak_extender_decision_seconds_count"} <= series
    assert "offpeak_extender_decision_seconds" not in series  # a histogram has no bare series


def test_undefined_names_reports_per_panel(tmp_path: Path) -> None:
    pkg = tmp_path / "extender"
    pkg.mkdir()
    (pkg / "metrics.py").write_text('from prometheus_client import Counter\nC = Counter("offpeak_x", "x")\n')
    (pkg / "broken.py").write_text("def (:\n")  # half-written files of other engineers are skipped
    tests = pkg / "tests"
    tests.mkdir()
    (tests / "fake.py").write_text('from prometheus_client import Gauge\nG = Gauge("offpeak_y", "y")\n')
    series = exported_series(definitions_in_tree([pkg]))
    missing = undefined_names([("A", "rate(offpeak_x_total[1m])"), ("B", "offpeak_y + offpeak_x_total")], series)
    assert missing == {"B": {"offpeak_y"}}
