"""`offpeak eval-predictor`: grouped cross-validation of whole-step predictions against baselines.

Folds: leave-one-GPU-out (the GPU's op rows AND model rows are removed before training) and
leave-one-model-family-out. Methods: offpeak, roofline, FLOPs-linear (PALEO-style), per-layer MLP (Justus 2018).
Writes `predictor_eval.json` and `predicted_vs_actual.png` into the output folder.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from offpeak_predictor.baselines import FlopsLinear, LayerMLP, roofline_step
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.graphfeatures import GraphSummary
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.pipeline import load_tables, rich_progress
from offpeak_predictor.train import (
    TrainSettings, attach_graphs, context_of, fit_op_boosters, fit_step_booster, op_matrix, source_weights,
    step_matrix,
)  # fmt: skip

log = logging.getLogger(__name__)
METHODS = ("offpeak", "roofline", "flops_linear", "layer_mlp")
# Published mean errors on NeuSight's model-level set for an unseen H100 (NeuSight paper, ASPLOS'25).
PUBLISHED_ANCHORS = {"neusight": 6.6, "li_et_al": 16.7, "roofline": 35.0}


def metrics(actual: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """MAPE, median APE, RMSE (seconds and log), share within 10 % / 20 %."""
    actual, pred = np.asarray(actual, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    if len(actual) == 0:
        return {"n": 0}
    ape = np.abs(pred - actual) / actual * 100.0
    return {
        "n": int(len(actual)),
        "mape": float(ape.mean()),
        "median_ape": float(np.median(ape)),
        "rmse_s": float(np.sqrt(np.mean((pred - actual) ** 2))),
        "rmse_log": float(np.sqrt(np.mean((np.log(pred) - np.log(actual)) ** 2))),
        "within_10pct": float((ape <= 10).mean()),
        "within_20pct": float((ape <= 20).mean()),
    }


def _fold_predictions(
    *, ops: pd.DataFrame, models: pd.DataFrame, summaries: list[GraphSummary], test: np.ndarray,
    settings: TrainSettings, retrain_ops: bool, full: tuple[RuntimeModel, LayerMLP, np.ndarray, np.ndarray],
    ops_test_gpu: str | None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Train every method without the test rows; predict the test rows."""
    train_rows, test_rows = models[~test], models[test]
    train_sums = [s for s, t in zip(summaries, test, strict=True) if not t]
    test_sums = [s for s, t in zip(summaries, test, strict=True) if t]
    full_model, full_mlp, x_all, base_all = full
    if retrain_ops:
        fold_ops = ops[ops["gpu"] != ops_test_gpu]
        op_model = RuntimeModel(op_boosters=fit_op_boosters(fold_ops, settings))
        mlp = _fit_mlp(fold_ops, settings.seed)
        x_train, base_train = step_matrix(op_model, train_rows, train_sums)
    else:
        op_model = RuntimeModel(op_boosters=full_model.op_boosters)
        op_model._op_cache = full_model._op_cache
        mlp = full_mlp
        x_train, base_train = x_all[~test], base_all[~test]
    y_train = np.log(train_rows["time_s"].to_numpy(dtype=np.float64)) - np.log(base_train)
    op_model.step_booster = fit_step_booster(x_train, y_train, settings, weights=source_weights(train_rows))
    train_ctx = [context_of(r) for _, r in train_rows.iterrows()]
    flin = FlopsLinear().fit(train_sums, train_rows, train_ctx)
    out: dict[str, list[float]] = {m: [] for m in METHODS}
    for (_, row), summary in zip(test_rows.iterrows(), test_sums, strict=True):
        gpu, ctx = resolve_gpu(str(row["gpu"])), context_of(row)
        out["offpeak"].append(op_model.predict_step(summary, gpu, ctx).step_seconds)
        out["roofline"].append(roofline_step(summary, gpu, ctx))
        out["flops_linear"].append(flin.predict(summary, gpu, ctx))
        out["layer_mlp"].append(mlp.predict_step(summary, gpu, ctx))
    return {k: np.asarray(v) for k, v in out.items()}


def _fit_mlp(ops: pd.DataFrame, seed: int) -> LayerMLP:
    fwd = ops[(ops["mode"] == "fwd") & ops["op_class"].isin(["gemm", "conv"])]
    x, y, _, log_base = op_matrix(fwd)
    return LayerMLP(seed=seed).fit(x, y + log_base)


def run_evaluation(*, root: Path, out_dir: Path, seed: int = 7, quick: bool = False) -> dict[str, Any]:
    started = time.time()
    ops, models = load_tables(root)
    settings = TrainSettings(seed=seed, max_op_rows_per_booster=15_000, op_rounds=80)
    if quick:
        from offpeak_predictor.pipeline import quick_subsample

        ops, models = quick_subsample(ops, models, seed)
        settings = replace(settings, op_rounds=40, step_rounds=40)
    with rich_progress() as progress:
        models, summaries = attach_graphs(models, get_graph, progress)
        full_op_model = RuntimeModel(op_boosters=fit_op_boosters(ops, settings))
        full_mlp = _fit_mlp(ops, seed)
        x_all, base_all = step_matrix(full_op_model, models, summaries)
        full = (full_op_model, full_mlp, x_all, base_all)
        op_gpus = set(ops["gpu"])
        preds: dict[str, dict[str, np.ndarray]] = {}
        for scheme, column in (("leave_one_gpu_out", "gpu"), ("leave_one_family_out", "family")):
            groups = sorted(models[column].unique())
            if quick:
                groups = groups[:3]
            table = {m: np.full(len(models), np.nan) for m in METHODS}
            for i, group in enumerate(groups):
                test = (models[column] == group).to_numpy()
                if test.all() or not test.any():
                    continue
                retrain = scheme == "leave_one_gpu_out" and group in op_gpus
                fold = _fold_predictions(
                    ops=ops, models=models, summaries=summaries, test=test, settings=settings,
                    retrain_ops=retrain, full=full, ops_test_gpu=group if retrain else None,
                )  # fmt: skip
                for m in METHODS:
                    table[m][test] = fold[m]
                progress(scheme, i + 1, len(groups))
            preds[scheme] = table
    try:
        margin = RuntimeModel.load().p90_log_margin
    except (OSError, ValueError):
        margin = math.log(1.25)
    report = build_report(models, preds, started=started, quick=quick, p90_log_margin=margin)
    out_dir.mkdir(parents=True, exist_ok=True)
    _predictions_frame(models, preds).to_csv(out_dir / "predictions.csv.gz", index=False)
    write_report(report, out_dir / "predictor_eval.json")
    scatter_png(models, preds, out_dir / "predicted_vs_actual.png")
    return report


def _breakdown(frame: pd.DataFrame, pred: dict[str, np.ndarray], by: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, part in frame.groupby(by):
        idx = part.index.to_numpy()
        out[str(key)] = {m: metrics(part["time_s"].to_numpy(), pred[m][idx]) for m in METHODS}
    return out


def _predictions_frame(models: pd.DataFrame, preds: dict[str, dict[str, np.ndarray]]) -> pd.DataFrame:
    cols = ["source", "gpu", "family", "model_name", "mode", "precision", "batch_size", "seq_len", "num_gpus",
            "time_s"]  # fmt: skip
    frame = models[cols].copy()
    for scheme, pred in preds.items():
        for method, values in pred.items():
            frame[f"{scheme}:{method}"] = values
    return frame


def build_report(models: pd.DataFrame, preds: dict[str, dict[str, np.ndarray]], *, started: float, quick: bool,
                 p90_log_margin: float = math.log(1.25)) -> dict[str, Any]:  # fmt: skip
    report: dict[str, Any] = {
        "generated_by": "offpeak eval-predictor" + (" --quick" if quick else ""),
        "seconds": round(time.time() - started, 1),
        "rows": len(models),
        "published_anchors_unseen_h100_neusight_model_level_mape": PUBLISHED_ANCHORS,
        "p90_log_margin_of_shipped_model": p90_log_margin,
        "notes": [
            "leave_one_gpu_out removes the GPU's op rows and model rows before training every method",
            "fold op boosters use 15k rows and 80 rounds per booster (the shipped model: 60k and 160)",
            "H100 is not in the shared data: the NeuSight anchors are for an unseen H100, ours for each unseen GPU",
        ],
        "schemes": {},
    }
    headline: dict[str, Any] = {}
    for scheme, pred in preds.items():
        done = ~np.isnan(pred["offpeak"])
        frame = models[done].reset_index(drop=True)
        p = {m: v[done] for m, v in pred.items()}
        overall = {m: metrics(frame["time_s"].to_numpy(), p[m]) for m in METHODS}
        ns_train = (frame["source"] == "neusight-model") & (frame["mode"] == "train")
        ns_idx = np.flatnonzero(ns_train.to_numpy())
        neusight_train = {m: metrics(frame["time_s"].to_numpy()[ns_idx], p[m][ns_idx]) for m in METHODS}
        covered = frame["time_s"].to_numpy() <= p["offpeak"] * math.exp(p90_log_margin)
        report["schemes"][scheme] = {
            "overall": overall,
            "offpeak_p90_coverage": float(covered.mean()) if len(covered) else math.nan,
            "neusight_model_level_train": neusight_train,
            "per_gpu": _breakdown(frame, p, "gpu"),
            "per_source": _breakdown(frame, p, "source"),
            "per_family": _breakdown(frame, p, "family"),
        }
        headline[scheme] = {m: round(overall[m].get("mape", math.nan), 1) for m in METHODS}
        headline[scheme + "_neusight_train_rows"] = {
            m: round(neusight_train[m].get("mape", math.nan), 1) for m in METHODS
        }
    report["headline"] = {"mape_percent": headline}
    return json_safe(report)


def json_safe(value: Any) -> Any:
    """The report with every NaN/inf (a slice with no rows has no MAPE) as None, so it is valid JSON (null)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def write_report(report: dict[str, Any], path: Path) -> None:
    """Strict JSON: a NaN left in the report is a bug, so it raises rather than writing `NaN`."""
    path.write_text(json.dumps(json_safe(report), indent=1, sort_keys=False, allow_nan=False))


def scatter_png(models: pd.DataFrame, preds: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schemes = list(preds)
    fig, axes = plt.subplots(1, len(schemes), figsize=(6 * len(schemes), 5.5), squeeze=False)
    actual = models["time_s"].to_numpy()
    for ax, scheme in zip(axes[0], schemes, strict=True):
        for method, colour in (("roofline", "tab:gray"), ("flops_linear", "tab:orange"), ("offpeak", "tab:blue")):
            pred = preds[scheme][method]
            ok = ~np.isnan(pred)
            ax.scatter(actual[ok], pred[ok], s=6, alpha=0.5, c=colour, label=method)
        lo, hi = np.nanmin(actual) / 2, np.nanmax(actual) * 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured step seconds")
        ax.set_ylabel("predicted step seconds")
        ax.set_title(scheme.replace("_", " "))
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
