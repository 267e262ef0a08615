"""The links a data-parallel step's gradients cross, and what crossing them costs. Pure.

Inside a node the GPUs of one worker talk over NVLink (SXM boards) or PCIe; between the nodes of a multi-worker
job, over the network. The runtime model learned the in-node cost from measured single-node multi-GPU steps; what
it never saw is a job spread over nodes, so the ring all-reduce across the network is added here, from the link
each GPU type has and the network the predictor is told about, and every answer says which links it assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offpeak_predictor.gpus import GpuSpec

DEFAULT_NETWORK_GBITS = 100.0  # per node: one 100 Gbit/s NIC (many GPU clusters have more: --network-gbits)
GRADIENT_BYTES_PER_PARAM = 4.0  # fp32 gradients (AMP keeps fp32 master weights and reduces in fp32 or bf16)

# NVLink bandwidth per GPU, one direction (GB/s): what a ring all-reduce moves data at, by NVLink generation.
_NVLINK_GBYTES = {"volta": 150.0, "ampere": 300.0, "hopper": 450.0, "blackwell": 900.0}
# PCIe x16, one direction (GB/s), by the generation the architecture shipped with.
_PCIE_GEN = {"kepler": 3, "maxwell": 3, "pascal": 3, "volta": 3, "turing": 3, "vega": 3, "ampere": 4, "ada": 4,
             "cdna1": 4, "cdna2": 4, "hopper": 5, "blackwell": 5}
_PCIE_GBYTES = {3: 16.0, 4: 32.0, 5: 64.0}


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    gbytes_per_second: float  # one direction


def within_node(gpu: GpuSpec) -> Link:
    """The link between GPUs of one node: NVLink on SXM (and Grace Hopper) boards, else PCIe x16."""
    nvlink = _NVLINK_GBYTES.get(gpu.architecture)
    if nvlink is not None and ("SXM" in gpu.name.upper() or gpu.name.upper().startswith("GH200")):
        return Link(f"NVLink ({nvlink:g} GB/s per direction)", nvlink)
    gen = _PCIE_GEN.get(gpu.architecture, 3)
    return Link(f"PCIe Gen{gen} x16 ({_PCIE_GBYTES[gen]:g} GB/s per direction)", _PCIE_GBYTES[gen])


def network(gbits: float = DEFAULT_NETWORK_GBITS) -> Link:
    return Link(f"network ({gbits:g} Gbit/s per node)", gbits / 8.0)


def ring_seconds(*, data_bytes: float, members: int, link: Link) -> float:
    """A ring all-reduce of `data_bytes` among `members` peers: each sends and receives 2 (n-1)/n of the data."""
    if members <= 1 or data_bytes <= 0:
        return 0.0
    return 2.0 * (members - 1) / members * data_bytes / (link.gbytes_per_second * 1e9)


def between_nodes_seconds(*, params: float, nodes: int, link: Link) -> float:
    """Seconds per step the gradients spend crossing the network when the job spans `nodes` nodes: after the
    in-node reduction (learned by the model), one ring across the nodes' NICs."""
    return ring_seconds(data_bytes=params * GRADIENT_BYTES_PER_PARAM, members=nodes, link=link)


def describe(*, gpu: GpuSpec, gpus_per_node: int, nodes: int, net: Link, between_seconds: float) -> dict[str, Any]:
    """The `interconnect` object of a multi-GPU prediction: the layout and the links it assumed."""
    out: dict[str, Any] = {"gpus_per_node": gpus_per_node, "nodes": nodes}
    if gpus_per_node > 1:
        out["within_node"] = (f"{within_node(gpu).name}; its cost is learned from measured single-node "
                              "multi-GPU steps")
    if nodes > 1:
        out["between_nodes"] = f"{net.name}, a ring all-reduce of fp32 gradients"
        out["between_nodes_seconds_per_step"] = round(between_seconds, 6)
    return out
