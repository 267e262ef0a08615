"""`offpeak eval-predictor`: grouped cross-validation of whole-step predictions against baselines.

Folds: leave-one-GPU-out (the GPU's op rows AND model rows are removed before training) and
leave-one-model-family-out over the public rows; where our own measurements are present (`OWN_GPUS`: real steps
and single ops with today's PyTorch on an H100 and an H200), two "modern" slices of those rows:
`modern_gpu_out`, each of our GPUs predicted by every method trained on the public rows plus our rows of the other
GPUs (a GPU it never measured, steps and single ops), and `modern_family_out`, each family of our rows predicted by
methods trained on everything else (a new model on a GPU we measured, the case of the shipped model, which trains on
all of them). Both report each GPU separately, with the host-bound slice (batch <= 8) and the AMP slice apart.
Methods: offpeak, roofline, FLOPs-linear (PALEO-style), per-layer MLP (Justus 2018).
Intervals: each fold calibrates its p50/p90 from its own training rows only (`train.fit_calibration`, as the shipped
model does), so a test row's residual never informs its own interval; coverage and width per slice.
Writes `predictor_eval.json` and `predicted_vs_actual.png` into the output folder.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from offpeak_predictor.baselines import FlopsLinear, LayerMLP, roofline_step
from offpeak_predictor.features import make_op_table
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.graphfeatures import GraphSummary
from offpeak_predictor.intervals import interval_metrics, regime_of
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.pipeline import load_tables, modern_model_rows, modern_op_rows, rich_progress
from offpeak_predictor.train import (
    TrainSettings, attach_graphs, context_of, fit_calibration, fit_op_boosters, fit_step_booster, op_matrix,
    source_weights, step_matrix, trainable,
)  # fmt: skip

log = logging.getLogger(__name__)
METHODS = ("offpeak", "roofline", "flops_linear", "layer_mlp")
# Published mean errors on NeuSight's model-level set for an unseen H100 (NeuSight paper, ASPLOS'25).
PUBLISHED_ANCHORS = {"neusight": 6.6, "li_et_al": 16.7, "roofline": 35.0}
# The interval before calibration (model file of 2026-11-22): p90 = model seconds x 2.13 everywhere.
LEGACY_P90_LOG_MARGIN = 0.7568449609344708
# Interval columns of a fold's offpeak predictions (beside METHODS): calibrated p90, the model's own point
# estimate (before the p50 offset) and the legacy fixed-multiplier p90.
INTERVAL_COLUMNS = ("offpeak_p90", "offpeak_model", "offpeak_legacy_p90")
FullFit = tuple[RuntimeModel, LayerMLP, np.ndarray, np.ndarray]  # op model, per-layer MLP, step features, bases
# Slices of our own rows reported apart, per GPU: small batches are host-bound on a fast GPU (launching the kernels,
# not the GPU, sets the step), and AMP steps run casts and half-precision kernels that fp32 steps do not.
OWN_SLICES: dict[str, Callable[[pd.DataFrame], np.ndarray]] = {
    "all": lambda frame: np.ones(len(frame), dtype=bool),
    "host_bound_batch_le_8": lambda frame: (frame["batch_size"] <= 8).to_numpy(),
    "amp": lambda frame: frame["precision"].isin(["fp16", "bf16"]).to_numpy(),
    "fp32": lambda frame: (frame["precision"] == "fp32").to_numpy(),
}


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
    settings: TrainSettings, retrain_ops: bool, full: FullFit,
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
    weights = source_weights(train_rows)
    op_model.step_booster = fit_step_booster(x_train, y_train, settings, weights=weights)
    op_model.calibration = fit_calibration(x=x_train, y=y_train, base=base_train, rows=train_rows.reset_index(drop=True),
                                           settings=settings, weights=weights, clip=op_model.correction_clip)  # fmt: skip
    train_ctx = [context_of(r) for _, r in train_rows.iterrows()]
    flin = FlopsLinear().fit(train_sums, train_rows, train_ctx)
    out: dict[str, list[float]] = {m: [] for m in (*METHODS, *INTERVAL_COLUMNS)}
    uncalibrated = RuntimeModel(op_boosters=op_model.op_boosters, step_booster=op_model.step_booster,
                                p90_log_margin=LEGACY_P90_LOG_MARGIN)  # fmt: skip
    uncalibrated._op_cache = op_model._op_cache
    for (_, row), summary in zip(test_rows.iterrows(), test_sums, strict=True):
        gpu, ctx = resolve_gpu(str(row["gpu"])), context_of(row)
        pred, legacy = op_model.predict_step(summary, gpu, ctx), uncalibrated.predict_step(summary, gpu, ctx)
        out["offpeak"].append(pred.step_seconds)
        out["offpeak_p90"].append(pred.step_seconds_p90)
        out["offpeak_model"].append(legacy.step_seconds)
        out["offpeak_legacy_p90"].append(legacy.step_seconds_p90)
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
    public_ops, models = load_tables(root)
    settings = TrainSettings(seed=seed, max_op_rows_per_booster=15_000, op_rounds=80)
    if quick:
        from offpeak_predictor.pipeline import quick_subsample

        public_ops, models = quick_subsample(public_ops, models, seed)
        settings = replace(settings, op_rounds=40, step_rounds=40)
    own_ops = modern_op_rows(root)
    with rich_progress() as progress:
        models, summaries = attach_graphs(models, get_graph, progress)
        public = _full_fit(public_ops, models, summaries, settings)
        # Our single ops train the op models of every scheme that does not call their GPU unseen: no public test row
        # is on a GPU we measured, and the shipped model learns from them too.
        ops = pd.concat([public_ops, own_ops], ignore_index=True) if len(own_ops) else public_ops
        full = _full_fit(ops, models, summaries, settings) if len(own_ops) else public
        op_gpus = set(ops["gpu"])
        preds: dict[str, dict[str, np.ndarray]] = {}
        for scheme, column in (("leave_one_gpu_out", "gpu"), ("leave_one_family_out", "family")):
            groups = sorted(models[column].unique())
            if quick:
                groups = groups[:3]
            table = {m: np.full(len(models), np.nan) for m in (*METHODS, *INTERVAL_COLUMNS)}
            for i, group in enumerate(groups):
                test = (models[column] == group).to_numpy()
                if test.all() or not test.any():
                    continue
                retrain = scheme == "leave_one_gpu_out" and group in op_gpus
                fold = _fold_predictions(
                    ops=ops, models=models, summaries=summaries, test=test, settings=settings,
                    retrain_ops=retrain, full=full, ops_test_gpu=group if retrain else None,
                )  # fmt: skip
                for m, values in fold.items():
                    table[m][test] = values
                progress(scheme, i + 1, len(groups))
            preds[scheme] = table
        modern = _modern_slice(root=root, public_ops=public_ops, own_ops=own_ops, models=models, summaries=summaries,
                               settings=settings, full=full, progress=progress, quick=quick)  # fmt: skip
    report = build_report(models, preds, started=started, quick=quick)
    frames = [_predictions_frame(models, preds)]
    if modern is not None:
        rows, modern_preds = modern
        for scheme, pred in modern_preds.items():
            done = ~np.isnan(pred["offpeak"])
            report["schemes"][scheme] = _scheme_report(rows[done], {m: v[done] for m, v in pred.items()},
                                                       per_model=True)  # fmt: skip
            report["headline"]["mape_percent"][scheme] = {
                m: round(report["schemes"][scheme]["overall"][m].get("mape", math.nan), 1) for m in METHODS}
            report["headline"]["intervals"][scheme] = _interval_headline(report["schemes"][scheme])
            report["headline"]["own_gpus"][scheme] = _own_gpu_headline(report["schemes"][scheme])
        frames.append(_predictions_frame(rows, modern_preds))
    report["modern_ops"] = modern_op_report(root=root, model=public[0])
    report = json_safe(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    pd.concat(frames, ignore_index=True).to_csv(out_dir / "predictions.csv.gz", index=False)
    write_report(report, out_dir / "predictor_eval.json")
    scatter_png(models, preds, out_dir / "predicted_vs_actual.png")
    return report


def _full_fit(ops: pd.DataFrame, models: pd.DataFrame, summaries: list[GraphSummary], settings: TrainSettings
              ) -> FullFit:  # fmt: skip
    """Op boosters and per-layer MLP trained on `ops`, with the model rows' step features under them."""
    op_model = RuntimeModel(op_boosters=fit_op_boosters(ops, settings))
    x_all, base_all = step_matrix(op_model, models, summaries)
    return op_model, _fit_mlp(ops, settings.seed), x_all, base_all


def _modern_slice(
    *, root: Path, public_ops: pd.DataFrame, own_ops: pd.DataFrame, models: pd.DataFrame,
    summaries: list[GraphSummary], settings: TrainSettings, full: FullFit, progress: Any, quick: bool = False,
) -> tuple[pd.DataFrame, dict[str, dict[str, np.ndarray]]] | None:  # fmt: skip
    """Our own steps (`OWN_GPUS`) predicted two ways (None: none in the data):

    - `modern_gpu_out`: each GPU of ours predicted by every method trained on the public rows of other GPUs plus
      our steps and single ops of the *other* GPUs of ours (a GPU it never measured);
    - `modern_family_out`: each model family of our rows (on every GPU of ours) predicted by every method trained on
      the public rows plus our single ops and our steps of the *other* families, as the shipped model is: a new
      model on a GPU we measured.
    """
    held = modern_model_rows(root)
    if not len(held):
        return None
    held, held_sums = attach_graphs(held, get_graph, progress)
    if not len(held):
        return None
    may_train = trainable(held, keep_own=True)

    def predict(fit: FullFit, held_steps: tuple[np.ndarray, np.ndarray], extra: np.ndarray, test: np.ndarray,
                public: np.ndarray | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """Train on the `public` rows (default all) plus `held[extra]` over `fit`'s op models (`held_steps`: the held
        rows' step features under them); predict `held[test]`."""
        full_model, full_mlp, x_all, base_all = fit
        public = np.ones(len(models), dtype=bool) if public is None else public
        x_held, base_held = held_steps
        pick = lambda sums, mask: [s for s, keep in zip(sums, mask, strict=True) if keep]  # noqa: E731
        rows = pd.concat([models[public], held[extra], held[test]], ignore_index=True)
        mask = np.r_[np.zeros(int(public.sum()) + int(extra.sum()), dtype=bool), np.ones(int(test.sum()), dtype=bool)]
        return _fold_predictions(
            ops=public_ops, models=rows, summaries=[*pick(summaries, public), *pick(held_sums, extra),
                                                    *pick(held_sums, test)], test=mask,
            settings=settings, retrain_ops=False, ops_test_gpu=None,
            full=(full_model, full_mlp, np.vstack([x_all[public], x_held[extra], x_held[test]]),
                  np.r_[base_all[public], base_held[extra], base_held[test]]),
        )  # fmt: skip

    def empty() -> dict[str, np.ndarray]:
        return {m: np.full(len(held), np.nan) for m in (*METHODS, *INTERVAL_COLUMNS)}

    gpu_out = empty()
    gpus = sorted(held["gpu"].astype(str).unique())
    for i, gpu in enumerate(gpus):
        test = (held["gpu"] == gpu).to_numpy()
        # unseen means unseen: the public rows of that GPU (Lambda's few H200 steps) leave too
        fold_ops = pd.concat([public_ops[public_ops["gpu"] != gpu], own_ops[own_ops["gpu"] != gpu]], ignore_index=True)
        fit = _full_fit(fold_ops, models, summaries, settings)
        public = (models["gpu"] != gpu).to_numpy()
        held_steps = step_matrix(fit[0], held, held_sums)
        for m, values in predict(fit, held_steps, may_train & ~test, test, public).items():
            gpu_out[m][test] = values
        progress("modern: each GPU of ours out", i + 1, len(gpus))
    family_out = empty()
    families = sorted(held["family"].astype(str).unique())
    if quick:
        families = families[:3]
    held_steps = step_matrix(full[0], held, held_sums)  # one op model for every family
    for i, family in enumerate(families):
        test = (held["family"] == family).to_numpy()
        for m, values in predict(full, held_steps, may_train & ~test, test).items():
            family_out[m][test] = values
        progress("modern: each family of ours out", i + 1, len(families))
    return held, {"modern_gpu_out": gpu_out, "modern_family_out": family_out}


def modern_op_report(*, root: Path, model: RuntimeModel) -> dict[str, Any] | None:
    """Our own single ops (`OWN_GPUS`) priced by an op model that never saw them, per GPU: error per class and
    precision, and the measured vs predicted speed-up of tf32 and bf16 over fp32 on the same GEMM shapes."""
    ops = modern_op_rows(root)
    if not len(ops):
        return None
    pred = np.full(len(ops), np.nan)
    for (gpu_name, precision), part in ops.groupby(["gpu", "precision"], sort=True):
        table = make_op_table(op_class=part["op_class"].to_numpy(), flops=part["flops"].to_numpy(),
                              bytes_=part["bytes"].to_numpy(), out_numel=part["out_numel"].to_numpy(),
                              lead_dim=part["lead_dim"].to_numpy(), dtype_bytes=part["dtype_bytes"].to_numpy())  # fmt: skip
        pred[part.index.to_numpy()] = model._price_ops(table, resolve_gpu(str(gpu_name)), str(precision))
    out: dict[str, Any] = {"rows": len(ops), "per_gpu": {}}
    for gpu_name, on_gpu in ops.assign(pred=pred).groupby("gpu", sort=True):
        out["per_gpu"][str(gpu_name)] = _op_slices(on_gpu.reset_index(drop=True))
    return out


def _op_slices(ops: pd.DataFrame) -> dict[str, Any]:
    """One GPU's single ops (`time_s` measured, `pred` priced): error per class and precision, GEMM speed-ups."""
    actual, pred = ops["time_s"].to_numpy(dtype=np.float64), ops["pred"].to_numpy(dtype=np.float64)
    out: dict[str, Any] = {"rows": len(ops), "per_class_precision": {}}
    for (cls, precision), part in ops.groupby(["op_class", "precision"], sort=True):
        idx = part.index.to_numpy()
        out["per_class_precision"][f"{cls}/{precision}"] = metrics(actual[idx], pred[idx])
    gemm = ops[ops["op_class"] == "gemm"]
    wide = gemm.pivot_table(index=["flops", "out_numel", "lead_dim"], columns="precision", values=["time_s", "pred"])
    speedups = {}
    for other in ("tf32", "bf16", "fp16"):
        if ("time_s", other) in wide and ("time_s", "fp32") in wide:
            measured = wide[("time_s", "fp32")] / wide[("time_s", other)]
            predicted = wide[("pred", "fp32")] / wide[("pred", other)]
            big = wide[("time_s", "fp32")] >= 1e-4  # shapes large enough not to be launch-bound
            speedups[f"{other}_over_fp32"] = {
                "median_measured": float(np.median(measured[big])), "median_predicted": float(np.median(predicted[big])),
                "n_shapes": int(big.sum()),
            }  # fmt: skip
    out["gemm_speedup_fp32_shapes_over_100us"] = speedups
    return out


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


def build_report(models: pd.DataFrame, preds: dict[str, dict[str, np.ndarray]], *, started: float,
                 quick: bool) -> dict[str, Any]:  # fmt: skip
    report: dict[str, Any] = {
        "generated_by": "offpeak eval-predictor" + (" --quick" if quick else ""),
        "seconds": round(time.time() - started, 1),
        "rows": len(models),
        "published_anchors_unseen_h100_neusight_model_level_mape": PUBLISHED_ANCHORS,
        "legacy_p90_log_margin": LEGACY_P90_LOG_MARGIN,
        "notes": [
            "leave_one_gpu_out removes the GPU's op rows and model rows before training every method",
            "fold op boosters use 15k rows and 80 rounds per booster (the shipped model: 60k and 160)",
            "offpeak is the p50 as served (the model's estimate; the calibration does not move it unless recentre)",
            "intervals: each fold calibrates p50/p90 on its training rows only (5 grouped folds by family and by GPU)",
            "intervals.legacy_fixed_multiplier: p90 = model seconds x 2.13, the interval before calibration",
            "modern_gpu_out: each GPU we measured (H100, H200), trained on the public rows plus our steps and single "
            "ops of the other GPUs, asked for that GPU's steps",
            "modern_family_out: each family of our steps (every GPU of ours), trained on every other row plus our "
            "single ops and our steps of the other families (as the shipped model, which trains on all of them)",
            "headline.own_gpus: per GPU of ours, all steps, the host-bound slice (batch <= 8), AMP and fp32 apart",
        ],
        "schemes": {},
    }
    headline: dict[str, Any] = {}
    intervals: dict[str, Any] = {}
    for scheme, pred in preds.items():
        done = ~np.isnan(pred["offpeak"])
        frame = models[done].reset_index(drop=True)
        p = {m: v[done] for m, v in pred.items()}
        report["schemes"][scheme] = _scheme_report(frame, p)
        overall = report["schemes"][scheme]["overall"]
        neusight_train = report["schemes"][scheme]["neusight_model_level_train"]
        headline[scheme] = {m: round(overall[m].get("mape", math.nan), 1) for m in METHODS}
        headline[scheme + "_neusight_train_rows"] = {
            m: round(neusight_train[m].get("mape", math.nan), 1) for m in METHODS
        }
        intervals[scheme] = _interval_headline(report["schemes"][scheme])
    report["headline"] = {"mape_percent": headline, "intervals": intervals, "own_gpus": {}}
    return json_safe(report)


def _interval_headline(scheme: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name in ("calibrated", "legacy_fixed_multiplier"):
        m = scheme["intervals"][name]
        out[name] = {k: round(m[k], 3) if k in m else None for k in ("p90_coverage", "median_width")}
    return out


def _scheme_report(frame: pd.DataFrame, p: dict[str, np.ndarray], *, per_model: bool = False) -> dict[str, Any]:
    """Accuracy of every method and the p90's coverage and width for one slice (rows aligned with `p`)."""
    frame = frame.reset_index(drop=True)
    actual = frame["time_s"].to_numpy(dtype=np.float64)
    overall = {m: metrics(actual, p[m]) for m in METHODS}
    overall["offpeak_model"] = metrics(actual, p["offpeak_model"])
    ns_idx = np.flatnonzero(((frame["source"] == "neusight-model") & (frame["mode"] == "train")).to_numpy())
    regimes = np.array([regime_of(mode=str(m), precision=str(q), step_seconds=float(t))
                        for m, q, t in zip(frame["mode"], frame["precision"], p["offpeak_model"], strict=True)])  # fmt: skip

    def intervals_by(keys: np.ndarray) -> dict[str, dict[str, float]]:
        return {str(k): interval_metrics(actual=actual[keys == k], p50=p["offpeak"][keys == k],
                                         p90=p["offpeak_p90"][keys == k]) for k in sorted(set(keys))}  # fmt: skip

    return {
        "overall": overall,
        "offpeak_p90_coverage": float((actual <= p["offpeak_p90"]).mean()) if len(actual) else math.nan,
        "intervals": {
            "calibrated": interval_metrics(actual=actual, p50=p["offpeak"], p90=p["offpeak_p90"]),
            "legacy_fixed_multiplier": interval_metrics(actual=actual, p50=p["offpeak_model"],
                                                        p90=p["offpeak_legacy_p90"]),  # fmt: skip
            "per_regime": intervals_by(regimes),
            "per_gpu": intervals_by(frame["gpu"].astype(str).to_numpy()),
            "per_family": intervals_by(frame["family"].astype(str).to_numpy()),
            "per_source": intervals_by(frame["source"].astype(str).to_numpy()),
        },
        "neusight_model_level_train": {m: metrics(actual[ns_idx], p[m][ns_idx]) for m in METHODS},
        "per_gpu": _breakdown(frame, p, "gpu"),
        "per_source": _breakdown(frame, p, "source"),
        "per_family": _breakdown(frame, p, "family"),
        **({"per_model": _breakdown(frame, p, "model_name"), "per_gpu_slice": _per_gpu_slices(frame, p)}
           if per_model else {}),
    }


def _per_gpu_slices(frame: pd.DataFrame, p: dict[str, np.ndarray]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every method's accuracy per GPU and `OWN_SLICES` slice (rows of `frame` aligned with `p`)."""
    actual = frame["time_s"].to_numpy(dtype=np.float64)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for gpu, part in frame.groupby("gpu", sort=True):
        out[str(gpu)] = {}
        for name, select in OWN_SLICES.items():
            idx = part.index.to_numpy()[select(part)]
            out[str(gpu)][name] = {m: metrics(actual[idx], p[m][idx]) for m in METHODS}
    return out


def _own_gpu_headline(scheme: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per GPU and slice: rows and every method's MAPE (the table of docs/predictor.md)."""
    return {
        gpu: {name: {"n": cells["offpeak"]["n"], **{m: round(cells[m].get("mape", math.nan), 1) for m in METHODS}}
              for name, cells in slices.items()}
        for gpu, slices in scheme["per_gpu_slice"].items()
    }  # fmt: skip


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
