"""What a dashboard panel shows, as plain data (pure): named series of (time, value) points read from Prometheus API
results, and the panels `offpeak dashboard render` draws."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from offpeak_dashboard.grafana import legend_text
from offpeak_dashboard.runtimes import JobRuntime

PanelKind = Literal["scatter", "lines", "stacked", "bars"]


@dataclass(frozen=True)
class Series:
    """One line of a panel: its legend name and its points (Unix seconds, value); NaN points are left out."""

    name: str
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class PanelData:
    """A panel as `render` draws it: lines, stacked areas or bars of `series`, or the scatter of `runtimes`."""

    title: str
    kind: PanelKind
    unit: str = ""
    series: tuple[Series, ...] = ()
    runtimes: tuple[JobRuntime, ...] = ()
    reference: float | None = None  # a horizontal line (1 = a perfect prediction on an error-ratio panel)


def series_from_results(results: Iterable[Mapping[str, Any]], *, legend: str) -> list[Series]:
    """Prometheus API result items (vector `value` or matrix `values`) as named series, sorted by name."""
    out: list[Series] = []
    for item in results:
        points = item.get("values") or ([item["value"]] if item.get("value") else [])
        kept = [(float(t), float(v)) for t, v in points if math.isfinite(float(v))]
        name = legend_text(legend, item.get("metric") or {})
        out.append(Series(name=name, times=tuple(t for t, _ in kept), values=tuple(v for _, v in kept)))
    return sorted(out, key=lambda s: s.name)

