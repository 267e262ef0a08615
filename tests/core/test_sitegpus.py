"""A site's own GPU types: parsed strictly, read from $OFFPEAK_GPU_CATALOGUE, mapped from GFD's product label."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from offpeak_core import sitegpus
from offpeak_core.errors import UserError
from offpeak_core.gpuproducts import gfd_products, node_gpu_type
from offpeak_core.sitegpus import CATALOGUE_ENV, parse_site_catalogue, site_catalogue

GPU: dict[str, object] = {
    "name": "RTX-PRO-6000-Blackwell",
    "aliases": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
    "gfd_products": ["NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"],
    "sm_count": 188, "boost_clock_mhz": 2617, "memory_bandwidth_gbs": 1792, "memory_gb": 96, "l2_mb": 128,
    "fp32_tflops": 120, "fp16_tflops": 500,
}  # fmt: skip
SITE = json.dumps({"gpus": [GPU]})


def _site(**change: object) -> str:
    """SITE with fields of its GPU changed (None: removed)."""
    gpu = {k: v for k, v in {**GPU, **change}.items() if v is not None}
    return json.dumps({"gpus": [gpu]})


@pytest.fixture
def site_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(SITE)
    monkeypatch.setenv(CATALOGUE_ENV, str(path))
    return path


def test_a_site_gpu_is_parsed_with_its_figures_and_names() -> None:
    (gpu,) = parse_site_catalogue(SITE, source="site.json").gpus
    assert gpu.name == "RTX-PRO-6000-Blackwell"
    assert gpu.gfd_products == ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",)
    fields = gpu.fields()
    assert fields["fp16_tflops"] == 500.0 and fields["vendor"] == "nvidia" and "bf16_tflops" not in fields


def test_a_bare_list_is_accepted() -> None:
    text = '[{"name": "X1", "sm_count": 1, "boost_clock_mhz": 1, "memory_bandwidth_gbs": 1, "memory_gb": 1, ' \
           '"l2_mb": 1, "fp32_tflops": 1, "fp16_tflops": 2}]'
    assert [g.name for g in parse_site_catalogue(text, source="x.json").gpus] == ["X1"]


@pytest.mark.parametrize(("text", "message"), [
    (_site(l2_mb=None), "gpus[0] (RTX-PRO-6000-Blackwell): l2_mb is required"),
    (_site(fp16_tflops=-5), "fp16_tflops: -5 is not a positive number"),
    (_site(fp16_tflops="fast"), "fp16_tflops: 'fast' is not a positive number"),
    (_site(fp16_tflops=True), "fp16_tflops: True is not a positive number"),
    (_site(name="RTX PRO"), "is not a Kubernetes-label-safe name"),
    (_site(cuda_cores=24064), "unknown field(s) cuda_cores"),
    (_site(gfd_products=["NVIDIA-RTX-PRO-6000-MIG-1g.24gb"]), "whole GPUs only"),
    (_site(aliases="RTX PRO"), "aliases: expected a list of names"),
    (_site(vendor="intel"), "vendor: 'intel' is not nvidia or amd"),
    (json.dumps({"gpus": [GPU, GPU]}), "names both RTX-PRO-6000-Blackwell and RTX-PRO-6000-Blackwell"),
    ('{"gpus": {"name": "x"}}', "expected a list of GPUs under 'gpus'"),
    ("gpus:\n  - name: x", "not JSON"),
])  # fmt: skip
def test_a_bad_catalogue_names_the_file_the_entry_and_the_field(text: str, message: str) -> None:
    with pytest.raises(UserError) as err:
        parse_site_catalogue(text, source="/etc/offpeak/gpus.json")
    assert message in str(err.value) and "/etc/offpeak/gpus.json" in str(err.value)


def test_without_the_variable_there_is_no_site_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CATALOGUE_ENV, raising=False)
    assert site_catalogue().gpus == ()
    assert node_gpu_type({"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"}) is None


def test_gfd_labels_of_a_site_gpu_give_its_type(site_file: Path) -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"}
    assert node_gpu_type(labels) == "RTX-PRO-6000-Blackwell"
    assert gfd_products("RTX-PRO-6000-Blackwell") == ["NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"]
    assert node_gpu_type({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}) == "H100-SXM5-80GB"  # built in still


def test_a_site_product_that_is_built_in_is_refused(site_file: Path) -> None:
    site_file.write_text(_site(gfd_products=["NVIDIA-L4"]))
    with pytest.raises(UserError, match="'NVIDIA-L4' .* is already built in as L4"):
        node_gpu_type({"nvidia.com/gpu.product": "NVIDIA-L4-unknown"})


def test_a_missing_file_is_an_error_that_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CATALOGUE_ENV, str(tmp_path / "absent.json"))
    with pytest.raises(UserError, match=r"absent.json \(\$OFFPEAK_GPU_CATALOGUE\)"):
        site_catalogue()


def test_an_edit_is_read_again_and_a_broken_edit_keeps_the_last_good_catalogue(site_file: Path) -> None:
    assert [g.name for g in site_catalogue().gpus] == ["RTX-PRO-6000-Blackwell"]
    site_file.write_text(_site(name="RTX-PRO-6000-B"))
    _touch_later(site_file)
    assert [g.name for g in site_catalogue().gpus] == ["RTX-PRO-6000-B"]
    site_file.write_text('{"gpus": [')
    _touch_later(site_file)
    assert [g.name for g in site_catalogue().gpus] == ["RTX-PRO-6000-B"]  # the typo does not lose the GPU type
    sitegpus._last_good.clear()
    with pytest.raises(UserError, match="not JSON"):  # ... but a component starting on it refuses
        site_catalogue()


def _touch_later(path: Path) -> None:
    """A new modification time, even on file systems with coarse timestamps."""
    later = time.time() + 5
    os.utime(path, (later, later))


def test_every_command_stops_at_its_start_on_a_broken_catalogue(site_file: Path, capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:  # fmt: skip
    from offpeak.cli import main

    site_file.write_text(_site(sm_count=None))
    assert main(["predict", "--torchvision", "resnet18", "--batch-size", "1", "--gpu", "T4"]) == 2
    err = capsys.readouterr().err
    assert f"offpeak predict: error: GPU catalogue {site_file}: gpus[0] (RTX-PRO-6000-Blackwell): sm_count is " \
           "required" in err
