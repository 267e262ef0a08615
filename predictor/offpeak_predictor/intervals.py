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


def precision_family(precision: str) -> str:
    """`amp` for autocast precisions (fp16, bf16), `full` for fp32/tf32."""
    return "amp" if precision in AMP_PRECISIONS else "full"


def size_bucket(step_seconds: float) -> str:
    for edge, name in zip(SIZE_EDGES_S, SIZE_NAMES, strict=False):
        if step_seconds < edge:
            return name
    return SIZE_NAMES[-1]


def regime_of(*, mode: str, precision: str, step_seconds: float) -> str:
    """`train/amp/medium`: the calibration cell of one prediction (step_seconds: the model's own p50)."""
    return f"{'train' if mode == 'train' else 'inference'}/{precision_family(precision)}/{size_bucket(step_seconds)}"


def _parents(regime: str) -> list[str]:
    """The regime, its (mode, precision family) pool, then everything."""
    head = regime.rsplit("/", 1)[0]
    return [regime, head, POOLED]


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

    def offsets(self, *, mode: str, precision: str, step_seconds: float) -> tuple[float, float]:
        """(log p50 offset, log p90 offset) for a prediction of `step_seconds` (the model's own p50)."""
        _, cell = self.lookup(regime_of(mode=mode, precision=precision, step_seconds=step_seconds))
        q50 = cell.q50 if self.recentre else 0.0
        return q50, max(cell.q90, q50)

    def to_dict(self) -> dict[str, Any]:
        return {"min_count": self.min_count, "quantile": self.quantile, "source": self.source, "recentre": self.recentre,
                "size_edges_s": list(SIZE_EDGES_S),
                "cells": {k: {"q50": c.q50, "q90": c.q90, "n": c.n} for k, c in sorted(self.cells.items())}}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        cells = {str(k): Cell(q50=float(v["q50"]), q90=float(v["q90"]), n=int(v["n"]))
                 for k, v in data["cells"].items()}  # fmt: skip
        if POOLED not in cells:
            raise ValueError("calibration has no pooled cell")
        return cls(cells=cells, min_count=int(data.get("min_count", 30)), quantile=float(data.get("quantile", 0.9)),
                   source=str(data.get("source", "")), recentre=bool(data.get("recentre", False)))  # fmt: skip

    @classmethod
    def fixed(cls, log_margin: float) -> Calibration:
        """The old behaviour: p50 unchanged, p90 = p50 x exp(margin) everywhere (models saved before calibration)."""
        return cls(cells={POOLED: Cell(q50=0.0, q90=max(log_margin, 0.0), n=1)}, min_count=1, source="fixed margin")


def calibrate(
    *, residuals: Sequence[float] | np.ndarray, regimes: Sequence[str], quantile: float = 0.9, min_count: int = 30,
    source: str = "", recentre: bool = False,
) -> Calibration:  # fmt: skip
    """Calibration from out-of-model residuals log(measured / predicted) and the regime of each row."""
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
    return Calibration(cells=cells, min_count=min_count, quantile=quantile, source=source, recentre=recentre)


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
