"""GPU types from GFD's labels: one table, in step with the predictor's catalogue; the override wins; MIG is no type."""

from __future__ import annotations

import pytest

from offpeak_core.gpuproducts import GFD_PRODUCTS, gfd_products, node_gpu_type
from offpeak_predictor.gpus import find_gpu, known_gpus


@pytest.mark.parametrize("product", sorted(GFD_PRODUCTS))
def test_every_table_entry_is_what_the_catalogue_resolves_the_product_to(product: str) -> None:
    spec = find_gpu(product)
    assert spec is not None and GFD_PRODUCTS[product] == spec.name
    assert GFD_PRODUCTS[product] in known_gpus()


def test_override_then_product_then_nothing() -> None:
    assert node_gpu_type({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}) == "H100-SXM5-80GB"
    both = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "offpeak.io/gpu-type": "H100-PCIE-80GB"}
    assert node_gpu_type(both) == "H100-PCIE-80GB"
    assert node_gpu_type({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                          "nvidia.com/mig.strategy": "single"}) is None
    assert node_gpu_type({"nvidia.com/gpu.product": "NVIDIA-Quantum-Accelerator"}) is None
    assert node_gpu_type({}) is None


def test_products_of_a_type_for_node_affinity() -> None:
    assert gfd_products("A100-SXM4-40GB") == ["NVIDIA-A100-SXM4-40GB"]
    assert gfd_products("MI250-GCD") == []
