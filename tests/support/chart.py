"""Render the Helm chart and inspect what it renders (used by tests/chart and the e2e Helm tests)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from support.tools import find_helm

KUBE_VERSION = "1.33.0"  # rendered objects are validated against this version (the e2e cluster's minor)
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


def chart_dir(root: Path) -> Path:
    return root / "charts" / "offpeak"


def helm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm; the caller checks the return code (stderr carries helm's reasons)."""
    return subprocess.run(
        [str(find_helm()), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def render(
    chart: Path,
    *,
    values: Sequence[Path] = (),
    set_values: Sequence[str] = (),
    release: str = "offpeak",
    namespace: str = "offpeak-system",
    include_crds: bool = True,
    kube_version: str | None = KUBE_VERSION,
    api_versions: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """`helm template` → the rendered objects (empty documents dropped). `kube_version` None: helm's own default;
    `api_versions`: what a cluster would serve (`--api-versions`)."""
    args = ["template", release, str(chart), "--namespace", namespace]
    if kube_version is not None:
        args += ["--kube-version", kube_version]
    for api in api_versions:
        args += ["--api-versions", api]
    if include_crds:
        args.append("--include-crds")
    for path in values:
        args += ["--values", str(path)]
    for item in set_values:
        args += ["--set", item]
    result = helm(*args)
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def pod_specs(objects: Sequence[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload."""
    for obj in objects:
        if obj["kind"] in WORKLOAD_KINDS:
            yield f"{obj['kind']}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]


def find(objects: Sequence[dict[str, Any]], kind: str, name_suffix: str = "") -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]


def scheduler_config(objects: Sequence[dict[str, Any]]) -> str:
    """The KubeSchedulerConfiguration text the chart renders."""
    (configmap,) = find(objects, "ConfigMap", "-scheduler-config")
    return str(configmap["data"]["config.yaml"])
