"""Per-component images, pod annotations and labels, common labels, and the image analysis pods extract in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support import REPO
from support.chart import chart_dir, find, helm, pod_specs, render

CHART = chart_dir(REPO)
COMPONENTS = {"operator": "operator", "predictor": "predictor", "evictor": "evictor", "agent": "agent",
              "scheduler.extender": "extender"}
DIGEST = "sha256:" + "0f" * 32


def workload(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet") and o["metadata"]["name"].endswith(suffix)]
    (obj,) = found
    return obj


def container(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return workload(objects, suffix)["spec"]["template"]["spec"]["containers"][0]


def operator_args(objects: list[dict[str, Any]]) -> list[str]:
    return list(container(objects, "-operator")["args"])


def test_each_component_may_run_its_own_image(helm_bin: Path) -> None:
    """`--set operator.image.tag=x` (refused by the schema before) changes that component only."""
    objects = render(CHART, set_values=["operator.image.tag=0.1.1-fix", "agent.image.repository=mirror.local/offpeak",
                                        f"scheduler.extender.image.digest={DIGEST}",
                                        "predictor.image.pullPolicy=Always"], include_crds=False)
    images = {suffix: container(objects, f"-{suffix}")["image"] for suffix in COMPONENTS.values()}
    assert images == {"operator": "ghcr.io/offpeak/offpeak:0.1.1-fix", "predictor": "ghcr.io/offpeak/offpeak:0.1.0",
                      "evictor": "ghcr.io/offpeak/offpeak:0.1.0", "agent": "mirror.local/offpeak:0.1.0",
                      "extender": f"ghcr.io/offpeak/offpeak@{DIGEST}"}
    assert container(objects, "-predictor")["imagePullPolicy"] == "Always"
    assert container(objects, "-operator")["imagePullPolicy"] == "IfNotPresent"
    # the operator's analysis pods copy the bundle from, and print the graph with, its own image
    assert "--image=ghcr.io/offpeak/offpeak:0.1.1-fix" in operator_args(objects)
    (refit,) = find(objects, "CronJob", "-predictor-refit")
    assert refit["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"


def test_a_global_digest_pins_every_component_that_names_none(custom_objects: list[dict[str, Any]]) -> None:
    images = {c["image"] for _, spec in pod_specs(custom_objects) for c in spec["containers"]
              if "offpeak" in c["image"] and "-collect-" not in c["name"]}
    digest = "registry.example.com/ml/offpeak@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    assert digest in images


def test_the_schema_still_refuses_latest_and_unknown_image_fields(helm_bin: Path) -> None:
    for bad in ("operator.image.tag=latest", "agent.image.registry=x", "analysis.image.digest=md5:1",
                "analysis.extractIn=gpu"):
        result = helm("template", "x", str(CHART), "--set", bad)
        assert result.returncode != 0 and "schema" in result.stderr, bad


def test_by_default_torchvision_and_hf_graphs_come_from_analysis_pods_in_the_extract_image(
        default_objects: list[dict[str, Any]]) -> None:
    args = operator_args(default_objects)
    assert "--extract-image=ghcr.io/offpeak/offpeak:0.1.0-extract" in args
    assert container(default_objects, "-operator")["image"] == "ghcr.io/offpeak/offpeak:0.1.0"  # no torch needed


def test_the_extract_image_follows_the_global_tag_or_its_own(helm_bin: Path) -> None:
    tagged = render(CHART, set_values=["image.tag=0.2.0"], include_crds=False)
    assert "--extract-image=ghcr.io/offpeak/offpeak:0.2.0-extract" in operator_args(tagged)
    own = render(CHART, set_values=["analysis.image.repository=mirror.local/offpeak-extract",
                                    f"analysis.image.digest={DIGEST}"], include_crds=False)
    assert f"--extract-image=mirror.local/offpeak-extract@{DIGEST}" in operator_args(own)


def test_extraction_in_the_operator_runs_the_operator_on_the_extract_image(helm_bin: Path) -> None:
    objects = render(CHART, set_values=["analysis.extractIn=operator"], include_crds=False)
    assert not any(a.startswith("--extract-image") for a in operator_args(objects))
    assert container(objects, "-operator")["image"] == "ghcr.io/offpeak/offpeak:0.1.0-extract"
    assert "--image=ghcr.io/offpeak/offpeak:0.1.0" in operator_args(objects)  # bundle/emit: the runtime image
    chosen = render(CHART, set_values=["analysis.extractIn=operator", "operator.image.tag=0.1.0-custom"],
                    include_crds=False)
    assert container(chosen, "-operator")["image"] == "ghcr.io/offpeak/offpeak:0.1.0-custom"


@pytest.fixture(scope="module")
def labelled(helm_bin: Path) -> list[dict[str, Any]]:
    return render(CHART, set_values=[
        "commonLabels.team=ml-platform", "commonLabels.app\\.kubernetes\\.io/name=not-offpeak",
        "podAnnotations.example\\.com/scrape=global", "podLabels.tier=batch",
        "operator.podAnnotations.example\\.com/scrape=operator", "operator.podLabels.tier=control",
        "predictor.podLabels.app\\.kubernetes\\.io/component=hijack", "scheduler.podAnnotations.note=scheduler",
        "prometheusRule.enabled=true"], include_crds=False)


def test_pods_get_the_global_then_their_components_annotations_and_labels(labelled: list[dict[str, Any]]) -> None:
    def meta(suffix: str) -> dict[str, Any]:
        return workload(labelled, suffix)["spec"]["template"]["metadata"]

    operator, evictor, scheduler = meta("-operator"), meta("-evictor"), meta("-scheduler")
    assert operator["annotations"] == {"example.com/scrape": "operator"}
    assert operator["labels"]["tier"] == "control" and evictor["labels"]["tier"] == "batch"
    assert evictor["annotations"] == {"example.com/scrape": "global"}
    # the chart's own pod annotations stay beside the user's
    assert scheduler["annotations"]["note"] == "scheduler" and "checksum/config" in scheduler["annotations"]
    assert all(m["labels"]["team"] == "ml-platform" for m in (operator, evictor, scheduler))
    # selector labels always win: a Deployment whose pods its selector misses would never become ready
    assert meta("-predictor")["labels"]["app.kubernetes.io/component"] == "predictor"
    assert operator["labels"]["app.kubernetes.io/name"] == "offpeak"


def test_common_labels_reach_every_object_without_overriding_the_charts(labelled: list[dict[str, Any]]) -> None:
    for obj in labelled:
        labels = obj["metadata"]["labels"]
        assert labels["team"] == "ml-platform", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "offpeak" and labels["app.kubernetes.io/part-of"] == "offpeak"


def test_services_still_select_their_pods_with_every_label_option(labelled: list[dict[str, Any]]) -> None:
    for service in find(labelled, "Service"):
        component = service["metadata"]["labels"]["app.kubernetes.io/component"]
        pods = workload(labelled, f"-{component}")["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pods.items()
