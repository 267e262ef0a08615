"""A small typed model of the parts of Grafana's dashboard JSON (schema version 39) that offpeak uses.

Why not a library: the dashboard has a dozen panels of four kinds; a few dataclasses keep the generated JSON
deterministic and reviewable without adding a dependency to every offpeak image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 39
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24

PanelKind = Literal["timeseries", "table", "heatmap", "stat", "bargauge"]


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False  # Grafana's "table" format: one row per series, labels as columns
    heatmap: bool = False  # Grafana's "heatmap" format: buckets by `le`


@dataclass(frozen=True)
class Panel:
    """A panel; `width`/`height` are in Grafana grid units (24 columns)."""

    title: str
    kind: PanelKind
    queries: tuple[Query, ...]
    description: str = ""
    unit: str = "short"
    width: int = 12
    height: int = 8
    stacked: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    transformations: tuple[dict[str, Any], ...] = ()
    overrides: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Row:
    """A titled group of panels laid out left to right, wrapping at 24 columns."""

    title: str
    panels: tuple[Panel, ...]


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


def _target(query: Query, index: int) -> dict[str, Any]:
    target: dict[str, Any] = {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "range": not query.instant,
        "instant": query.instant,
        "refId": _ref_id(index),
    }
    if query.table:
        target["format"] = "table"
    elif query.heatmap:
        target["format"] = "heatmap"
    else:
        target["format"] = "time_series"
    return target


def _field_config(panel: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if panel.stacked else 0,
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
            "showPoints": "never",
        }
    return {"defaults": defaults, "overrides": list(panel.overrides)}


def panel_json(panel: Panel, *, panel_id: int, x: int, y: int) -> dict[str, Any]:
    """Render one panel at grid position (x, y)."""
    options: dict[str, Any] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
    if panel.kind == "timeseries":
        options["tooltip"] = {"mode": "multi", "sort": "desc"}
    options.update(panel.options)
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": _field_config(panel),
        "options": options,
        "targets": [_target(q, i) for i, q in enumerate(panel.queries)],
        "transformations": list(panel.transformations),
    }


def layout(rows: tuple[Row, ...]) -> list[dict[str, Any]]:
    """Place rows and their panels on Grafana's grid, numbering panels from 1 in reading order."""
    out: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in rows:
        out.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                y += row_height
                x, row_height = 0, 0
            out.append(panel_json(panel, panel_id=next_id, x=x, y=y))
            next_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return out


def dashboard_json(
    *, uid: str, title: str, description: str, tags: tuple[str, ...], rows: tuple[Row, ...], refresh: str = "30s"
) -> dict[str, Any]:
    """The whole dashboard, with a `datasource` variable so it works with any Prometheus data source."""
    return {
        "annotations": {"list": []},
        "description": description,
        "editable": True,
        "graphTooltip": 1,
        "links": [],
        "panels": layout(rows),
        "refresh": refresh,
        "schemaVersion": SCHEMA_VERSION,
        "tags": list(tags),
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                }
            ]
        },
        "time": {"from": "now-24h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
    }


def iter_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) for every target in a rendered dashboard."""
    found: list[tuple[str, str]] = []
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            if "expr" in target:
                found.append((panel.get("title", ""), target["expr"]))
    return found


def substitute_variables(expr: str, *, range_seconds: int, interval_seconds: int) -> str:
    """Replace Grafana's built-in time variables so a dashboard query can be sent to Prometheus directly."""
    replacements = (
        ("$__range_s", str(range_seconds)),
        ("$__range_ms", str(range_seconds * 1000)),
        ("$__range", f"{range_seconds}s"),
        ("$__rate_interval", f"{max(4 * interval_seconds, 60)}s"),
        ("$__interval_ms", str(interval_seconds * 1000)),
        ("$__interval", f"{interval_seconds}s"),
    )
    for variable, value in replacements:  # longest names first, so `$__range` does not eat `$__range_s`
        expr = expr.replace(variable, value)
    return expr
