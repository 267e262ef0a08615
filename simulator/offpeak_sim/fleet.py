"""The simulated cluster: nodes, their GPU type and GPU count.

ITP durations were measured on the ITP fleet (mostly V100-era GPUs), so V100 is the reference speed: a job of
`d` reference seconds runs `d * slowdown` seconds on a GPU type. The slowdowns are round figures from public
ResNet-50/BERT training throughput ratios (Lambda's PyTorch benchmarks): A100 ~2x and H100 ~3.3x a V100.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offpeak.errors import UserError

# canonical names as in the predictor's catalogue (docs/contracts.md: offpeak.io/gpu-type)
SLOWDOWN: dict[str, float] = {
    "V100-SXM2-16GB": 1.0,
    "A100-SXM4-40GB": 0.5,
    "H100-SXM5-80GB": 0.3,
}
DEFAULT_MIX = "V100-SXM2-16GB:0.25,A100-SXM4-40GB:0.5,H100-SXM5-80GB:0.25"


@dataclass(frozen=True)
class Fleet:
    """Static node table; index i is node `names[i]`."""

    names: tuple[str, ...]
    gpu_types: tuple[str, ...]  # per node
    gpus: np.ndarray  # int, per node
    types: tuple[str, ...]  # distinct GPU types, stable order

    @property
    def size(self) -> int:
        return len(self.names)

    def slowdown(self, node: int) -> float:
        return SLOWDOWN[self.gpu_types[node]]


def parse_mix(text: str) -> dict[str, float]:
    """Parse `TYPE:share,TYPE:share` into normalised shares."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, share = part.partition(":")
        if name not in SLOWDOWN:
            raise UserError(f"unknown GPU type {name!r}; known: {', '.join(SLOWDOWN)}")
        try:
            mix[name] = float(share or 1.0)
        except ValueError as e:
            raise UserError(f"bad share {share!r} for {name} (want a number)") from e
    total = sum(mix.values())
    if not mix or total <= 0:
        raise UserError("needs at least one GPU type with a positive share")
    return {k: v / total for k, v in mix.items()}


def build_fleet(*, nodes: int, gpus_per_node: int, mix: dict[str, float]) -> Fleet:
    """Give each node a GPU type so the counts follow `mix` (largest remainder), types in contiguous blocks."""
    if nodes < 1 or gpus_per_node < 1:
        raise UserError("need at least one node with at least one GPU")
    raw = {k: v * nodes for k, v in mix.items()}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] - counts[k], reverse=True)[: nodes - sum(counts.values())]:
        counts[k] += 1
    types = [k for k in mix for _ in range(counts[k])]
    names = tuple(f"sim-node-{i:04d}" for i in range(nodes))
    return Fleet(
        names=names,
        gpu_types=tuple(types),
        gpus=np.full(nodes, gpus_per_node, dtype=np.int64),
        types=tuple(k for k in mix if counts[k] > 0),
    )
