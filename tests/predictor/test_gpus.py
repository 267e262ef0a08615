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
