"""Calibrated p90: split-conformal quantiles of out-of-model log residuals, per regime (pure).

A residual is log(measured / predicted) of a row whose model (or GPU) the predicting booster never saw. For each
regime the calibration stores two log offsets taken from those residuals, their median q50 and the conformal 90 %
quantile q90, and serves

    p50 = model seconds                 (or model seconds * exp(q50) with `recentre`)
    p90 = model seconds * exp(q90)      (never below the p50)

`recentre` is off: moving the p50 to the residuals' median made the held-out mean error worse (35 % -> 42-46 % in
`offpeak eval-predictor`, 2026-11-23), because the residuals are skewed; the p90 is the same either way.

A regime is what generalises beyond the training models: mode (train / inference) x precision family (full:
fp32/tf32; amp: fp16/bf16) x a coarse size bucket of the predicted step (< 10 ms, < 100 ms, longer). A regime with
fewer than `min_count` residuals falls back to its (mode, precision family) pool, then to all residuals.

Steps timed with today's software (PyTorch 2 or later, `ERA_PT2`) on a GPU type the training rows measured with
such software get cells of their own (`pt2|seen|train/amp/medium`), learnt from modern rows' residuals of folds
grouped by model family (a new model on a measured GPU). Why: there the model's errors are not those of the old
public rows (PyTorch 1.x and TensorFlow on 2016-2020 GPUs, with host overheads of their own), which made the p90 of a
new model on our H100 cover 97 % of steps at 1.70 x the p50 (90.6 % at 1.46 with these cells, `offpeak
eval-predictor`, 2026-11-25). A GPU type without such rows keeps the legacy chain above, which pools every residual,
GPU-grouped ones included: modern rows of left-out GPUs come from too few GPU types (NeuSight's eight) to say how
far off an unmeasured GPU is (cells of their own covered 77 % of our H100 steps with the H100 left out). A modern
regime falls back through its own pools, then to the legacy chain, which holds every modern residual too: a model
file without modern cells, or without its measured GPUs, serves as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

AMP_PRECISIONS = frozenset({"fp16", "bf16"})
SIZE_EDGES_S: tuple[float, ...] = (0.010, 0.100)  # predicted step seconds: small | medium | large
SIZE_NAMES: tuple[str, ...] = ("small", "medium", "large")
POOLED = "all"
ERA_PT2 = "pt2"  # steps timed with PyTorch 2 or later (what a cluster's jobs run today)
SEEN = "seen"  # the query's GPU type has modern measured steps in the training rows
_PREFIX_SEP = "|"


def precision_family(precision: str) -> str:
    """`amp` for autocast precisions (fp16, bf16), `full` for fp32/tf32."""
    return "amp" if precision in AMP_PRECISIONS else "full"


def size_bucket(step_seconds: float) -> str:
    for edge, name in zip(SIZE_EDGES_S, SIZE_NAMES, strict=False):
        if step_seconds < edge:
            return name
    return SIZE_NAMES[-1]


def software_era(software: object) -> str:
    """`pt2` for a step timed with PyTorch 2 or later (`pytorch-2.11`, `pytorch-2.1`), else `` (older PyTorch,
    TensorFlow, Torch7, NGC containers of unstated version, unknown)."""
    text = str(software or "").strip().lower()
    if not text.startswith("pytorch-"):
        return ""
    major = text.removeprefix("pytorch-").split(".", 1)[0]
    return ERA_PT2 if major.isdigit() and int(major) >= 2 else ""


def regime_of(*, mode: str, precision: str, step_seconds: float, era: str = "", seen: bool = False) -> str:
    """`train/amp/medium`: the calibration cell of one prediction (step_seconds: the model's own p50);
    `pt2|seen|train/amp/medium` for a step of today's software on a GPU type measured with it (`seen`)."""
    base = f"{'train' if mode == 'train' else 'inference'}/{precision_family(precision)}/{size_bucket(step_seconds)}"
    if era != ERA_PT2 or not seen:
        return base
    return f"{era}{_PREFIX_SEP}{SEEN}{_PREFIX_SEP}{base}"


def _parents(regime: str) -> list[str]:
    """The regime, its (mode, precision family) pool, its era pool (modern regimes), then the legacy chain: the base
    regime, its pool, everything."""
    prefix, _, base = regime.rpartition(_PREFIX_SEP)
    head = base.rsplit("/", 1)[0]
    legacy = [base, head, POOLED]
    if not prefix:
        return legacy
    return [regime, f"{prefix}{_PREFIX_SEP}{head}", prefix, *legacy]


def conformal_quantile(residuals: np.ndarray, q: float) -> float:
    """Split-conformal quantile: the ceil((n + 1) q)-th smallest residual (the largest when that exceeds n)."""
    r = np.sort(np.asarray(residuals, dtype=np.float64))
    if not len(r):
        raise ValueError("no residuals to calibrate on")
    k = min(len(r), math.ceil((len(r) + 1) * q))
    return float(r[max(k, 1) - 1])


@dataclass(frozen=True, slots=True)
class Cell:
    """Log offsets of one regime (or pool) and how many residuals they come from."""

    q50: float
    q90: float
    n: int


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per-regime (and pooled) log offsets for p50 and p90; `lookup` falls back to the nearest pool."""

    cells: dict[str, Cell] = field(default_factory=dict)
    min_count: int = 30
    quantile: float = 0.9
    source: str = ""  # how the residuals were made, for the model file and the report
    recentre: bool = False  # move the p50 by the regime's median residual too
    measured_gpus: frozenset[str] = frozenset()  # GPU types (canonical names) with modern steps in the residuals

    def lookup(self, regime: str) -> tuple[str, Cell]:
        """(the cell name used, its offsets): the regime's own when it has `min_count` residuals."""
        for name in _parents(regime):
            cell = self.cells.get(name)
            if cell is not None and cell.n >= self.min_count:
                return name, cell
        cell = self.cells.get(POOLED)
        if cell is None:
            raise KeyError("calibration has no pooled cell")
        return POOLED, cell

    def offsets(self, *, mode: str, precision: str, step_seconds: float, era: str = "", gpu: str | None = None
                ) -> tuple[float, float]:  # fmt: skip
        """(log p50 offset, log p90 offset) for a prediction of `step_seconds` (the model's own p50) on GPU type
        `gpu` (canonical name; None: unknown) of software era `era`."""
        seen = gpu is not None and gpu in self.measured_gpus
        _, cell = self.lookup(regime_of(mode=mode, precision=precision, step_seconds=step_seconds, era=era,
                                        seen=seen))  # fmt: skip
        q50 = cell.q50 if self.recentre else 0.0
        return q50, max(cell.q90, q50)

    def to_dict(self) -> dict[str, Any]:
        return {"min_count": self.min_count, "quantile": self.quantile, "source": self.source, "recentre": self.recentre,
                "size_edges_s": list(SIZE_EDGES_S), "measured_gpus": sorted(self.measured_gpus),
                "cells": {k: {"q50": c.q50, "q90": c.q90, "n": c.n} for k, c in sorted(self.cells.items())}}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        cells = {str(k): Cell(q50=float(v["q50"]), q90=float(v["q90"]), n=int(v["n"]))
                 for k, v in data["cells"].items()}  # fmt: skip
        if POOLED not in cells:
            raise ValueError("calibration has no pooled cell")
        return cls(cells=cells, min_count=int(data.get("min_count", 30)), quantile=float(data.get("quantile", 0.9)),
                   source=str(data.get("source", "")), recentre=bool(data.get("recentre", False)),
                   measured_gpus=frozenset(str(g) for g in data.get("measured_gpus", ())))  # fmt: skip

    @classmethod
    def fixed(cls, log_margin: float) -> Calibration:
        """The old behaviour: p50 unchanged, p90 = p50 x exp(margin) everywhere (models saved before calibration)."""
        return cls(cells={POOLED: Cell(q50=0.0, q90=max(log_margin, 0.0), n=1)}, min_count=1, source="fixed margin")


def calibrate(
    *, residuals: Sequence[float] | np.ndarray, regimes: Sequence[str], quantile: float = 0.9, min_count: int = 30,
    source: str = "", recentre: bool = False, measured_gpus: frozenset[str] = frozenset(),
) -> Calibration:  # fmt: skip
    """Calibration from out-of-model residuals log(measured / predicted) and the regime of each row (modern
    regimes need `measured_gpus`, the GPU types of the modern steps the residuals come from, to be served)."""
    r = np.asarray(residuals, dtype=np.float64)
    names = np.asarray(list(regimes), dtype=object)
    if len(r) != len(names):
        raise ValueError("one regime per residual")
    ok = np.isfinite(r)
    r, names = r[ok], names[ok]
    if not len(r):
        raise ValueError("no finite residuals to calibrate on")
    members: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        for parent in _parents(str(name)):
            members.setdefault(parent, []).append(i)
    cells = {}
    for name, idx in members.items():
        part = r[idx]
        q50 = float(np.median(part))
        cells[name] = Cell(q50=q50, q90=conformal_quantile(part, quantile), n=len(part))
    return Calibration(cells=cells, min_count=min_count, quantile=quantile, source=source, recentre=recentre,
                       measured_gpus=frozenset(measured_gpus))  # fmt: skip


def interval_metrics(*, actual: np.ndarray, p50: np.ndarray, p90: np.ndarray) -> dict[str, float]:
    """Coverage of the p90 (share of rows measured at or below it) and width (p90 / p50: median, mean, p90)."""
    actual, p50, p90 = (np.asarray(a, dtype=np.float64) for a in (actual, p50, p90))
    ok = np.isfinite(actual) & np.isfinite(p50) & np.isfinite(p90)
    if not ok.any():
        return {"n": 0}
    width = p90[ok] / p50[ok]
    return {
        "n": int(ok.sum()),
        "p90_coverage": float((actual[ok] <= p90[ok]).mean()),
        "p50_share_below": float((actual[ok] <= p50[ok]).mean()),
        "median_width": float(np.median(width)),
        "mean_width": float(width.mean()),
        "p90_width": float(np.quantile(width, 0.9)),
    }
