"""The chart renders without being told a Kubernetes version, and its secondary kube-scheduler follows the cluster's
minor version, refusing one it does not support when it renders for a real cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from support import REPO
from support.chart import chart_dir, find, helm, render

CHART = chart_dir(REPO)
BY_MINOR: dict[str, str] = yaml.safe_load((CHART / "values.yaml").read_text())["scheduler"]["image"]["tagByMinor"]
NEWEST = max(BY_MINOR, key=lambda m: int(m.split(".")[1]))
# what every real API server serves and `helm template` alone does not: the chart's sign that it renders for a cluster
CLUSTER = ("apiregistration.k8s.io/v1",)


def scheduler_image(objects: list[dict[str, Any]]) -> str:
    (deployment,) = find(objects, "Deployment", "-scheduler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_helm_template_and_strict_lint_need_no_kube_version(helm_bin: Path) -> None:
    """As typed by a user or a GitOps renderer that passes no version: helm's default version is used."""
    rendered = helm("template", "offpeak", str(CHART))
    assert rendered.returncode == 0, rendered.stderr
    objects = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert find(objects, "Deployment", "-operator")
    assert scheduler_image(objects) == f"registry.k8s.io/kube-scheduler:{BY_MINOR[NEWEST]}"  # no cluster: the newest
    linted = helm("lint", "--strict", str(CHART))
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_every_minor_names_a_release_of_that_minor() -> None:
    minors = sorted(int(m.split(".")[1]) for m in BY_MINOR)
    assert minors == list(range(minors[0], minors[-1] + 1))  # no gap the range in the refusal would hide
    for minor, tag in BY_MINOR.items():
        assert tag.startswith(f"v{minor}."), (minor, tag)


@pytest.mark.parametrize("minor", ["1.27", NEWEST])
def test_the_scheduler_image_follows_the_clusters_minor(helm_bin: Path, minor: str) -> None:
    objects = render(CHART, kube_version=f"{minor}.4", api_versions=CLUSTER, include_crds=False)
    assert scheduler_image(objects) == f"registry.k8s.io/kube-scheduler:{BY_MINOR[minor]}"


def test_a_cluster_one_minor_newer_gets_the_newest_scheduler_within_skew(helm_bin: Path) -> None:
    newer = f"1.{int(NEWEST.split('.')[1]) + 1}.0"
    objects = render(CHART, kube_version=newer, api_versions=CLUSTER, include_crds=False)
    assert scheduler_image(objects) == f"registry.k8s.io/kube-scheduler:{BY_MINOR[NEWEST]}"


@pytest.mark.parametrize("version", ["1.26.15", f"1.{int(NEWEST.split('.')[1]) + 2}.0"])
def test_an_unsupported_cluster_is_refused_with_the_supported_range(helm_bin: Path, version: str) -> None:
    result = helm("template", "offpeak", str(CHART), "--kube-version", version, "--api-versions", CLUSTER[0])
    assert result.returncode != 0
    lowest = min(int(m.split(".")[1]) for m in BY_MINOR)
    assert f"supports Kubernetes 1.{lowest} to 1.{int(NEWEST.split('.')[1]) + 1}" in result.stderr
    assert f"runs v{version}" in result.stderr and "scheduler.image.tag" in result.stderr


def test_the_users_own_tag_is_taken_as_it_is_whatever_the_cluster(helm_bin: Path) -> None:
    chosen = render(CHART, kube_version="1.26.15", api_versions=CLUSTER, include_crds=False,
                    set_values=["scheduler.image.tag=v1.26.15"])
    assert scheduler_image(chosen) == "registry.k8s.io/kube-scheduler:v1.26.15"


def test_a_managed_clusters_minor_with_a_plus_is_read(helm_bin: Path) -> None:
    """EKS and others report minor "29+"; helm's semver parse of the git version gives the number."""
    objects = render(CHART, kube_version="v1.29.8-eks-a737599", api_versions=CLUSTER, include_crds=False)
    assert scheduler_image(objects) == f"registry.k8s.io/kube-scheduler:{BY_MINOR['1.29']}"


def test_a_scheduler_digest_pins_the_image(helm_bin: Path) -> None:
    digest = "sha256:" + "ab" * 32
    objects = render(CHART, set_values=[f"scheduler.image.digest={digest}"], include_crds=False)
    assert scheduler_image(objects) == f"registry.k8s.io/kube-scheduler@{digest}"
