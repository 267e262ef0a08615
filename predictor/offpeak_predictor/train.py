"""Training: op-level boosters on single-kernel rows, then the model-level correction on whole-step rows.

Reproducible (fixed seeds, deterministic LightGBM, sorted inputs). Rows are subsampled so a full rebuild
takes minutes on 2 cores.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import lightgbm as lgb
import numpy as np
import pandas as pd

from offpeak_predictor.features import base_times, make_op_table, op_feature_matrix
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import GraphSummary, StepContext, step_composition, step_features, summarise
from offpeak_predictor.intervals import ERA_PT2, Calibration, calibrate, regime_of, software_era
from offpeak_predictor.loaders import graph_args_of, own_sources
from offpeak_predictor.model import BOOSTER_OF_CLASS, RuntimeModel

log = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True, slots=True)
class TrainSettings:
    seed: int = 7
    max_op_rows_per_booster: int = 60_000
    op_rounds: int = 160
    op_leaves: int = 31
    step_rounds: int = 120
    step_leaves: int = 7
    step_min_leaf: int = 10
    threads: int = 2
    p90_quantile: float = 0.9
    # Interval calibration: residuals of grouped folds, once grouped by model family (a new model) and once by GPU
    # (a new GPU type); a regime needs `calibration_min_count` residuals, else it uses its pool.
    calibration_groups: tuple[str, ...] = ("family", "gpu")
    calibration_folds: int = 5
    calibration_min_count: int = 30
    calibration_recentre_p50: bool = False  # see intervals.py: off, it cost held-out accuracy


def _framework(software: object) -> str:
    text = str(software or "").lower()
    if text.startswith("tensorflow"):
        return "tensorflow"
    if text.startswith("torch7"):
        return "torch7"
    if "ngc" in text:
        return "pytorch-ngc"
    return "pytorch"


# --------------------------------------------------------------------------------------------- op level


def op_matrix(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(features, log-ratio target, booster group, log base) for forward-only op rows."""
    ops = ops[ops["mode"] == "fwd"]
    feats, target, groups, bases = [], [], [], []
    for (gpu_name, precision), part in ops.groupby(["gpu", "precision"], sort=True):
        gpu = resolve_gpu(str(gpu_name))
        table = make_op_table(
            op_class=part["op_class"].to_numpy(), flops=part["flops"].to_numpy(), bytes_=part["bytes"].to_numpy(),
            out_numel=part["out_numel"].to_numpy(), lead_dim=part["lead_dim"].to_numpy(),
            dtype_bytes=part["dtype_bytes"].to_numpy(),
        )  # fmt: skip
        base = base_times(table, gpu, str(precision))
        feats.append(op_feature_matrix(table, gpu, str(precision)))
        target.append(np.log(part["time_s"].to_numpy(dtype=np.float64)) - np.log(base))
        groups.append(np.array([BOOSTER_OF_CLASS.get(c, "vector") for c in table.op_class]))
        bases.append(np.log(base))
    if not feats:
        raise ValueError("no forward-only op rows to train on")
    return np.vstack(feats), np.concatenate(target), np.concatenate(groups), np.concatenate(bases)


def fit_op_boosters(ops: pd.DataFrame, settings: TrainSettings) -> dict[str, lgb.Booster]:
    x, y, groups, _ = op_matrix(ops)
    rng = np.random.default_rng(settings.seed)
    boosters: dict[str, lgb.Booster] = {}
    params = {
        "objective": "regression_l1", "learning_rate": 0.08, "num_leaves": settings.op_leaves,
        "min_data_in_leaf": 40, "feature_fraction": 0.9, "bagging_fraction": 0.8, "bagging_freq": 1,
        "seed": settings.seed, "deterministic": True, "num_threads": settings.threads, "verbose": -1,
    }  # fmt: skip
    for name in sorted(set(groups)):
        idx = np.flatnonzero(groups == name)
        if len(idx) > settings.max_op_rows_per_booster:
            idx = np.sort(rng.choice(idx, settings.max_op_rows_per_booster, replace=False))
        data = lgb.Dataset(x[idx], y[idx], free_raw_data=True)
        boosters[name] = lgb.train(params, data, num_boost_round=settings.op_rounds)
    return boosters


# ------------------------------------------------------------------------------------------ model level


def attach_graphs(
    models: pd.DataFrame,
    get_graph: Callable[[dict[str, object]], object],
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, list[GraphSummary]]:
    """Join model rows with graph summaries; rows whose graph cannot be built are dropped (logged)."""
    summaries: dict[str, GraphSummary | None] = {}
    keep, out = [], []
    keys = [json.dumps(graph_args_of(row), sort_keys=True) for _, row in models.iterrows()]
    unique = sorted(set(keys))
    for i, key in enumerate(unique):
        try:
            summaries[key] = summarise(get_graph(json.loads(key)))  # type: ignore[arg-type]
        except Exception as e:  # noqa: BLE001 - one bad model must not stop training
            log.warning("no graph for %s: %s", key, e)
            summaries[key] = None
        if progress:
            progress("graphs", i + 1, len(unique))
    for pos, key in enumerate(keys):
        summary = summaries[key]
        if summary is not None:
            keep.append(pos)
            out.append(summary)
    return models.iloc[keep].reset_index(drop=True), out


def context_of(row: pd.Series) -> StepContext:
    return StepContext(
        mode=str(row["mode"]), optimizer=str(row["optimizer"]), precision=str(row["precision"]),
        num_gpus=int(row["num_gpus"]) if pd.notna(row["num_gpus"]) else 1, framework=_framework(row["software"]),
        era=software_era(row["software"]),
    )  # fmt: skip


def step_matrix(
    model: RuntimeModel, rows: pd.DataFrame, summaries: list[GraphSummary]
) -> tuple[np.ndarray, np.ndarray]:
    """(features, analytic base seconds) of model rows under the model's op boosters."""
    feats, bases = [], []
    for (_, row), summary in zip(rows.iterrows(), summaries, strict=True):
        gpu = resolve_gpu(str(row["gpu"]))
        ctx = context_of(row)
        fwd = model.op_seconds(summary, gpu, ctx.precision)
        base, per_class = step_composition(summary=summary, op_seconds=fwd, gpu=gpu, ctx=ctx)
        feats.append(step_features(summary=summary, base_step=base, per_class=per_class, gpu=gpu, ctx=ctx))
        bases.append(base)
    return np.asarray(feats), np.asarray(bases)


def fit_step_booster(x: np.ndarray, y: np.ndarray, settings: TrainSettings, *, weights: np.ndarray | None = None
                     ) -> lgb.Booster:  # fmt: skip
    params = {
        "objective": "huber", "alpha": 0.3, "learning_rate": 0.05, "num_leaves": settings.step_leaves,
        "min_data_in_leaf": settings.step_min_leaf, "feature_fraction": 0.8, "lambda_l2": 5.0,
        "seed": settings.seed, "deterministic": True, "num_threads": settings.threads, "verbose": -1,
    }  # fmt: skip
    return lgb.train(params, lgb.Dataset(x, y, weight=weights), num_boost_round=settings.step_rounds)


def source_weights(rows: pd.DataFrame) -> np.ndarray:
    """Weight rows so every (source, GPU) pair counts about equally (ryujaehun has 20x more rows than others)."""
    sizes = rows.groupby(["source", "gpu"])["time_s"].transform("size").to_numpy(dtype=np.float64)
    return 1.0 / np.sqrt(sizes)


def grouped_folds(groups: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    """Boolean test masks of up to k folds; every group lies wholly in one fold (groups shuffled by seed)."""
    names = sorted({str(g) for g in groups})
    order = np.random.default_rng(seed).permutation(len(names))
    fold_of = {names[j]: i % k for i, j in enumerate(order)}
    labels = np.array([fold_of[str(g)] for g in groups])
    return [labels == f for f in range(min(k, len(names)))]


def calibration_residuals(
    *, x: np.ndarray, y: np.ndarray, base: np.ndarray, rows: pd.DataFrame, settings: TrainSettings,
    weights: np.ndarray, clip: float,
) -> tuple[np.ndarray, list[str]]:  # fmt: skip
    """Out-of-group residuals log(measured / predicted) of the correction booster and the regime of each, for
    each grouping in `settings.calibration_groups` (a row appears once per grouping). A modern row's residual from
    folds grouped by anything but GPU (a new model on a measured GPU) also calibrates its modern cells
    (`intervals.regime_of`); from folds grouped by GPU, the legacy cells only."""
    resid: list[np.ndarray] = []
    regimes: list[str] = []
    modes, precisions = rows["mode"].astype(str).to_numpy(), rows["precision"].astype(str).to_numpy()
    eras = [software_era(s) for s in rows["software"]] if "software" in rows else [""] * len(rows)
    for column in settings.calibration_groups:
        groups = rows[column].astype(str).to_numpy()
        if len(set(groups)) < 2:
            continue
        r, seconds = np.full(len(y), np.nan), np.full(len(y), np.nan)
        for test in grouped_folds(groups, settings.calibration_folds, settings.seed):
            booster = fit_step_booster(x[~test], y[~test], settings, weights=weights[~test])
            pred = np.clip(booster.predict(x[test], num_threads=settings.threads), -clip, clip)
            r[test] = y[test] - pred
            seconds[test] = base[test] * np.exp(pred)
        resid.append(r)
        gpu_in_training = column != "gpu"  # a new model on a GPU the training rows measured
        regimes.extend(regime_of(mode=m, precision=p, step_seconds=t, era=e, seen=gpu_in_training)
                       for m, p, t, e in zip(modes, precisions, seconds, eras, strict=True))  # fmt: skip
    if not resid:
        return np.zeros(0), []
    return np.concatenate(resid), regimes


def measured_gpu_types(rows: pd.DataFrame) -> frozenset[str]:
    """Canonical names of the GPU types these step rows measured with today's software (`intervals.ERA_PT2`): a
    modern query on one of them is calibrated as a new model on a measured GPU. A GPU type measured only with old
    software is not one: the model has not seen how today's PyTorch runs there."""
    if "software" not in rows:
        return frozenset()
    modern = rows.loc[[software_era(s) == ERA_PT2 for s in rows["software"]], "gpu"]
    return frozenset(resolve_gpu(str(g)).name for g in modern.unique())


def fit_calibration(
    *, x: np.ndarray, y: np.ndarray, base: np.ndarray, rows: pd.DataFrame, settings: TrainSettings,
    weights: np.ndarray, clip: float,
) -> Calibration | None:  # fmt: skip
    """The interval calibration of a correction booster trained on these rows (None: too few groups)."""
    resid, regimes = calibration_residuals(x=x, y=y, base=base, rows=rows, settings=settings, weights=weights,
                                           clip=clip)  # fmt: skip
    if not len(resid):
        return None
    return calibrate(residuals=resid, regimes=regimes, quantile=settings.p90_quantile,
                     min_count=settings.calibration_min_count, recentre=settings.calibration_recentre_p50,
                     measured_gpus=measured_gpu_types(rows),
                     source=f"{settings.calibration_folds}-fold grouped by {' and by '.join(settings.calibration_groups)}")  # fmt: skip


def train_model(
    ops: pd.DataFrame,
    models: pd.DataFrame,
    summaries: list[GraphSummary],
    settings: TrainSettings = TrainSettings(),
    progress: Progress | None = None,
) -> RuntimeModel:
    """Fit every stage; `models` rows and `summaries` are aligned (see `attach_graphs`)."""
    if progress:
        progress("op boosters", 0, 1)
    model = RuntimeModel(op_boosters=fit_op_boosters(ops, settings))
    if progress:
        progress("op boosters", 1, 1)
    if len(models):
        x, base = step_matrix(model, models, summaries)
        y = np.log(models["time_s"].to_numpy(dtype=np.float64)) - np.log(base)
        weights = source_weights(models)
        model.step_booster = fit_step_booster(x, y, settings, weights=weights)
        if progress:
            progress("step booster", 1, 2)
        model.calibration = fit_calibration(x=x, y=y, base=base, rows=models, settings=settings, weights=weights,
                                            clip=model.correction_clip)  # fmt: skip
        if model.calibration is not None:
            _, pooled = model.calibration.lookup("all")
            model.p90_log_margin = max(pooled.q90, 0.0)
        if progress:
            progress("step booster", 2, 2)
    model.version = "offpeak-rt-" + dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    model.training_summary = summary_of(ops, models, settings)
    return model


def summary_of(ops: pd.DataFrame, models: pd.DataFrame, settings: TrainSettings) -> dict[str, object]:
    def counts(col: Iterable[object]) -> dict[str, int]:
        return {str(k): int(v) for k, v in pd.Series(list(col)).value_counts().sort_index().items()}

    return {
        "op_rows": int((ops["mode"] == "fwd").sum()),
        "op_rows_by_source": counts(ops.loc[ops["mode"] == "fwd", "source"]),
        "model_rows": len(models),
        "model_rows_by_source": counts(models["source"]) if len(models) else {},
        "gpus_seen": sorted(set(ops["gpu"]) | set(models["gpu"] if len(models) else [])),
        "model_families_seen": sorted(set(models["family"])) if len(models) else [],
        "settings": asdict(settings),
        "interval_note": "p50/p90 = model seconds x exp(q50/q90) of the prediction's regime (model calibration): "
                         "conformal quantiles of grouped out-of-family and out-of-GPU residuals",
    }


HELD_OUT_FAMILIES = ("densenet", "mnasnet")  # kept apart by the data's READMEs for independent evaluation


def trainable(frame: pd.DataFrame, *, keep_own: bool = False) -> np.ndarray:
    """Which rows may train a model: never the held-out families, even if they ever appear; our own measurements
    (`OWN_GPUS`: H100, H200) only with `keep_own`, and no H100 row otherwise (the public data has none: its READMEs
    hold them out). The shipped model learns from all of them (`load_tables(modern=True)`); the evaluation asks for
    them as its modern slices."""
    keep = np.ones(len(frame), dtype=bool)
    if not keep_own:
        keep &= ~frame["gpu"].astype(str).str.startswith("H100").to_numpy()
        if "source" in frame:
            keep &= ~frame["source"].isin(list(own_sources())).to_numpy()
    if "family" in frame:
        keep &= ~frame["family"].isin(list(HELD_OUT_FAMILIES)).to_numpy()
    return keep


def exclude_holdout(frame: pd.DataFrame, *, keep_own: bool = False) -> pd.DataFrame:
    """The `trainable` rows of `frame`."""
    return frame[trainable(frame, keep_own=keep_own)].reset_index(drop=True)


def log_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.log(np.asarray(a, dtype=np.float64)) - np.log(np.asarray(b, dtype=np.float64))


