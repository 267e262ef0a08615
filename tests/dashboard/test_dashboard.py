"""The generated dashboard: committed file up to date, accepted by grafana-foundation-sdk's typed Grafana models,
panels and variables present, metric names real."""

from __future__ import annotations

import copy
import json
from typing import Any

import check_dashboard as checks
from offpeak_dashboard.dashboard import build_dashboard, render
from offpeak_dashboard.grafana import (
    iter_queries,
    library_problems,
    substitute_variables,
    variable_all_values,
    variable_queries,
)


def test_committed_dashboard_equals_generated() -> None:
    path = checks.repo_root() / checks.DASHBOARD_FILE
    assert path.exists(), f"run: offpeak dashboard generate --out {checks.DASHBOARD_FILE}"
    assert checks.committed_file_diff(path) == "", f"{path} is stale; run: offpeak dashboard generate --out {path}"


def test_generation_is_deterministic_and_json() -> None:
    first, second = render(build_dashboard()), render(build_dashboard())
    assert first == second
    assert json.loads(first)["uid"] == "offpeak-overview"


def test_every_metric_in_a_query_is_defined_in_offpeak_code() -> None:
    missing = checks.undefined_metrics(checks.repo_root())
    assert missing == {}, f"dashboard queries use metrics that no component exports: {missing}"


def test_required_panels_and_metrics_are_present() -> None:
    dashboard = build_dashboard()
    exprs = " ".join(expr for _, expr in iter_queries(dashboard))
    for metric in (
        "offpeak_job_predicted_seconds",
        "offpeak_job_actual_seconds",
        "offpeak_prediction_error_ratio_bucket",
        "offpeak_jobs",
        "offpeak_jobs_waiting",
        "offpeak_extender_filtered_out_total",
        "offpeak_evictions_total",
        "offpeak_evicted_gpu_seconds_lost_total",
        "offpeak_predictor_request_seconds_bucket",
        "offpeak_predictor_http_request_seconds_bucket",
        "offpeak_extender_decision_seconds_bucket",
        "offpeak_node_gpus",
        "offpeak_node_online_gpus",
    ):
        assert metric in exprs, metric
    kinds = {panel["type"] for panel in dashboard["panels"]}
    assert {"xychart", "table", "heatmap", "timeseries", "bargauge", "row"} <= kinds


def _panel(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
    return panel


def test_predicted_vs_actual_is_an_xy_chart_with_the_identity_line() -> None:
    panel = _panel(build_dashboard(), "Predicted vs actual runtime")
    assert panel["type"] == "xychart" and panel["options"]["seriesMapping"] == "manual"
    points, identity = panel["options"]["series"]
    assert (points["x"], points["y"], points["show"]) == ("predicted", "actual", "points")
    # the identity series is predicted × 1, drawn as a line over the same x: y = x
    (calc,) = [t["options"] for t in panel["transformations"] if t["id"] == "calculateField"]
    assert calc["alias"] == identity["y"] and calc["binary"] == {"left": "predicted", "operator": "*", "right": "1"}
    assert (identity["x"], identity["show"]) == ("predicted", "lines")
    assert panel["fieldConfig"]["defaults"]["custom"]["scaleDistribution"] == {"type": "log", "log": 10}
    predicted, actual = (t["expr"] for t in panel["targets"])
    assert "offpeak_job_predicted_seconds" in predicted and "offpeak_job_actual_seconds" in actual


def test_variables_for_datasource_namespace_gpu_type_and_model_family_filter_the_queries() -> None:
    dashboard = build_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "gpu_type", "model_family"]
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name, label in (("namespace", "job_namespace"), ("gpu_type", "gpu_type"), ("model_family", "model_family")):
        variable = variables[name]
        assert variable["type"] == "query" and variable["includeAll"] and variable["allValue"] == ".*"
        assert f", {label})" in variable["query"], variable["query"]  # label_values(metric, label)
        assert dict(variable_queries(dashboard))[name].startswith(f"count by ({label}) (")  # what `check` runs
        filtered = [title for title, expr in iter_queries(dashboard) if f'{label}=~"${name}"' in expr]
        assert "Predicted vs actual runtime" in filtered, name
    per_gpu = _panel(dashboard, "Prediction error by GPU type over time")["targets"][0]["expr"]
    per_family = _panel(dashboard, "Prediction error by model family over time")["targets"][0]["expr"]
    assert "sum by (le, gpu_type)" in per_gpu and "sum by (le, model_family)" in per_family  # not `by (le)`
    waiting = _panel(dashboard, "Jobs waiting, and why")["targets"][0]["expr"]
    assert waiting.startswith("sum by (reason) (offpeak_jobs_waiting{") and '"$namespace"' in waiting


def test_the_grafana_models_accept_the_dashboard() -> None:
    assert library_problems(build_dashboard()) == []


def test_the_grafana_models_catch_a_misspelt_or_misplaced_option() -> None:
    dashboard = build_dashboard()
    broken = copy.deepcopy(dashboard)
    scatter = _panel(broken, "Predicted vs actual runtime")
    scatter["options"]["seriesMaping"] = "manual"  # misspelt
    scatter["fieldConfig"]["defaults"]["custom"]["drawStyle"] = "line"  # a time series option on an XY chart
    assert sorted(library_problems(broken)) == [
        "/panels/1/fieldConfig/defaults/custom/drawStyle: not in the Grafana model",
        "/panels/1/options/seriesMaping: not in the Grafana model",
    ]


def test_panels_do_not_overlap_and_ids_are_unique() -> None:
    panels = build_dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_every_target_uses_the_datasource_variable() -> None:
    dashboard = build_dashboard()
    assert dashboard["templating"]["list"][0]["name"] == "datasource"
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


def test_substitute_variables_does_not_confuse_range_and_range_s() -> None:
    expr = "sum(avg_over_time(x[$__range])) * $__range_s / 3600 + rate(y[$__rate_interval])"
    assert substitute_variables(expr, range_seconds=600, interval_seconds=15) == (
        "sum(avg_over_time(x[600s])) * 600 / 3600 + rate(y[60s])"
    )


def test_substitute_variables_sets_label_variables_to_their_all_value() -> None:
    variables = variable_all_values(build_dashboard())
    assert variables == {"namespace": ".*", "gpu_type": ".*", "model_family": ".*"}
    expr = 'x{gpu_type=~"$gpu_type", model_family=~"${model_family}"}[$__range]'
    assert substitute_variables(expr, range_seconds=60, interval_seconds=15, variables=variables) == (
        'x{gpu_type=~".*", model_family=~".*"}[60s]'
    )
    for _, query in iter_queries(build_dashboard()):
        assert "$" not in substitute_variables(query, range_seconds=60, interval_seconds=15, variables=variables)
