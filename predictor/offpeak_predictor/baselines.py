"""Baselines the evaluation compares against: roofline, FLOPs-linear (PALEO-style), per-layer MLP (Justus 2018).

Each baseline prices a whole step from the same graph summaries the offpeak model uses.
"""

from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from offpeak_predictor.features import BACKWARD_FACTOR, op_feature_matrix, roofline_times
from offpeak_predictor.gpus import GpuSpec, resolve_gpu
from offpeak_predictor.graphfeatures import OPTIMIZER_BYTES_PER_PARAM, GraphSummary, StepContext


def roofline_step(summary: GraphSummary, gpu: GpuSpec, ctx: StepContext) -> float:
    """Sum over ops of max(FLOPs/peak, bytes/bandwidth), backward by class factors, optimizer traffic."""
    t_c, t_m = roofline_times(summary.ops, gpu, ctx.precision)
    per_op = np.maximum(t_c, t_m)
    if ctx.mode == "train":
        per_op = per_op * np.array([1.0 + BACKWARD_FACTOR[c] for c in summary.ops.op_class])
        extra = summary.params * OPTIMIZER_BYTES_PER_PARAM.get(ctx.optimizer, 32.0) / gpu.bandwidth_bytes
    else:
        extra = 0.0
    return float(per_op.sum()) + extra


def step_flops(summary: GraphSummary, ctx: StepContext) -> float:
    return float(summary.ops.flops.sum()) * (3.0 if ctx.mode == "train" else 1.0)


@dataclass
class FlopsLinear:
    """PALEO-style: time = step FLOPs / (peak x efficiency); one efficiency per precision, fitted (median in log
    space) on the training rows."""

    log_efficiency: float = math.log(0.3)
    per_precision: dict[str, float] = field(default_factory=dict)

    def fit(self, summaries: list[GraphSummary], rows: pd.DataFrame, contexts: list[StepContext]) -> FlopsLinear:
        ratios: dict[str, list[float]] = {}
        for summary, (_, row), ctx in zip(summaries, rows.iterrows(), contexts, strict=True):
            ideal = step_flops(summary, ctx) / resolve_gpu(str(row["gpu"])).peak_flops(ctx.precision)
            ratios.setdefault(ctx.precision, []).append(math.log(ideal) - math.log(float(row["time_s"])))
        self.per_precision = {p: float(np.median(v)) for p, v in ratios.items()}
        everything = [x for v in ratios.values() for x in v]
        self.log_efficiency = float(np.median(everything)) if everything else self.log_efficiency
        return self

    def predict(self, summary: GraphSummary, gpu: GpuSpec, ctx: StepContext) -> float:
        eff = self.per_precision.get(ctx.precision, self.log_efficiency)
        return step_flops(summary, ctx) / gpu.peak_flops(ctx.precision) / math.exp(eff)


class LayerMLP:
    """Justus et al. 2018: an MLP predicts each conv/dense layer's time from layer + hardware features;
    a model's time is the sum over its layers (other ops ignored). Trained with torch on the CPU."""

    def __init__(self, *, hidden: int = 64, epochs: int = 25, seed: int = 7, max_rows: int = 30_000) -> None:
        self.hidden, self.epochs, self.seed, self.max_rows = hidden, epochs, seed, max_rows
        self.net: Any = None
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None

    def fit(self, x: np.ndarray, log_t: np.ndarray) -> LayerMLP:
        import torch

        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        if len(x) > self.max_rows:
            idx = rng.choice(len(x), self.max_rows, replace=False)
            x, log_t = x[idx], log_t[idx]
        self.mean, self.std = x.mean(axis=0), x.std(axis=0) + 1e-6
        xt = torch.tensor((x - self.mean) / self.std, dtype=torch.float32)
        yt = torch.tensor(log_t, dtype=torch.float32).unsqueeze(1)
        net = torch.nn.Sequential(
            torch.nn.Linear(x.shape[1], self.hidden), torch.nn.ReLU(), torch.nn.Linear(self.hidden, self.hidden),
            torch.nn.ReLU(), torch.nn.Linear(self.hidden, 1),
        )  # fmt: skip
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
        gen = torch.Generator().manual_seed(self.seed)
        for _ in range(self.epochs):
            perm = torch.randperm(len(xt), generator=gen)
            for start in range(0, len(xt), 512):
                batch = perm[start : start + 512]
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(xt[batch]), yt[batch])
                loss.backward()
                opt.step()
        self.net = net.eval()
        return self

    def predict_log(self, x: np.ndarray) -> np.ndarray:
        import torch

        if self.net is None or self.mean is None or self.std is None:
            raise RuntimeError("LayerMLP is not fitted")
        with torch.no_grad():
            out = self.net(torch.tensor((x - self.mean) / self.std, dtype=torch.float32))
        return out.numpy()[:, 0].astype(np.float64)

    def predict_step(self, summary: GraphSummary, gpu: GpuSpec, ctx: StepContext) -> float:
        mask = np.isin(summary.ops.op_class, ("gemm", "conv"))
        if not mask.any():
            return 1e-6
        feats = op_feature_matrix(summary.ops, gpu, ctx.precision)[mask]
        fwd = float(np.exp(self.predict_log(feats)).sum())
        return fwd * (3.0 if ctx.mode == "train" else 1.0)
