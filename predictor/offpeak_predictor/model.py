"""The trained predictor: op-level LightGBM boosters + model-level correction booster + interval calibration.

`RuntimeModel.predict_step` is the whole inference path: graph summary -> per-op forward seconds on the GPU ->
analytic step composition (backward, optimizer) -> learned model-level correction -> calibrated p50 and p90
(per-regime conformal offsets, `intervals.Calibration`).
Boosters are injectable (tests build tiny ones); `load`/`save` use one gzipped JSON file.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np

from offpeak_predictor.features import DistinctOps, OpTable, base_times, distinct_ops, op_feature_matrix
from offpeak_predictor.gpus import GpuSpec
from offpeak_predictor.graphfeatures import GraphSummary, StepContext, step_composition, step_features
from offpeak_predictor.intervals import Calibration
from offpeak_predictor.lru import SizedLRU

# Op classes grouped into the boosters that price them (memory-bound classes share one).
BOOSTER_OF_CLASS: dict[str, str] = {
    "gemm": "gemm", "conv": "conv", "norm": "vector", "softmax": "vector", "elementwise": "vector",
    "memory": "vector",
}  # fmt: skip
DEFAULT_MODEL_FILE = "data/default_model.json.gz"
_GROUP_CODE = {"gemm": 0, "conv": 1, "vector": 2}


@dataclass(frozen=True, slots=True)
class StepPrediction:
    step_seconds: float
    step_seconds_p90: float
    base_seconds: float  # analytic composition before the model-level correction
    forward_seconds: float


OP_CACHE_BYTES = 128 * 2**20  # per-op forward seconds, per (graph, GPU, precision); a Predictor bounds it lower

@dataclass
class RuntimeModel:
    """Everything needed to price a graph on a GPU. `op_boosters` predict log(t / roofline base) per op."""

    op_boosters: dict[str, lgb.Booster]
    step_booster: lgb.Booster | None = None
    p90_log_margin: float = math.log(1.25)  # pooled log(p90 / p50); only where no calibration is stored
    calibration: Calibration | None = None  # per-regime p50/p90 offsets from out-of-model residuals
    correction_clip: float = math.log(4.0)  # the correction never moves the analytic estimate beyond x4
    version: str = "untrained"
    training_summary: dict[str, Any] = field(default_factory=dict)
    _op_cache: SizedLRU[tuple[str, str, str], np.ndarray] = field(
        default_factory=lambda: SizedLRU(max_bytes=OP_CACHE_BYTES, sizeof=lambda a: int(a.nbytes)), repr=False)

    # ------------------------------------------------------------------ inference

    @property
    def op_cache_bytes(self) -> int:
        """Approximate bytes held by the per-op price cache."""
        return self._op_cache.bytes

    def bound_op_cache(self, max_bytes: int) -> None:
        """Bound the per-op price cache (the predictor service gives it a share of `--cache-mib`)."""
        self._op_cache.resize(max_bytes)

    def op_seconds(self, summary: GraphSummary, gpu: GpuSpec, precision: str) -> np.ndarray:
        """Predicted forward seconds of each op (cached per summary object, GPU and precision)."""
        key = (summary.key, gpu.name, precision)
        cached = self._op_cache.get(key)
        if cached is not None:
            return cached
        out = self._price_distinct(summary.distinct, gpu, precision)
        self._op_cache.put(key, out)
        return out

    def _price_ops(self, table: OpTable, gpu: GpuSpec, precision: str) -> np.ndarray:
        """Forward seconds per op of a table that is not a graph summary's (op rows in the evaluation)."""
        return self._price_distinct(distinct_ops(table), gpu, precision)

    def _price_distinct(self, ops: DistinctOps, gpu: GpuSpec, precision: str) -> np.ndarray:
        """Forward seconds per op: each distinct op (a repeated block once) priced by its class's booster."""
        sub = ops.table
        if not len(sub):
            return np.zeros(0)
        groups = np.array([_GROUP_CODE[BOOSTER_OF_CLASS.get(c, "vector")] for c in sub.op_class])
        out = base_times(sub, gpu, precision)
        feats = op_feature_matrix(sub, gpu, precision)
        for name, booster in self.op_boosters.items():
            mask = groups == _GROUP_CODE[name]
            if mask.any():
                out[mask] = out[mask] * np.exp(booster.predict(feats[mask], num_threads=1))
        return out[ops.inverse]

    def predict_step(self, summary: GraphSummary, gpu: GpuSpec, ctx: StepContext) -> StepPrediction:
        fwd = self.op_seconds(summary, gpu, ctx.precision)
        base, per_class = step_composition(summary=summary, op_seconds=fwd, gpu=gpu, ctx=ctx)
        correction = 0.0
        if self.step_booster is not None:
            feats = np.asarray([step_features(summary=summary, base_step=base, per_class=per_class, gpu=gpu,
                                              ctx=ctx)])  # fmt: skip
            correction = float(self.step_booster.predict(feats, num_threads=1)[0])
            correction = max(-self.correction_clip, min(self.correction_clip, correction))
        p50, p90 = self.interval(base * math.exp(correction), ctx, gpu.name)
        return StepPrediction(step_seconds=p50, step_seconds_p90=p90, base_seconds=base,
                              forward_seconds=float(fwd.sum()))  # fmt: skip

    def interval(self, model_seconds: float, ctx: StepContext, gpu: str | None = None) -> tuple[float, float]:
        """(p50, p90) step seconds from the model's point estimate: the calibration's offsets for its regime (on GPU
        type `gpu`, canonical name; None: not known)."""
        calibration = self.calibration or Calibration.fixed(self.p90_log_margin)
        q50, q90 = calibration.offsets(mode=ctx.mode, precision=ctx.precision, step_seconds=model_seconds,
                                       era=ctx.era, gpu=gpu)  # fmt: skip
        return model_seconds * math.exp(q50), model_seconds * math.exp(q90)

    def predict_steps_batch(
        self, items: list[tuple[GraphSummary, GpuSpec, StepContext]]
    ) -> list[StepPrediction]:
        """Many (graph, GPU) pairs with one booster call for the model-level correction."""
        bases, rows = [], []
        for summary, gpu, ctx in items:
            fwd = self.op_seconds(summary, gpu, ctx.precision)
            base, per_class = step_composition(summary=summary, op_seconds=fwd, gpu=gpu, ctx=ctx)
            bases.append((base, float(fwd.sum())))
            rows.append(step_features(summary=summary, base_step=base, per_class=per_class, gpu=gpu, ctx=ctx))
        if self.step_booster is not None and rows:
            corr = np.clip(self.step_booster.predict(np.asarray(rows), num_threads=1), -self.correction_clip,
                           self.correction_clip)  # fmt: skip
        else:
            corr = np.zeros(len(rows))
        out = []
        for (b, f), c, (_, gpu, ctx) in zip(bases, corr, items, strict=True):
            p50, p90 = self.interval(b * math.exp(c), ctx, gpu.name)
            out.append(StepPrediction(step_seconds=p50, step_seconds_p90=p90, base_seconds=b, forward_seconds=f))
        return out

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "offpeak-runtime-model/v1",
            "version": self.version,
            "p90_log_margin": self.p90_log_margin,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "correction_clip": self.correction_clip,
            "training_summary": self.training_summary,
            "op_boosters": {k: b.model_to_string() for k, b in self.op_boosters.items()},
            "step_booster": self.step_booster.model_to_string() if self.step_booster else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuntimeModel:
        if data.get("format") != "offpeak-runtime-model/v1":
            raise ValueError(f"not an offpeak runtime model (format {data.get('format')!r})")
        return cls(
            op_boosters={k: lgb.Booster(model_str=s) for k, s in data["op_boosters"].items()},
            step_booster=lgb.Booster(model_str=data["step_booster"]) if data.get("step_booster") else None,
            p90_log_margin=float(data["p90_log_margin"]),
            calibration=Calibration.from_dict(data["calibration"]) if data.get("calibration") else None,
            correction_clip=float(data.get("correction_clip", math.log(4.0))),
            version=str(data["version"]),
            training_summary=dict(data.get("training_summary", {})),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(gzip.compress(json.dumps(self.to_dict()).encode(), mtime=0))

    @classmethod
    def load(cls, path: str | Path | None = None) -> RuntimeModel:
        """Load a model file; None = the default model shipped in the package."""
        if path is None:
            raw = resources.files("offpeak_predictor").joinpath(DEFAULT_MODEL_FILE).read_bytes()
        else:
            raw = Path(path).read_bytes()
        return cls.from_dict(json.loads(gzip.decompress(raw)))
