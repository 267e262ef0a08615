"""Step-level ablations of the predictor in about half a minute each (issue #14): what a change to the step
composition or the model-level correction does to the held-out slices that matter, without the full
`offpeak eval-predictor` (20-40 min).

The op boosters are fitted once per run (with and without our H100 single ops, the evaluation's settings); every
variant then recomputes the step features and refits only the correction booster, per fold:

- `h100_family_out`: each model family of our H100 steps, trained on the public rows plus the other families' H100
  steps (the shipped model's case: a new model on a GPU we measured);
- `h100_unseen`: every H100 step, trained on public rows only, op boosters without H100 ops (a new GPU);
- `public_family_out`: each model family of the public rows, trained on the rest plus the H100 steps.

With the baseline variant the first two equal `offpeak eval-predictor`'s `modern_h100_family_out` and
`modern_offpeak_h100` (same folds, seeds and settings). Needs the full data (H100 rows):

    .venv/bin/python bench/predictor_ablation.py [--variant NAME ...] [--json]

Variants (`VARIANTS`): the changes tried on 2026-11-24, kept here so they can be rerun on new data.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from offpeak_core.datapaths import runtime_dir
from offpeak_predictor import graphfeatures, train
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.graphfeatures import GraphSummary, StepContext
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.pipeline import load_tables, modern_model_rows, modern_op_rows
from offpeak_predictor.train import TrainSettings, attach_graphs, fit_op_boosters, fit_step_booster, trainable

SETTINGS = TrainSettings(seed=7, max_op_rows_per_booster=15_000, op_rounds=80)  # as evaluate.run_evaluation


@dataclass(frozen=True)
class Variant:
    """A change under test: booster settings, a host-time model, extra step features, a weight per H100 row."""

    about: str
    settings: TrainSettings = SETTINGS
    host: Callable[[GraphSummary, StepContext], float] | None = None
    legacy_flag: bool = False  # a feature: the row ran PyTorch 1.x
    h100_weight: float = 1.0


def _host_per_op(inference_us: float, train_us: float, amp_cast_us: float = 0.0
                 ) -> Callable[[GraphSummary, StepContext], float]:  # fmt: skip
    """Host time of an eager step: per forward op (a training step's backward included), plus per parameter op
    under autocast (weight casts)."""

    def host(summary: GraphSummary, ctx: StepContext) -> float:
        if ctx.framework == "tensorflow":
            return 0.0
        per_op = train_us if ctx.mode == "train" else inference_us
        casts = summary.param_ops * amp_cast_us * (2 if ctx.mode == "train" else 1)
        return (len(summary.ops) * per_op + (casts if ctx.precision in ("fp16", "bf16") else 0.0)) * 1e-6

    return host


VARIANTS: dict[str, Variant] = {
    "baseline": Variant("the shipped step model"),
    # the lower envelope of our H100 rows: ~20 us a forward op in inference, ~85 in training (PyTorch 2.11)
    "host-pt2": Variant("host floor 20 us/op inference, 80 us/op training", host=_host_per_op(20, 80)),
    "host-pt2-amp": Variant("host-pt2 plus 15 us per weight cast under autocast", host=_host_per_op(20, 80, 15)),
    "legacy-flag": Variant("a PyTorch-1.x feature for the public rows that ran it", legacy_flag=True),
    "h100-x3": Variant("our H100 steps weigh 3x in the correction", h100_weight=3.0),
    "booster-15": Variant("correction with 15 leaves, 5 rows a leaf",
                          settings=replace(SETTINGS, step_leaves=15, step_min_leaf=5)),
    "booster-300": Variant("correction with 300 rounds", settings=replace(SETTINGS, step_rounds=300)),
}


@contextmanager
def _host_model(host: Callable[[GraphSummary, StepContext], float] | None) -> Iterator[None]:
    """Swap `graphfeatures.host_seconds` (read by the step composition and features) for the variant's."""
    original = graphfeatures.host_seconds
    if host is not None:
        graphfeatures.host_seconds = host
    try:
        yield
    finally:
        graphfeatures.host_seconds = original


def _mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - actual) / actual) * 100.0)


class Ablation:
    """The data and the two op models, loaded and fitted once."""

    def __init__(self) -> None:
        root = runtime_dir()
        ops, self.public = load_tables(root)
        self.public, self.public_sums = attach_graphs(self.public, get_graph)
        self.held, self.held_sums = attach_graphs(modern_model_rows(root), get_graph)
        if not len(self.held):
            raise SystemExit(f"no H100 steps under {root}: this bench needs the full data (OFFPEAK_SHARED_DATA)")
        self.op_public = fit_op_boosters(ops, SETTINGS)
        self.op_full = fit_op_boosters(pd.concat([ops, modern_op_rows(root)], ignore_index=True), SETTINGS)

    def _steps(self, variant: Variant, boosters: dict[str, Any], rows: pd.DataFrame, sums: list[GraphSummary]
               ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        with _host_model(variant.host):
            x, base = train.step_matrix(RuntimeModel(op_boosters=boosters), rows, sums)
        if variant.legacy_flag:
            x = np.column_stack([x, rows["software"].astype(str).str.startswith("pytorch-1").to_numpy(float)])
        return x, base

    def _weights(self, variant: Variant, rows: pd.DataFrame) -> np.ndarray:
        h100 = rows["source"].astype(str).to_numpy() == "offpeak-h100"
        return train.source_weights(rows) * np.where(h100, variant.h100_weight, 1.0)

    def _fit_predict(self, variant: Variant, x: np.ndarray, y: np.ndarray, rows: pd.DataFrame,
                     x_test: np.ndarray, base_test: np.ndarray) -> np.ndarray:  # fmt: skip
        booster = fit_step_booster(x, y, variant.settings, weights=self._weights(variant, rows))
        clip = RuntimeModel(op_boosters={}).correction_clip
        return base_test * np.exp(np.clip(booster.predict(x_test, num_threads=variant.settings.threads), -clip, clip))

    def run(self, variant: Variant) -> dict[str, float]:
        pub, held = self.public, self.held
        t_pub, t_held = pub["time_s"].to_numpy(float), held["time_s"].to_numpy(float)
        xp, bp = self._steps(variant, self.op_full, pub, self.public_sums)
        xh, bh = self._steps(variant, self.op_full, held, self.held_sums)
        yp, yh = np.log(t_pub) - np.log(bp), np.log(t_held) - np.log(bh)
        may_train = trainable(held, keep_h100=True)
        out: dict[str, float] = {}

        family_out = np.full(len(held), np.nan)
        for family in sorted(held["family"].astype(str).unique()):
            test = (held["family"] == family).to_numpy()
            fit = may_train & ~test
            rows = pd.concat([pub, held[fit]], ignore_index=True)
            family_out[test] = self._fit_predict(variant, np.vstack([xp, xh[fit]]), np.r_[yp, yh[fit]], rows,
                                                 xh[test], bh[test])  # fmt: skip
        out["h100_family_out"] = _mape(t_held, family_out)

        xp0, bp0 = self._steps(variant, self.op_public, pub, self.public_sums)
        xh0, bh0 = self._steps(variant, self.op_public, held, self.held_sums)
        unseen = self._fit_predict(variant, xp0, np.log(t_pub) - np.log(bp0), pub, xh0, bh0)
        out["h100_unseen"] = _mape(t_held, unseen)

        public_out = np.full(len(pub), np.nan)
        for family in sorted(pub["family"].astype(str).unique()):
            test = (pub["family"] == family).to_numpy()
            rows = pd.concat([pub[~test], held[may_train]], ignore_index=True)
            public_out[test] = self._fit_predict(variant, np.vstack([xp[~test], xh[may_train]]),
                                                 np.r_[yp[~test], yh[may_train]], rows, xp[test], bp[test])  # fmt: skip
        out["public_family_out"] = _mape(t_pub, public_out)
        out["h100_base_only"] = _mape(t_held, bh)  # the step composition before any correction
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: every variant")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(argv)
    names = args.variant or list(VARIANTS)
    print("fitting the op boosters once (about a minute) ...", file=sys.stderr)
    ablation = Ablation()
    results: dict[str, dict[str, float]] = {}
    for i, name in enumerate(names, 1):
        results[name] = ablation.run(VARIANTS[name])
        print(f"[{i}/{len(names)}] {name}", file=sys.stderr)
        if not args.json:
            cells = "  ".join(f"{k} {v:5.1f}" for k, v in results[name].items() if math.isfinite(v))
            print(f"{name:14s} MAPE %  {cells}   ({VARIANTS[name].about})")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
