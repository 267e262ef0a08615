"""The chart's `gpuCatalogue`: one ConfigMap the components that name GPU types read through
$OFFPEAK_GPU_CATALOGUE, and nothing at all when it is empty."""

from __future__ import annotations

from typing import Any

import yaml
from support.chart import find, helm

from offpeak_core.sitegpus import parse_site_catalogue

from .conftest import CHART, CUSTOM_VALUES

PATH = "/etc/offpeak/gpu-catalogue/gpus.json"


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    specs = {}
    for obj in objects:
        if obj["kind"] == "Deployment":
            specs[obj["metadata"]["name"]] = obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Job":
            specs[obj["metadata"]["name"]] = obj["spec"]["template"]["spec"]
    return specs


def _reads_the_catalogue(spec: dict[str, Any]) -> bool:
    container = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    if "OFFPEAK_GPU_CATALOGUE" not in env:
        assert "gpu-catalogue" not in mounts and "gpu-catalogue" not in volumes
        return False
    assert env["OFFPEAK_GPU_CATALOGUE"] == PATH
    assert mounts["gpu-catalogue"] == {"name": "gpu-catalogue", "mountPath": "/etc/offpeak/gpu-catalogue",
                                       "readOnly": True}
    assert volumes["gpu-catalogue"]["configMap"]["name"].endswith("-gpu-catalogue")
    return True


def test_the_catalogue_is_one_configmap_that_parses_and_reaches_who_names_gpu_types(custom_objects) -> None:
    (configmap,) = find(custom_objects, "ConfigMap", "-gpu-catalogue")
    site = parse_site_catalogue(configmap["data"]["gpus.json"], source="the ConfigMap")
    expected = yaml.safe_load(CUSTOM_VALUES.read_text())["gpuCatalogue"]["gpus"]
    assert [g.name for g in site.gpus] == [e["name"] for e in expected]
    assert site.gfd_map() == {"NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": "RTX-PRO-6000-Blackwell"}
    readers = {name.removeprefix("gpu-harvest-") for name, spec in _pod_specs(custom_objects).items()
               if _reads_the_catalogue(spec)}
    assert {"predictor", "operator", "extender"} <= readers
    assert any(name.startswith("collect-") for name in readers), readers
    assert not readers & {"evictor", "scheduler", "dashboard"}


def test_an_empty_catalogue_renders_nothing(default_objects) -> None:
    assert find(default_objects, "ConfigMap", "-gpu-catalogue") == []
    assert not any(_reads_the_catalogue(spec) for spec in _pod_specs(default_objects).values())


def test_the_schema_refuses_a_gpu_without_its_figures(helm_bin, tmp_path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("gpuCatalogue:\n  gpus:\n    - name: X1\n      sm_count: 1\n      fp32_tflops: -3\n")
    result = helm("template", "x", str(CHART), "--kube-version", "1.33.0", "-f", str(values))
    assert result.returncode != 0
    assert "gpuCatalogue.gpus.0: memory_bandwidth_gbs is required" in result.stderr
    assert "fp32_tflops" in result.stderr
