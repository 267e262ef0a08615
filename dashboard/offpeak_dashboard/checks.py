"""The dashboard's consistency checks, shared by `offpeak dashboard check`, the unit tests and the e2e test."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offpeak_dashboard.dashboard import build_dashboard, render
from offpeak_dashboard.grafana import iter_queries, substitute_variables
from offpeak_dashboard.metricnames import definitions_in_tree, exported_series, undefined_names
from offpeak_dashboard.prometheus import instant_query

# Folders whose code exports offpeak metrics (docs/contracts.md); e2e holds the stand-in node exporter.
METRIC_SOURCE_FOLDERS = ("operator", "predictor", "extender", "agent", "e2e", "simulator")
DASHBOARD_FILE = Path("charts/offpeak/files/dashboard.json")


def repo_root() -> Path:
    """The source checkout this package runs from (editable install: dashboard/offpeak_dashboard/ → repo)."""
    return Path(__file__).resolve().parents[2]


def committed_file_diff(path: Path) -> str:
    """Unified diff between the committed dashboard and the generated one; empty when they match."""
    expected = render(build_dashboard())
    actual = path.read_text(encoding="utf-8") if path.exists() else ""
    if actual == expected:
        return ""
    return "".join(
        difflib.unified_diff(
            actual.splitlines(keepends=True), expected.splitlines(keepends=True), str(path), "generated", n=1
        )
    )


def undefined_metrics(root: Path, dashboard: dict[str, Any] | None = None) -> dict[str, set[str]]:
    """{panel: metric names its queries use that no offpeak component defines}."""
    definitions = definitions_in_tree(root / folder for folder in METRIC_SOURCE_FOLDERS if (root / folder).is_dir())
    return undefined_names(iter_queries(dashboard or build_dashboard()), exported_series(definitions))


@dataclass(frozen=True)
class QueryResult:
    panel: str
    expr: str  # as sent, Grafana variables substituted
    series: int
    error: str = ""


def run_queries(
    prometheus_url: str, *, range_seconds: int = 600, interval_seconds: int = 15, timeout: float = 10.0
) -> list[QueryResult]:
    """Run every dashboard query at `now` against a real Prometheus; count the series each returns."""
    from offpeak.errors import UserError

    results: list[QueryResult] = []
    for panel, expr in iter_queries(build_dashboard()):
        sent = substitute_variables(expr, range_seconds=range_seconds, interval_seconds=interval_seconds)
        try:
            vector = instant_query(prometheus_url, sent, timeout=timeout)
        except UserError as e:
            results.append(QueryResult(panel=panel, expr=sent, series=0, error=str(e)))
            continue
        results.append(QueryResult(panel=panel, expr=sent, series=len(vector)))
    return results
