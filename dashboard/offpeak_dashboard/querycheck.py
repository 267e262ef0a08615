"""Run every dashboard query against a real Prometheus and count the series each returns (`offpeak dashboard
check`): the operator's "does every panel get data?"."""

from __future__ import annotations

from dataclasses import dataclass

from offpeak_dashboard.dashboard import build_dashboard
from offpeak_dashboard.grafana import iter_queries, substitute_variables
from offpeak_dashboard.prometheus import instant_query


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
