"""Run every dashboard query against a real Prometheus and count the series each returns (`offpeak dashboard
check`): the operator's "does every panel get data?"."""

from __future__ import annotations

from dataclasses import dataclass

from offpeak.errors import UserError
from offpeak_dashboard.dashboard import build_dashboard
from offpeak_dashboard.grafana import iter_queries, substitute_variables, variable_all_values, variable_queries
from offpeak_dashboard.prometheus import PrometheusUnavailable, instant_query


@dataclass(frozen=True)
class QueryResult:
    panel: str  # its title, or "variable $name"
    expr: str  # as sent: Grafana's variables substituted, the label variables set to "All"
    series: int
    error: str = ""


def run_queries(
    prometheus_url: str, *, range_seconds: int = 600, interval_seconds: int = 15, timeout: float = 10.0
) -> list[QueryResult]:
    """Run every dashboard query at `now` against a real Prometheus, and one per label variable (the values it
    would offer); count the series each returns.

    A query Prometheus rejects is reported with its panel; a Prometheus that cannot be used at all raises
    `PrometheusUnavailable` at the first query (one error, not one per panel).
    """
    dashboard = build_dashboard()
    variables = variable_all_values(dashboard)
    results: list[QueryResult] = []
    variable_checks = [(f"variable ${name}", expr) for name, expr in variable_queries(dashboard)]
    for panel, expr in variable_checks + iter_queries(dashboard):
        sent = substitute_variables(expr, range_seconds=range_seconds, interval_seconds=interval_seconds,
                                    variables=variables)
        try:
            vector = instant_query(prometheus_url, sent, timeout=timeout)
        except PrometheusUnavailable:
            raise
        except UserError as e:
            results.append(QueryResult(panel=panel, expr=sent, series=0, error=str(e)))
            continue
        results.append(QueryResult(panel=panel, expr=sent, series=len(vector)))
    return results
