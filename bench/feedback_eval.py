"""Closing the loop, measured: stream one model family's measured rows as samples, one at a time, and watch the
error of the next prediction drop.

Rows: ryujaehun torchvision step times (`offpeak_predictor.loaders.load_ryujaehun` on
`offpeak_core.datapaths.runtime_dir()`). The model's prediction of each row is the *leave-one-family-out*
prediction of `offpeak eval-predictor` (reports/predictor/predictions.csv.gz): a model that never saw the family,
which is what a cluster meets when it first runs a new kind of model. Each row is predicted with the correction
learned so far (`offpeak_predictor.correction`, the code the predictor serves), then judged and learned exactly
as POST /v1/samples does (`offpeak_predictor.samples.judge`). The graph key stands for the graph's content hash
(model, batch, precision, mode); the family key is shared by the family's other models.

    .venv/bin/python bench/feedback_eval.py [--family resnet] [--all] [--seeds 5] [--prior-strength 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak_core.datapaths import runtime_dir
from offpeak_predictor.correction import Z90, CorrectionSettings, CorrectionTable, keys_for
from offpeak_predictor.loaders import load_ryujaehun
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.samples import judge

REPORT = Path(__file__).resolve().parents[1] / "reports" / "predictor" / "predictions.csv.gz"
MODEL_COLUMN = "leave_one_family_out:offpeak"
JOIN = ["gpu", "model_name", "mode", "precision", "num_gpus", "batch_size", "time_s"]
BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 9), (10, 10**9))


@dataclass(frozen=True, slots=True)
class Step:
    """One streamed row: what was predicted before its sample was learned."""

    family_samples: int  # samples of its family key learned before it
    actual: float
    model: float
    corrected: float
    model_p90: float
    corrected_p90: float
    status: str  # how its own sample was judged


def measured_rows() -> pd.DataFrame:
    """ryujaehun rows with the held-out model prediction of each."""
    rows = load_ryujaehun(runtime_dir())
    report = pd.read_csv(REPORT)
    report = report[report["source"] == "ryujaehun"][[*JOIN, MODEL_COLUMN]]
    joined = rows.merge(report, on=JOIN, how="inner", validate="one_to_one")
    return joined.rename(columns={MODEL_COLUMN: "model_s"})


def stream(rows: pd.DataFrame, *, settings: CorrectionSettings, p90_log_margin: float, seed: int) -> list[Step]:
    """Predict, then learn, each row in a random arrival order."""
    table = CorrectionTable(settings)
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    out = []
    for i in order:
        r = rows.iloc[i]
        keys = keys_for(graph_hash=f"{r.model_name}|bs{r.batch_size}|{r.precision}|{r['mode']}", family=r.family,
                        gpu_type=r.gpu, precision=r.precision, mode=r["mode"], batch_size=int(r.batch_size),
                        num_gpus=int(r.num_gpus))  # fmt: skip
        correction = table.lookup(keys, p90_log_margin=p90_log_margin)
        p50, p90 = correction.apply(float(r.model_s))
        judged = judge(measured=float(r.time_s), predicted=float(r.model_s), settings=settings)
        out.append(Step(family_samples=table.evidence(keys[0]).n, actual=float(r.time_s), model=float(r.model_s),
                        corrected=p50, model_p90=float(r.model_s) * math.exp(p90_log_margin), corrected_p90=p90,
                        status=judged.status))  # fmt: skip
        if judged.log_ratio is not None:
            table.add(keys, judged.log_ratio)
    return out


def _ape(pred: float, actual: float) -> float:
    return abs(pred - actual) / actual * 100


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _label(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f">={lo}")


def summary(steps: Sequence[Step], *, orders: int = 1) -> dict[str, Any]:
    """MAPE of the model and of the corrected prediction, by the family samples learned before each row.

    `steps` may pool several arrival orders (`orders`); row counts are then per order.
    """
    by_bin = []
    for lo, hi in BINS:
        part = [s for s in steps if lo <= s.family_samples <= hi]
        if part:
            by_bin.append({
                "samples_before": _label(lo, hi), "rows": len(part) / orders,
                "model_mape": _mean([_ape(s.model, s.actual) for s in part]),
                "corrected_mape": _mean([_ape(s.corrected, s.actual) for s in part]),
                "model_p90_coverage": _mean([float(s.actual <= s.model_p90) for s in part]),
                "corrected_p90_coverage": _mean([float(s.actual <= s.corrected_p90) for s in part]),
                "corrected_p90_width": _mean([s.corrected_p90 / s.corrected for s in part]),
            })  # fmt: skip
    return {
        "rows": len(steps) / orders, "model_mape": _mean([_ape(s.model, s.actual) for s in steps]),
        "corrected_mape": _mean([_ape(s.corrected, s.actual) for s in steps]),
        "quarantined": sum(s.status == "quarantined" for s in steps) / orders, "by_samples_before": by_bin,
    }  # fmt: skip


def evaluate(rows: pd.DataFrame, *, settings: CorrectionSettings, p90_log_margin: float,
             seeds: int) -> dict[str, Any]:  # fmt: skip
    """`summary` over `seeds` random arrival orders, pooled."""
    steps = [step for seed in range(seeds)
             for step in stream(rows, settings=settings, p90_log_margin=p90_log_margin, seed=seed)]  # fmt: skip
    return summary(steps, orders=seeds)


def print_table(name: str, result: dict[str, Any], margin: float) -> None:
    print(f"\n{name}: {result['rows']:.0f} rows streamed one at a time; model alone {result['model_mape']:.1f} % MAPE, "
          f"with the correction {result['corrected_mape']:.1f} % ({result['quarantined']:.0f} quarantined); "
          f"model p90 = p50 x {math.exp(margin):.2f}")  # fmt: skip
    print(f"{'family samples before':>22} {'rows':>6} {'model MAPE':>11} {'corrected':>10} "
          f"{'p90 cover model/corr':>21} {'p90/p50':>8}")
    for b in result["by_samples_before"]:
        print(f"{b['samples_before']:>22} {b['rows']:>6.0f} {b['model_mape']:>10.1f}% {b['corrected_mape']:>9.1f}% "
              f"{b['model_p90_coverage']:>10.0%} / {b['corrected_p90_coverage']:>4.0%} "
              f"{b['corrected_p90_width']:>8.2f}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="resnet", help="model family to stream (default resnet)")
    parser.add_argument("--all", action="store_true", help="also every other family, one line each")
    parser.add_argument("--seeds", type=int, default=5, help="random arrival orders averaged (default 5)")
    parser.add_argument("--prior-strength", type=float, default=CorrectionSettings().prior_strength)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args(argv)
    rows = measured_rows()
    margin = RuntimeModel.load().p90_log_margin
    settings = CorrectionSettings(prior_strength=args.prior_strength)
    families = sorted(rows["family"].unique()) if args.all else [args.family]
    if args.family not in set(rows["family"]):
        print(f"unknown family {args.family!r}; known: {', '.join(sorted(rows['family'].unique()))}", file=sys.stderr)
        return 2
    results = {f: evaluate(rows[rows["family"] == f], settings=settings, p90_log_margin=margin, seeds=args.seeds)
               for f in families}  # fmt: skip
    if args.json:
        print(json.dumps({"prior_strength": args.prior_strength, "seeds": args.seeds, "z90": Z90,
                          "families": results}, indent=2))  # fmt: skip
        return 0
    for family, result in results.items():
        print_table(family, result, margin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
