"""Fake GPU nodes for kwok: pure manifest builders (no Kubernetes calls here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offpeak_core.gpuproducts import GFD_MEMORY_LABEL, GFD_PRODUCT_LABEL, GPU_TYPE_LABEL, gfd_products

KWOK_ANNOTATION = "kwok.x-k8s.io/node"

# Canonical names from offpeak_predictor's GPU catalogue (predictor/offpeak_predictor/data/gpus.json).
DEFAULT_GPU_TYPES: tuple[str, ...] = ("A100-SXM4-40GB", "H100-SXM5-80GB", "L4", "V100-SXM2-16GB")


@dataclass(frozen=True)
class NodeSpec:
    """One fake GPU node; `labels` are extra node labels (e.g. the e2e lane that owns the node)."""

    name: str
    gpu_type: str
    gpus: int = 8
    labels: tuple[tuple[str, str], ...] = ()


def plan_nodes(*, count: int, gpu_types: tuple[str, ...] = DEFAULT_GPU_TYPES, gpus: int = 8, prefix: str = "gpu",
               labels: tuple[tuple[str, str], ...] = ()) -> list[NodeSpec]:
    """`count` nodes spread round-robin over `gpu_types`, named ``<prefix>-<type>-<n>`` (lower-case, DNS-safe)."""
    if count < 1:
        raise ValueError("need at least one node")
    if not gpu_types:
        raise ValueError("need at least one GPU type")
    specs = []
    for i in range(count):
        gpu_type = gpu_types[i % len(gpu_types)]
        specs.append(NodeSpec(name=f"{prefix}-{gpu_type.lower()}-{i // len(gpu_types)}", gpu_type=gpu_type,
                              gpus=gpus, labels=labels))
    return specs


def gpu_labels(gpu_type: str) -> dict[str, str]:
    """The labels a real GPU node of this type carries: GPU feature discovery's product and memory (offpeak reads
    the type from them), or, for a type GFD has no product name for here, offpeak's own override label."""
    products = gfd_products(gpu_type)
    if not products:
        return {GPU_TYPE_LABEL: gpu_type}
    from offpeak_predictor.gpus import resolve_gpu  # noqa: PLC0415 - the catalogue's memory figure

    return {GFD_PRODUCT_LABEL: products[0], GFD_MEMORY_LABEL: str(int(resolve_gpu(gpu_type).memory_gb * 1e9 / 2**20))}


def node_manifest(spec: NodeSpec) -> dict[str, Any]:
    """A Node object kwok will manage (annotation ``kwok.x-k8s.io/node: fake``) with ``nvidia.com/gpu``."""
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(spec.gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": spec.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "type": "kwok",
                **gpu_labels(spec.gpu_type),
                "nvidia.com/gpu.present": "true",
                **dict(spec.labels),
            },
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": resources},
    }
