"""The chart's alerts (templates/_alerts.tpl) checked by promtool on the rules as rendered: `promtool check rules`,
and `promtool test rules` with the cases in promtool/, which hold a case where each alert fires and one where it
stays quiet. promtool comes with Debian's prometheus package (support.tools.find_promtool installs it as the e2e
suite installs Prometheus); without it these tests fail saying how to get it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import REPO
from support.chart import chart_dir, find, render
from support.tools import ToolMissing, find_promtool

CHART = chart_dir(REPO)
CASES = sorted((Path(__file__).with_name("promtool")).glob("*-test.yaml"))
ALERTS = {"OffpeakPredictorDown", "OffpeakPredictorUnreachable", "OffpeakPredictionDrift", "OffpeakExtenderErrors",
          "OffpeakExtenderSlow", "OffpeakEvictionSurge"}


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return find_promtool()
    except ToolMissing as e:
        pytest.fail(str(e))


def rule_spec(*values: Path) -> dict[str, Any]:
    """The PrometheusRule's spec (its `groups`), rendered for release offpeak in offpeak-system, as the cases expect."""
    objects = render(CHART, values=values, set_values=["prometheusRule.enabled=true"], include_crds=False)
    (rule,) = find(objects, "PrometheusRule")
    return rule["spec"]


def promtool_test(promtool: Path, folder: Path, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (folder / "rules.yaml").write_text(yaml.safe_dump(spec))
    for case in CASES:
        shutil.copy(case, folder / case.name)
    return subprocess.run([str(promtool), "test", "rules", *(c.name for c in CASES)], cwd=folder, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def default_spec(helm_bin: Path) -> dict[str, Any]:
    return rule_spec()


def test_the_rendered_rules_are_valid_and_pass_every_promtool_case(promtool: Path, tmp_path: Path,
                                                                    default_spec: dict[str, Any]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(default_spec))
    checked = subprocess.run([str(promtool), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool_test(promtool, tmp_path, default_spec)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert {r["alert"] for g in default_spec["groups"] for r in g["rules"]} == ALERTS


def test_every_alert_has_a_case_that_fires_and_one_that_stays_quiet() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for cases in CASES:
        for case in yaml.safe_load(cases.read_text())["tests"]:
            for check in case["alert_rule_test"]:
                (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fires == quiet == ALERTS


def test_the_cases_catch_a_changed_threshold(promtool: Path, tmp_path: Path) -> None:
    """The cases hold the chart's default thresholds: another threshold makes the firing case fail."""
    values = tmp_path / "values.yaml"
    values.write_text("prometheusRule: {extenderErrorRatio: 0.2}\n")  # --set would pass the number as a string
    tested = promtool_test(promtool, tmp_path, rule_spec(values))
    assert tested.returncode != 0
    assert "OffpeakExtenderErrors" in tested.stdout + tested.stderr


def test_alerts_use_only_metrics_offpeak_exports(default_spec: dict[str, Any]) -> None:
    from offpeak_dashboard.metricnames import definitions_in_tree, exported_series, promql_metric_names

    definitions = definitions_in_tree(REPO / folder for folder in ("operator", "predictor", "extender", "agent"))
    exported = exported_series(definitions)
    for group in default_spec["groups"]:
        for rule in group["rules"]:
            used = promql_metric_names(rule["expr"])
            assert used <= exported, f"{rule['alert']} uses {sorted(used - exported)}, which no component exports"


def test_rules_are_opt_in_follow_the_components_and_carry_the_users_labels(helm_bin: Path,
                                                                           default_objects: list[dict[str, Any]]
                                                                           ) -> None:
    assert find(default_objects, "PrometheusRule") == []
    objects = render(CHART, set_values=["prometheusRule.enabled=true", "evictor.enabled=false",
                                        "prometheusRule.additionalLabels.release=kube-prometheus-stack",
                                        "prometheusRule.alertLabels.team=ml-platform"], include_crds=False)
    (rule,) = find(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {r["alert"] for r in alerts} == ALERTS - {"OffpeakEvictionSurge"}
    assert all(r["labels"]["team"] == "ml-platform" and r["labels"]["severity"] in ("warning", "critical")
               for r in alerts)
