"""The generated dashboard: committed file up to date, panels present, metric names real."""

from __future__ import annotations

import json

import check_dashboard as checks
from offpeak_dashboard.dashboard import build_dashboard, render
from offpeak_dashboard.grafana import iter_queries, substitute_variables


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
    assert {"table", "heatmap", "timeseries", "row"} <= kinds


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
