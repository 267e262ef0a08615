"""A node's GPU type, read from the labels NVIDIA's GPU feature discovery (GFD) already puts on every GPU node.

GFD writes ``nvidia.com/gpu.product`` = the NVML device name with spaces as dashes (``NVIDIA-H100-80GB-HBM3``,
``Tesla-T4``), plus ``nvidia.com/gpu.memory`` (MiB) and, on MIG nodes, ``nvidia.com/mig.strategy`` and a product
with a ``-MIG-<profile>`` suffix. offpeak names GPU types by its catalogue (``offpeak_predictor``'s GPU catalogue,
the values predictions are keyed by), so this one table maps GFD's names to catalogue names; a test keeps every
entry equal to what the catalogue itself resolves the name to. A site's own GPU types add their products from the
site catalogue (``$OFFPEAK_GPU_CATALOGUE``, `offpeak_core.sitegpus`). ``offpeak.io/gpu-type`` stays as an override,
for nodes without GFD or GPUs neither table knows.

MIG slices are not modelled (a 1g.5gb slice is not an A100): such nodes have no GPU type, so offpeak places on
them runtime-blind, never with a whole GPU's prediction.
"""

from __future__ import annotations

from collections.abc import Mapping

from offpeak_core.errors import UserError
from offpeak_core.sitegpus import site_catalogue

GPU_TYPE_LABEL = "offpeak.io/gpu-type"  # the override, and what offpeak itself writes on test nodes
GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
GFD_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB

# GFD product label -> catalogue name. Data-centre GPUs first, then workstation and consumer cards.
GFD_PRODUCTS: dict[str, str] = {
    "NVIDIA-B200": "B200-SXM-192GB",
    "NVIDIA-H200": "H200-SXM-141GB",
    "NVIDIA-H100-80GB-HBM3": "H100-SXM5-80GB",
    "NVIDIA-H100-PCIe": "H100-PCIE-80GB",
    "NVIDIA-A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA-A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA-A100-80GB-PCIe": "A100-PCIE-80GB",
    "NVIDIA-A100-PCIE-40GB": "A100-PCIE-40GB",
    "NVIDIA-L40S": "L40S",
    "NVIDIA-L4": "L4",
    "NVIDIA-A10": "A10",
    "Tesla-V100-SXM2-16GB": "V100-SXM2-16GB",
    "Tesla-V100-PCIE-32GB": "V100-PCIE-32GB",
    "Tesla-V100-SXM3-32GB": "V100-SXM3-32GB",
    "Tesla-T4": "T4",
    "Tesla-P100-PCIE-16GB": "P100-PCIE-16GB",
    "Tesla-P4": "P4",
    "NVIDIA-RTX-6000-Ada-Generation": "RTX-6000-Ada",
    "NVIDIA-RTX-A6000": "RTX-A6000",
    "NVIDIA-GeForce-RTX-4090": "RTX-4090",
    "NVIDIA-GeForce-RTX-3090": "RTX-3090",
}


def node_gpu_type(labels: Mapping[str, str]) -> str | None:
    """The node's catalogue GPU type: the ``offpeak.io/gpu-type`` override, else GFD's product through the
    table; None when neither says (no GPU, an unknown product, or a MIG slice)."""
    override = labels.get(GPU_TYPE_LABEL)
    if override:
        return override
    product = labels.get(GFD_PRODUCT_LABEL, "")
    if not product or "-MIG-" in product:
        return None
    return GFD_PRODUCTS.get(product) or site_products().get(product)


def site_products() -> dict[str, str]:
    """GFD products of the site's own GPU types (`offpeak_core.sitegpus`); one the table above already maps is an
    error, not a silent second meaning."""
    mapping = site_catalogue().gfd_map()
    for product, gpu_type in mapping.items():
        if product in GFD_PRODUCTS:
            raise UserError(f"GPU catalogue {site_catalogue().source}: {product!r} ({gpu_type}) is already built in "
                            f"as {GFD_PRODUCTS[product]}")
    return mapping


def gfd_products(gpu_type: str) -> list[str]:
    """The GFD product names of one catalogue GPU type (for node affinity), sorted."""
    return sorted(p for p, t in {**GFD_PRODUCTS, **site_products()}.items() if t == gpu_type)
