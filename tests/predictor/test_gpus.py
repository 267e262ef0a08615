import json
import re

import pytest

from offpeak.errors import UserError
from offpeak_predictor.gpus import all_specs, known_gpus, resolve_gpu


def test_aliases_resolve_to_the_same_card():
    assert resolve_gpu("H100").name == "H100-SXM5-80GB"
    assert resolve_gpu("NVIDIA_H100_80GB_HBM3").name == "H100-SXM5-80GB"
    assert resolve_gpu("nvidia h100 80gb hbm3") == resolve_gpu("H100-SXM5-80GB")
    assert resolve_gpu("A100").name == "A100-SXM4-40GB"
    assert resolve_gpu("Tesla V100-PCIE-32GB").name == "V100-PCIE-32GB"
    assert resolve_gpu("GeForce RTX 2080 Ti").name == "RTX-2080Ti"


def test_required_cards_are_catalogued():
    names = set(known_gpus())
    for required in ("H100-SXM5-80GB", "H200-SXM-141GB", "L40S", "A10", "B200-SXM-192GB", "A100-SXM4-40GB", "T4",
                     "P100-PCIE-16GB", "L4", "V100-SXM2-16GB", "MI210"):  # fmt: skip
        assert required in names


def test_names_are_kubernetes_label_safe_and_unique():
    pattern = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.\-]{0,61}[A-Za-z0-9])?$")
    names = known_gpus()
    assert len(names) == len(set(names))
    assert all(pattern.match(n) for n in names)


def test_unknown_gpu_lists_known_ones():
    with pytest.raises(UserError) as err:
        resolve_gpu("Voodoo-5")
    assert "H100-SXM5-80GB" in str(err.value) and "Voodoo-5" in str(err.value)


def test_specs_are_plausible():
    for spec in all_specs():
        assert spec.fp16_tflops >= spec.fp32_tflops > 0
        assert spec.memory_bandwidth_gbs > 100 and spec.sm_count > 0 and spec.l2_mb > 0
    h100, a100 = resolve_gpu("H100"), resolve_gpu("A100")
    assert h100.peak_flops("fp16") > a100.peak_flops("fp16") and h100.bandwidth_bytes > a100.bandwidth_bytes


SITE_GPU = json.dumps({"gpus": [{
    "name": "RTX-PRO-6000-Blackwell", "aliases": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
    "gfd_products": ["NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"], "sm_count": 188, "boost_clock_mhz": 2617,
    "memory_bandwidth_gbs": 1792, "memory_gb": 96, "l2_mb": 128, "fp32_tflops": 120, "fp16_tflops": 500,
}]})


def test_a_site_gpu_joins_the_catalogue_and_is_priced_from_its_figures(tmp_path, monkeypatch, tiny_model):
    from offpeak_operator.gpus import load_resolver
    from offpeak_predictor.graphfeatures import StepContext, summarise
    from .conftest import mlp_graph

    monkeypatch.delenv("OFFPEAK_GPU_CATALOGUE", raising=False)
    with pytest.raises(UserError, match="unknown GPU 'NVIDIA RTX PRO 6000"):
        resolve_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    (tmp_path / "gpus.json").write_text(SITE_GPU)
    monkeypatch.setenv("OFFPEAK_GPU_CATALOGUE", str(tmp_path / "gpus.json"))
    spec = resolve_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert spec.name == "RTX-PRO-6000-Blackwell" and "RTX-PRO-6000-Blackwell" in known_gpus()
    assert spec.bf16_tflops == 500 and spec.tf32_tflops == 120  # defaults: its fp16 and fp32 figures
    assert spec.peak_flops("bf16") == 500e12 and spec.bandwidth_bytes == 1792e9
    assert load_resolver()("RTX-PRO-6000-Blackwell") == "RTX-PRO-6000-Blackwell"  # the operator accepts it
    graph = summarise(mlp_graph(batch=256, width=4096, layers=6))
    site = tiny_model.predict_step(graph, spec, StepContext()).step_seconds
    slower = tiny_model.predict_step(graph, resolve_gpu("T4"), StepContext()).step_seconds
    assert 0 < site < slower  # 120 TFLOPS FP32 against a T4's 8


def test_a_site_gpu_may_not_redefine_a_built_in_one(tmp_path, monkeypatch):
    (tmp_path / "gpus.json").write_text(SITE_GPU.replace('"aliases": ["NVIDIA RTX PRO', '"aliases": ["H100", "RTX PRO'))
    monkeypatch.setenv("OFFPEAK_GPU_CATALOGUE", str(tmp_path / "gpus.json"))
    with pytest.raises(UserError, match="'H100' .* is the built-in GPU H100-SXM5-80GB; use that name"):
        resolve_gpu("H100")
