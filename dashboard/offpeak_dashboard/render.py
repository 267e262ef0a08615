"""`offpeak dashboard render`: the dashboard's main panels drawn from a real Prometheus with matplotlib, so a reader
without Grafana sees what an operator sees. Every query is the dashboard's own (its label variables set to All)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offpeak_dashboard.dashboard import ERROR_BY_GPU, EVICTED, HARVESTED, SCATTER, WAITING, build_dashboard
from offpeak_dashboard.grafana import panel_targets, substitute_variables, variable_all_values
from offpeak_dashboard.plot import plot_dashboard
from offpeak_dashboard.prometheus import instant_query, range_query
from offpeak_dashboard.runtimes import JobRuntime, join_prometheus_vectors
from offpeak_dashboard.series import PanelData, PanelKind, Series, series_from_results

GPUS_BY_USE = "GPUs: online, offline, idle"


@dataclass(frozen=True)
class MainPanel:
    """A dashboard panel (by title) and how the figure draws it."""

    title: str
    kind: PanelKind
    unit: str
    reference: float | None = None


MAIN_PANELS = (
    MainPanel(SCATTER, "scatter", "s"),
    MainPanel(ERROR_BY_GPU, "lines", "actual / predicted", reference=1.0),
    MainPanel(WAITING, "stacked", "jobs"),
    MainPanel(HARVESTED, "bars", "GPU-hours"),
    MainPanel(GPUS_BY_USE, "stacked", "GPUs"),
    MainPanel(EVICTED, "stacked", "evictions per interval"),
)


@dataclass(frozen=True)
class Window:
    """The time range drawn: `seconds` up to `end` (Unix seconds), one point every `step` seconds."""

    end: float
    seconds: int
    step: int

    @classmethod
    def ending(cls, end: float, *, seconds: int, points: int = 240) -> Window:
        return cls(end=end, seconds=seconds, step=max(15, seconds // points))


def _sent(target: Mapping[str, Any], window: Window, variables: Mapping[str, str]) -> str:
    return substitute_variables(str(target["expr"]), range_seconds=window.seconds, interval_seconds=window.step,
                                variables=variables)


def _results(url: str, target: Mapping[str, Any], window: Window, variables: Mapping[str, str],
             timeout: float) -> list[dict[str, Any]]:
    expr = _sent(target, window, variables)
    if target.get("instant"):
        return instant_query(url, expr, at=window.end, timeout=timeout)
    return range_query(url, expr, start=window.end - window.seconds, end=window.end, step=window.step,
                       timeout=timeout)


def scatter_runtimes(url: str, *, window: Window | None = None, dashboard: Mapping[str, Any] | None = None,
                     timeout: float = 10.0) -> list[JobRuntime]:
    """Finished jobs' predicted and actual seconds, by the dashboard's scatter queries (one point per job)."""
    dashboard = dashboard or build_dashboard()
    window = window or Window.ending(time.time(), seconds=3600)
    variables = variable_all_values(dashboard)
    predicted, actual = (_results(url, t, window, variables, timeout) for t in panel_targets(dashboard, SCATTER))
    return join_prometheus_vectors(predicted=predicted, actual=actual)


def fetch_panels(url: str, *, window: Window, timeout: float = 10.0) -> list[PanelData]:
    """Run the main panels' queries over `window`."""
    dashboard = build_dashboard()
    variables = variable_all_values(dashboard)
    panels: list[PanelData] = []
    for main in MAIN_PANELS:
        if main.kind == "scatter":
            runtimes = scatter_runtimes(url, window=window, dashboard=dashboard, timeout=timeout)
            panels.append(PanelData(main.title, main.kind, main.unit, runtimes=tuple(runtimes)))
            continue
        series: list[Series] = []
        for target in panel_targets(dashboard, main.title):
            results = _results(url, target, window, variables, timeout)
            series += series_from_results(results, legend=str(target.get("legendFormat", "")))
        panels.append(PanelData(main.title, main.kind, main.unit, series=tuple(series), reference=main.reference))
    return panels


def render_dashboard(url: str, out: Path, *, window: Window, timeout: float = 10.0) -> Sequence[PanelData]:
    """Draw the main panels of `window` from the Prometheus at `url` into the PNG `out`; return what was drawn."""
    panels = fetch_panels(url, window=window, timeout=timeout)
    ending = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(window.end))
    title = f"offpeak dashboard: the last {_duration(window.seconds)} up to {ending}"
    plot_dashboard(panels, out, title=title)
    return panels


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"
