"""GPU catalogue: public spec-sheet figures, so the predictor describes hardware by its specs, not by an id.

Describing a GPU by its specs is what lets the models predict a card they never saw measured (e.g. H100).
Canonical names are Kubernetes-label-safe and are the values of the `offpeak.io/gpu-type` node label. A site adds
GPUs the built-in catalogue lacks with a file of its own (`$OFFPEAK_GPU_CATALOGUE`, see `offpeak_core.sitegpus`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from offpeak.errors import UserError
from offpeak_core.sitegpus import SiteCatalogue, SiteGpu, site_catalogue

_LABEL_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9]$|^[A-Za-z0-9]$")
_NOISE_WORDS = ("nvidia", "tesla", "geforce", "amd", "instinct", "lambdacloud")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU as CUDA/ROCm sees it (one device, one die for multi-die boards)."""

    name: str
    aliases: tuple[str, ...]
    vendor: str
    architecture: str
    sm_count: int
    cores_per_sm: int
    boost_clock_mhz: float
    memory_bandwidth_gbs: float
    memory_gb: float
    fp32_tflops: float
    fp16_tflops: float  # dense tensor-core (or packed) FP16 peak
    bf16_tflops: float  # pre-Ampere cards have no BF16 units: their FP32 figure
    tf32_tflops: float  # pre-Ampere cards: their FP32 figure
    l2_mb: float
    year: int
    tdp_watts: float  # board power limit (catalogue data; tried as a model feature, it made CV worse)

    def peak_flops(self, precision: str, *, op_class: str = "gemm") -> float:
        """Peak FLOP/s of a matmul-like op (gemm, conv) at a precision, as PyTorch runs it by default:
        fp32 = plain CUDA cores for matmul but TF32 for cuDNN convolutions; tf32 = TF32 tensor cores for both;
        fp16/bf16 (autocast) = half-precision tensor cores. Pre-Ampere cards list their FP32 figure as TF32/BF16."""
        if precision in ("fp16", "bf16"):
            tflops = self.fp16_tflops if precision == "fp16" else self.bf16_tflops
        elif precision == "tf32" or (precision == "fp32" and op_class == "conv"):
            tflops = max(self.tf32_tflops, self.fp32_tflops)
        else:
            tflops = self.fp32_tflops
        return tflops * 1e12

    @property
    def bandwidth_bytes(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def feature_vector(self, precision: str) -> list[float]:
        """Numeric hardware description used by every model (see `GPU_FEATURES`)."""
        peak = self.peak_flops(precision)
        return [
            math.log(peak),
            math.log(self.fp32_tflops * 1e12),
            math.log(self.tf32_tflops * 1e12),
            math.log(self.bandwidth_bytes),
            math.log(peak / self.bandwidth_bytes),
            math.log(self.sm_count),
            math.log(self.boost_clock_mhz),
            math.log(self.l2_mb),
            math.log(self.memory_gb),
            1.0 if self.vendor == "amd" else 0.0,
        ]


GPU_FEATURES: tuple[str, ...] = (
    "gpu_log_peak", "gpu_log_fp32", "gpu_log_tf32", "gpu_log_bw", "gpu_log_ridge", "gpu_log_sm",
    "gpu_log_clock", "gpu_log_l2", "gpu_log_mem", "gpu_amd",
)  # fmt: skip


def _normalise(name: str) -> str:
    text = name.lower().replace("_", " ")
    for word in _NOISE_WORDS:
        text = re.sub(rf"\b{word}\b", " ", text)
    return re.sub(r"[^a-z0-9]", "", text)


@lru_cache(maxsize=1)
def _builtin() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    raw = json.loads(resources.files("offpeak_predictor").joinpath("data/gpus.json").read_text())
    specs: dict[str, GpuSpec] = {}
    index: dict[str, str] = {}
    for entry in raw["gpus"]:
        spec = GpuSpec(**{**entry, "aliases": tuple(entry["aliases"])})
        if not _LABEL_SAFE.match(spec.name):
            raise ValueError(f"GPU catalogue name {spec.name!r} is not Kubernetes-label-safe")
        specs[spec.name] = spec
        for key in (spec.name, *spec.aliases):
            index.setdefault(_normalise(key), spec.name)
    return specs, index


def _catalogue() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    """The built-in catalogue plus the site's own GPU types (`$OFFPEAK_GPU_CATALOGUE`, `offpeak_core.sitegpus`)."""
    return _with_site(site_catalogue())


@lru_cache(maxsize=4)
def _with_site(site: SiteCatalogue) -> tuple[dict[str, GpuSpec], dict[str, str]]:
    builtin_specs, builtin_index = _builtin()
    if not site.gpus:
        return builtin_specs, builtin_index
    specs, index = dict(builtin_specs), dict(builtin_index)
    for gpu in site.gpus:
        for key in (gpu.name, *gpu.aliases):
            if _normalise(key) in builtin_index:
                raise UserError(f"GPU catalogue {site.source}: {key!r} ({gpu.name}) is the built-in GPU "
                                f"{builtin_index[_normalise(key)]}; use that name")
        specs[gpu.name] = site_spec(gpu)
        for key in (gpu.name, *gpu.aliases):
            index.setdefault(_normalise(key), gpu.name)
    return specs, index


def site_spec(gpu: SiteGpu) -> GpuSpec:
    """A site GPU as a catalogue entry: bf16 defaults to its fp16 figure and tf32 to its fp32 one, as the built-in
    entries of cards without those units do."""
    f = gpu.fields()
    return GpuSpec(
        name=gpu.name, aliases=gpu.aliases, vendor=str(f["vendor"]), architecture=str(f["architecture"]),
        sm_count=int(f["sm_count"]), cores_per_sm=int(f.get("cores_per_sm", 128)),
        boost_clock_mhz=f["boost_clock_mhz"], memory_bandwidth_gbs=f["memory_bandwidth_gbs"],
        memory_gb=f["memory_gb"], fp32_tflops=f["fp32_tflops"], fp16_tflops=f["fp16_tflops"],
        bf16_tflops=f.get("bf16_tflops", f["fp16_tflops"]), tf32_tflops=f.get("tf32_tflops", f["fp32_tflops"]),
        l2_mb=f["l2_mb"], year=int(f.get("year", 0)), tdp_watts=f.get("tdp_watts", 0.0),
    )  # fmt: skip


def known_gpus() -> list[str]:
    """Canonical names of every GPU in the catalogue."""
    return sorted(_catalogue()[0])


def all_specs() -> list[GpuSpec]:
    specs = _catalogue()[0]
    return [specs[name] for name in sorted(specs)]


def find_gpu(name: str) -> GpuSpec | None:
    """Like `resolve_gpu` but returns None for an unknown name (for data loaders)."""
    specs, index = _catalogue()
    canonical = index.get(_normalise(name))
    return specs[canonical] if canonical else None


def resolve_gpu(name: str) -> GpuSpec:
    """Map a canonical name or alias (`H100`, `NVIDIA_H100_80GB_HBM3`) to its spec; UserError if unknown."""
    spec = find_gpu(name) if name else None
    if spec is None:
        raise UserError(f"unknown GPU {name!r}; known GPUs: {', '.join(known_gpus())}")
    return spec
