"""The collect Jobs: one per GPU type, on that GPU product, posting through the predictor's authenticated path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chart import find, render

from .conftest import CHART

TOKEN_DIR = "/var/run/secrets/offpeak/predictor-token"
TWO_GPUS = {"collect": {"enabled": True, "gpuTypes": [
    {"name": "H100-SXM5-80GB", "product": "NVIDIA-H100-80GB-HBM3"}, {"name": "L4", "product": "NVIDIA-L4"}]}}


def _render(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return render(CHART, values=[path])


def _jobs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in find(objects, "Job") if "-collect-" in j["metadata"]["name"]]


def test_no_collect_job_by_default(helm_bin, default_objects) -> None:
    assert _jobs(default_objects) == []


def test_one_job_per_gpu_type_on_its_product_with_one_gpu(helm_bin, tmp_path) -> None:
    objects = _render(tmp_path, TWO_GPUS)
    jobs = {j["metadata"]["labels"]["offpeak.io/gpu-type"]: j for j in _jobs(objects)}
    assert set(jobs) == {"H100-SXM5-80GB", "L4"}
    (service,) = find(objects, "Service", "-predictor")
    url = f"http://{service['metadata']['name']}.offpeak-system.svc:{service['spec']['ports'][0]['port']}"
    (secret,) = find(objects, "Secret", "-predictor-token")
    for name, product in (("H100-SXM5-80GB", "NVIDIA-H100-80GB-HBM3"), ("L4", "NVIDIA-L4")):
        pod = jobs[name]["spec"]["template"]
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": product}
        assert pod["metadata"]["labels"]["offpeak.io/predictor-client"] == "true"  # admitted by the NetworkPolicy
        (container,) = spec["containers"]
        assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1"
        args = container["args"]
        assert args[:4] == ["collect", "--plan=new-gpu", "--device=cuda", f"--gpu-type={name}"]
        assert f"--predictor-url={url}" in args and f"--token-file={TOKEN_DIR}/token" in args
        # the token is mounted the way the operator gets it
        (volume,) = [v for v in spec["volumes"] if v["name"] == "predictor-token"]
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        assert {"name": "predictor-token", "mountPath": TOKEN_DIR, "readOnly": True} in container["volumeMounts"]
        assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["image"].endswith("-extract")  # the image with PyTorch
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_a_job_keeps_its_name_until_what_it_runs_changes(helm_bin, tmp_path) -> None:
    """Jobs are immutable: unchanged values must render the same name (no re-collection on upgrade), changed
    ones a new name (a new Job rather than a failed patch)."""
    names = lambda values: sorted(j["metadata"]["name"] for j in _jobs(_render(tmp_path, values)))  # noqa: E731
    first = names(TWO_GPUS)
    assert names(TWO_GPUS) == first
    moved = {"collect": {**TWO_GPUS["collect"], "gpuTypes": [
        {"name": "H100-SXM5-80GB", "product": "NVIDIA-H100-80GB-HBM3-PCIe"}, {"name": "L4", "product": "NVIDIA-L4"}]}}
    second = names(moved)
    assert second[1] == first[1] and second[0] != first[0]


def test_the_gpu_limit_cannot_be_dropped_by_custom_resources(helm_bin, tmp_path) -> None:
    values = {"collect": {**TWO_GPUS["collect"], "resources": {"limits": {"cpu": "4", "memory": "4Gi"}}}}
    for job in _jobs(_render(tmp_path, values)):
        limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert str(limits["nvidia.com/gpu"]) == "1" and limits["memory"] == "4Gi"


@pytest.mark.parametrize("values", [
    {"collect": {"enabled": True, "gpuTypes": [{"name": "L4"}]}},  # no product: nowhere to place it
    {"collect": {"enabled": True, "gpuTypes": [{"name": "L4", "product": "NVIDIA-L4", "count": 2}]}},
    {"collect": {"enabled": True, "typo": 1}},
])  # fmt: skip
def test_the_schema_refuses_bad_collect_values(helm_bin, tmp_path, values) -> None:
    with pytest.raises(RuntimeError, match="schema|collect"):
        _render(tmp_path, values)
