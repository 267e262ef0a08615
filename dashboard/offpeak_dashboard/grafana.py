"""Grafana dashboard JSON built with grafana-foundation-sdk's typed builders (Grafana 10.1 models), and what reads
it back: each panel's queries with Grafana's variables substituted, and the library's own check of a dashboard.

The helpers here fix offpeak's house look (legend, tooltip, data source variable, query ids); `dashboard.py` says
which panels show what.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import bargauge, heatmap, table, timeseries, xychart
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import prometheus as prom_builders
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import heatmap as heatmap_models
from grafana_foundation_sdk.models import prometheus as prom_models
from grafana_foundation_sdk.models import xychart as xy_models

DATASOURCE_VARIABLE = "datasource"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${%s}" % DATASOURCE_VARIABLE)
ALL = ".*"  # the value of a label variable set to "All": every query filters with `label=~"$name"`

PanelBuilder = Builder[models.Panel]


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    format: prom_models.PromQueryFormat = prom_models.PromQueryFormat.TIME_SERIES


@dataclass(frozen=True)
class Row:
    """A titled group of panels, laid out left to right and wrapping at 24 columns."""

    title: str
    panels: tuple[PanelBuilder, ...]


def _targets(queries: Sequence[Query]) -> list[prom_builders.Dataquery]:
    out = []
    for i, q in enumerate(queries):
        target = (prom_builders.Dataquery().ref_id(chr(ord("A") + i)).datasource(DATASOURCE).expr(q.expr)
                  .editor_mode(prom_models.QueryEditorMode.CODE).legend_format(q.legend or "__auto").format(q.format))
        out.append(target.instant() if q.instant else target.range())
    return out


def _frame(builder: Any, title: str, description: str, queries: Sequence[Query], *, unit: str, width: int,
           height: int) -> Any:
    """What every panel has: title, description, the data source variable, its queries, unit and size."""
    return (builder.title(title).description(description).datasource(DATASOURCE).targets(_targets(queries))
            .unit(unit).span(width).height(height))


def _legend() -> common_builders.VizLegendOptions:
    return (common_builders.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM).show_legend(True))


def _transformations(*configs: tuple[str, Mapping[str, Any]]) -> list[models.DataTransformerConfig]:
    return [models.DataTransformerConfig(id_val=name, options=dict(options)) for name, options in configs]


def timeseries_panel(title: str, *queries: Query, description: str, unit: str = "short", stacked: bool = False,
                     width: int = 12, height: int = 8) -> timeseries.Panel:
    """Lines over time (stacked areas when `stacked`)."""
    stacking = common.StackingMode.NORMAL if stacked else common.StackingMode.NONE
    return (_frame(timeseries.Panel(), title, description, queries, unit=unit, width=width, height=height)
            .legend(_legend())
            .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                     .sort(common.SortOrder.DESCENDING))
            .draw_style(common.GraphDrawStyle.LINE).line_width(1).fill_opacity(20 if stacked else 0)
            .stacking(common_builders.StackingConfig().mode(stacking).group("A"))
            .show_points(common.VisibilityMode.NEVER))


def table_panel(title: str, *queries: Query, description: str, unit: str = "short", width: int = 12,
                height: int = 8, transformations: Sequence[tuple[str, Mapping[str, Any]]] = (),
                decimals_of: Mapping[str, int] | None = None) -> table.Panel:
    """One row per series (instant table queries); `decimals_of` shows those columns unitless."""
    panel = (_frame(table.Panel(), title, description, queries, unit=unit, width=width, height=height)
             .show_header(True).cell_height(common.TableCellHeight.SM)
             .transformations(_transformations(*transformations)))
    for column, decimals in (decimals_of or {}).items():
        panel = panel.override_by_name(column, [models.DynamicConfigValue(id_val="unit", value="none"),
                                                models.DynamicConfigValue(id_val="decimals", value=decimals)])
    return panel


def heatmap_panel(title: str, query: Query, *, description: str, width: int = 12, height: int = 8) -> heatmap.Panel:
    """Prometheus histogram buckets (format heatmap) over time."""
    return (_frame(heatmap.Panel(), title, description, (query,), unit="none", width=width, height=height)
            .calculate(False).cell_gap(1)
            .y_axis(heatmap.YAxisConfig().axis_placement(common.AxisPlacement.LEFT).unit("none"))
            .color(heatmap.HeatmapColorOptions().mode(heatmap_models.HeatmapColorMode.SCHEME).scheme("Oranges")
                   .steps(64))
            .show_tooltip().show_y_histogram())


def bargauge_panel(title: str, *queries: Query, description: str, unit: str, width: int = 12,
                   height: int = 8) -> bargauge.Panel:
    """Horizontal bars, one per query (instant values)."""
    return (_frame(bargauge.Panel(), title, description, queries, unit=unit, width=width, height=height)
            .orientation(common.VizOrientation.HORIZONTAL).display_mode(common.BarGaugeDisplayMode.BASIC)
            .show_unfilled(True))


def scatter_panel(title: str, *, x: Query, y: Query, x_name: str, y_name: str, identity_name: str, description: str,
                  unit: str, width: int = 12, height: int = 8) -> xychart.Panel:
    """One point per series of `x` and `y` (instant table queries joined on their labels), on log axes, with the
    identity line y = x drawn through the points' own x values."""
    return (_frame(xychart.Panel(), title, description, (x, y), unit=unit, width=width, height=height)
            .transformations(_transformations(
                ("merge", {}),
                ("organize", {"excludeByName": {"Time": True},
                              "renameByName": {"Value #A": x_name, "Value #B": y_name}}),
                # y = x as a field of its own, so the chart can draw it as a line (a constant operand keeps it x)
                ("calculateField", {"alias": identity_name, "mode": "binary", "replaceFields": False,
                                    "binary": {"left": x_name, "operator": "*", "right": "1"}}),
                ("sortBy", {"sort": [{"field": x_name}]}),
            ))
            .series_mapping(xy_models.SeriesMapping.MANUAL)
            .series([
                xychart.ScatterSeriesConfig().name("jobs").x(x_name).y(y_name).show(xy_models.ScatterShow.POINTS)
                .point_size(common_builders.ScaleDimensionConfig().fixed(6).min(1).max(20)),
                xychart.ScatterSeriesConfig().name(identity_name).x(x_name).y(identity_name)
                .show(xy_models.ScatterShow.LINES).line_width(1),
            ])
            .legend(_legend())
            .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.SINGLE)
                     .sort(common.SortOrder.NONE))
            .scale_distribution(common_builders.ScaleDistributionConfig().type(common.ScaleDistribution.LOG).log(10))
            .override_by_name(x_name, [models.DynamicConfigValue(id_val="custom.axisLabel", value=x_name)])
            .override_by_name(y_name, [models.DynamicConfigValue(id_val="custom.axisLabel", value=y_name)]))


def datasource_variable() -> builders.DatasourceVariable:
    """Pick any Prometheus data source: every target uses `${datasource}`."""
    return builders.DatasourceVariable(DATASOURCE_VARIABLE).label("Prometheus").type("prometheus")


def label_variable(name: str, *, label: str, query: str) -> builders.QueryVariable:
    """A multi-select of a label's values (`label_values(...)`), "All" meaning the regex `.*`."""
    return (builders.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(models.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(ALL))


def dashboard_json(*, uid: str, title: str, description: str, tags: Sequence[str], rows: Sequence[Row],
                   variables: Sequence[Builder[models.VariableModel]], refresh: str = "30s") -> dict[str, Any]:
    """The whole dashboard as a JSON object; panels numbered from 1 in reading order."""
    board = (builders.Dashboard(title).uid(uid).description(description).tags(list(tags)).editable()
             .tooltip(models.DashboardCursorSync.CROSSHAIR).time("now-24h", "now").timezone("browser")
             .refresh(refresh).version(1).variables(list(variables)))
    for row in rows:
        board = board.with_row(builders.Row(row.title))
        for panel in row.panels:
            board = board.with_panel(panel)
    model = board.build()
    for number, built in enumerate(model.panels or [], start=1):
        built.id_val = number
    return _encode(model)


def _encode(model: models.Dashboard) -> dict[str, Any]:
    return json.loads(json.dumps(model, cls=JSONEncoder))  # type: ignore[no-any-return]


def library_problems(dashboard: Mapping[str, Any]) -> list[str]:
    """What grafana-foundation-sdk's typed models do not accept in `dashboard`: every key they drop or value they
    change when the JSON is read back into them (a misspelt option, an option of another panel type, a wrong
    type). Keys the models only add (their defaults) are fine."""
    register_default_plugins()
    again = _encode(models.Dashboard.from_json(json.loads(json.dumps(dashboard))))
    return list(_lost(dashboard, again, ""))


def _lost(before: Any, after: Any, path: str) -> Iterable[str]:
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key, value in before.items():
            if key not in after:
                yield f"{path}/{key}: not in the Grafana model"
            else:
                yield from _lost(value, after[key], f"{path}/{key}")
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after)):
            yield from _lost(b, a, f"{path}/{i}")
    elif before != after:
        yield f"{path}: {before!r} read back as {after!r}"


def iter_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) for every target in a rendered dashboard."""
    return [(panel.get("title", ""), target["expr"]) for panel in dashboard.get("panels", [])
            for target in panel.get("targets", []) if "expr" in target]


def panel_targets(dashboard: Mapping[str, Any], title: str) -> list[dict[str, Any]]:
    """The targets of the panel called `title` (KeyError when the dashboard has none)."""
    for panel in dashboard.get("panels", []):
        if panel.get("title") == title:
            return list(panel.get("targets", []))
    raise KeyError(f"the dashboard has no panel {title!r}")


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*\)$")


def variable_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(variable name, PromQL) for each `label_values(selector, label)` variable: `count by (label) (selector)`,
    whose series are the values the variable offers."""
    found = []
    for variable in dashboard.get("templating", {}).get("list", []):
        match = _LABEL_VALUES.match(str(variable.get("query", ""))) if variable.get("type") == "query" else None
        if match:
            found.append((variable["name"], f"count by ({match['label']}) ({match['selector']})"))
    return found


def variable_all_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """{variable name: the value its "All" option stands for}, for the dashboard's label variables."""
    return {v["name"]: v["allValue"] for v in dashboard.get("templating", {}).get("list", []) if "allValue" in v}


def substitute_variables(expr: str, *, range_seconds: int, interval_seconds: int,
                         variables: Mapping[str, str] | None = None) -> str:
    """Replace Grafana's built-in time variables, and the given template variables (`$name` or `${name}`), so a
    dashboard query can be sent to Prometheus directly."""
    replacements = [
        ("$__range_s", str(range_seconds)),
        ("$__range_ms", str(range_seconds * 1000)),
        ("$__range", f"{range_seconds}s"),
        ("$__rate_interval", f"{max(4 * interval_seconds, 60)}s"),
        ("$__interval_ms", str(interval_seconds * 1000)),
        ("$__interval", f"{interval_seconds}s"),
    ]
    for name, value in sorted((variables or {}).items(), key=lambda item: -len(item[0])):
        replacements += [("${%s}" % name, value), (f"${name}", value)]
    for variable, value in replacements:  # longest names first, so `$__range` does not eat `$__range_s`
        expr = expr.replace(variable, value)
    return expr


_LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def legend_text(legend: str, labels: Mapping[str, str]) -> str:
    """A series' name as Grafana's legend format `{{label}}` gives it (`__auto`/empty: its labels)."""
    if legend in ("", "__auto"):
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return _LEGEND_LABEL.sub(lambda m: labels.get(m.group(1), ""), legend)
