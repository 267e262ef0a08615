"""Periodic re-fit of the runtime model from measured job samples, judged by a shadow evaluation (pure: no I/O).

What can be re-fitted inside the cluster. The op boosters learned from ~330,000 single-kernel rows of the public
benchmarks (`../shared/data`), which the predictor image does not carry; a cluster's samples are whole training
steps, which say nothing about single kernels. So a candidate keeps the serving model's op boosters (and with them
the analytic base of every step) and its interval calibration, and re-fits only the step-level correction:
it *continues boosting* the serving model's step booster (`lightgbm.train(init_model=...)`) on

* the accepted job samples turned into model rows (`samples_as_model_rows`: the sample's graph, GPU type,
  precision, mode, optimizer and GPU count; target log(measured step / analytic base), the same target as
  `train.train_model`), and
* optionally the benchmark DB's model rows (`model_samples`, filled by `predictor build-db` or `offpeak collect`)
  as replay, weighted like training weights them (`train.source_weights`) so that the added trees do not forget
  the benchmarks; they are used for fitting only, never for the decision.

Continuing rather than re-fitting from scratch: a cluster may hold a few dozen samples, far too few to learn the
step correction again, while a few shallow trees on top of the serving trees learn what the samples add (e.g.
"this family is 40 % slower on this GPU type than the benchmarks say") and, unlike the online correction
(`correction.py`, exact keys only), carry it over to batch sizes, GPU counts and models of the same kind.

Shadow evaluation. The samples are split into grouped folds (a group is one model, `model_name` of the sample's
graph, so no model is in both the training and the held-out part of a fold); each fold's candidate is fitted on
the other folds (plus replay) exactly as the final candidate is fitted on all samples, and predicts its held-out
samples. Serving and candidate are compared on the same held-out samples by the mean absolute log error of the
model's own p50 (|log(measured / predicted)|: symmetric, so over- and under-prediction weigh alike); MAPE,
median APE and the share within 20 % are reported too. Promotion needs at least `min_samples` usable samples,
`min_groups` distinct models, and a candidate error not above the serving model's (plus `tolerance`); otherwise
the serving model stays and the decision says why. Predictions are compared without the online correction:
after a promotion the correction is re-learned against the new model (`samples.Feedback.rebuild`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from offpeak_predictor.correction import CorrectionSettings, implausible
from offpeak_predictor.gpus import find_gpu
from offpeak_predictor.graphfeatures import GraphSummary, StepContext, summarise
from offpeak_predictor.loaders import MODEL_COLUMNS
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.samples import _graph_or_none, sample_from_row
from offpeak_predictor.train import Progress, grouped_folds, source_weights, step_matrix

REFIT_MARK = "+refit."
SAMPLE_SOURCE = "job-samples"


@dataclass(frozen=True, slots=True)
class RefitSettings:
    """How a candidate is fitted and when it replaces the serving model. Errors are |log(measured / p50)|."""

    min_samples: int = 30  # usable accepted samples (with a graph and a step time) needed to try a re-fit
    min_groups: int = 4  # distinct models among them (the grouped folds need several)
    folds: int = 5
    rounds: int = 40  # trees added to the serving step booster
    learning_rate: float = 0.1
    leaves: int = 7
    min_leaf: int = 5
    lambda_l2: float = 5.0
    replay_weight: float = 1.0  # total weight of the DB's model rows relative to the samples' (when given)
    tolerance: float = 0.0  # promote when candidate error <= serving error + tolerance
    seed: int = 7
    threads: int = 2
    quarantine_ratio: float = CorrectionSettings().quarantine_ratio  # samples further off are not learned from


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """Errors of one model's p50 on held-out samples."""

    n: int
    mean_abs_log: float
    median_abs_log: float
    mape: float  # percent
    median_ape: float  # percent
    within_20: float  # share of samples within 20 %

    @classmethod
    def of(cls, *, measured: np.ndarray, predicted: np.ndarray) -> ErrorStats:
        if not len(measured):
            return cls(n=0, mean_abs_log=math.nan, median_abs_log=math.nan, mape=math.nan, median_ape=math.nan,
                       within_20=math.nan)  # fmt: skip
        log_err = np.abs(np.log(measured) - np.log(predicted))
        ape = np.abs(predicted - measured) / measured * 100.0
        return cls(n=len(measured), mean_abs_log=float(log_err.mean()), median_abs_log=float(np.median(log_err)),
                   mape=float(ape.mean()), median_ape=float(np.median(ape)), within_20=float((ape <= 20.0).mean()))


@dataclass(frozen=True, slots=True)
class ShadowEvaluation:
    """Serving vs candidate on the same held-out samples (out-of-fold predictions), overall and per fold."""

    serving: ErrorStats
    candidate: ErrorStats
    folds: int
    groups: int
    per_fold: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Decision:
    promote: bool
    reason: str
    serving_version: str
    candidate_version: str | None = None


@dataclass(frozen=True, slots=True)
class RefitResult:
    decision: Decision
    evaluation: ShadowEvaluation | None
    samples: dict[str, int]  # usable, and skipped by reason
    candidate: RuntimeModel | None = None  # the model to promote (None unless decision.promote)

    def to_dict(self) -> dict[str, Any]:
        """What `offpeak predictor refit` prints and `POST /v1/model/refit` answers."""
        return {"decision": asdict(self.decision), "samples": self.samples,
                "evaluation": _finite(asdict(self.evaluation)) if self.evaluation else None}  # fmt: skip


def _finite(value: Any) -> Any:
    """NaN -> None, so the answer is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def refit_version(base_version: str, now: dt.datetime) -> str:
    """`<base>+refit.<UTC time>`: the base model it was re-fitted from, and when (a refit of a refit keeps the base)."""
    return base_version.split(REFIT_MARK)[0] + REFIT_MARK + now.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def base_version_of(version: str) -> str:
    return version.split(REFIT_MARK)[0]


# ------------------------------------------------------------------------------------------------ rows


@dataclass(frozen=True, slots=True)
class StepRows:
    """Model rows with their step features under the serving model's op boosters (shared by every candidate)."""

    rows: pd.DataFrame
    x: np.ndarray
    base: np.ndarray  # analytic step seconds

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def target(self) -> np.ndarray:
        return np.log(self.rows["time_s"].to_numpy(dtype=np.float64)) - np.log(self.base)

    @classmethod
    def build(cls, model: RuntimeModel, rows: pd.DataFrame, summaries: list[GraphSummary]) -> StepRows:
        if not len(rows):
            return cls(rows=rows, x=np.zeros((0, 0)), base=np.zeros(0))
        x, base = step_matrix(model, rows, summaries)
        return cls(rows=rows.reset_index(drop=True), x=x, base=base)

    def subset(self, mask: np.ndarray) -> StepRows:
        return StepRows(rows=self.rows[mask].reset_index(drop=True), x=self.x[mask], base=self.base[mask])


def samples_as_model_rows(samples: pd.DataFrame) -> tuple[pd.DataFrame, list[GraphSummary], Counter[str]]:
    """Accepted job samples (rows of `BenchmarkDB.job_samples()`) as model rows with their graph summaries.

    A sample is used when it was accepted, carries a valid graph and a measured step time, and names a known GPU
    type. Extra columns: `group` (the model: its graph's model_name, else the graph hash), `sample_id`.
    """
    skipped: Counter[str] = Counter()
    out: list[dict[str, Any]] = []
    summaries: list[GraphSummary] = []
    by_hash: dict[str, GraphSummary] = {}
    for row in samples.sort_values("id").to_dict("records"):
        if row.get("status") != "accepted":
            skipped[f"status {row.get('status') or 'unjudged'}"] += 1
            continue
        raw = json.loads(row["graph"]) if isinstance(row.get("graph"), str) and row["graph"] else None
        graph = _graph_or_none(raw)
        if graph is None:
            skipped["no valid graph"] += 1
            continue
        sample = sample_from_row(row, graph)
        if sample.step_seconds is None:
            skipped["no step time"] += 1
            continue
        if find_gpu(sample.gpu_type) is None:
            skipped["unknown GPU type"] += 1
            continue
        key = sample.graph_hash or graph.content_hash()
        summary = by_hash.get(key)
        if summary is None:
            summary = by_hash[key] = summarise(graph, key=key)
        summaries.append(summary)
        out.append({
            "source": SAMPLE_SOURCE, "gpu": sample.gpu_type, "precision": sample.precision, "mode": sample.mode,
            "optimizer": sample.optimizer if sample.mode == "train" else "none", "model_name": graph.model_name,
            "family": sample.family, "graph_kind": "sample", "graph_ref": key, "batch_size": graph.batch_size,
            "seq_len": None, "input_shape": None, "num_gpus": sample.num_gpus, "time_s": sample.step_seconds,
            "time_std": None, "software": "pytorch", "group": graph.model_name or key, "sample_id": row["id"],
        })  # fmt: skip
    columns = [*MODEL_COLUMNS, "group", "sample_id"]
    return pd.DataFrame(out, columns=columns), summaries, skipped


def plausible(serving: RuntimeModel, rows: StepRows, settings: RefitSettings) -> np.ndarray:
    """Mask of rows within `quarantine_ratio` of the serving model's own p50 (the online quarantine's rule)."""
    rule = CorrectionSettings(quarantine_ratio=settings.quarantine_ratio)
    measured = rows.rows["time_s"].to_numpy(dtype=np.float64)
    return np.array([implausible(math.log(m / p), rule) is None
                     for m, p in zip(measured, p50_seconds(serving, rows), strict=True)], dtype=bool)  # fmt: skip


# ----------------------------------------------------------------------------------------- fit, predict


def p50_seconds(model: RuntimeModel, rows: StepRows, booster: lgb.Booster | None = None) -> np.ndarray:
    """The model's own p50 step seconds of each row (as `RuntimeModel.predict_step`), with `booster` instead of
    its step booster when given."""
    if not len(rows):
        return np.zeros(0)
    booster = booster if booster is not None else model.step_booster
    corr = np.zeros(len(rows)) if booster is None else booster.predict(rows.x, num_threads=1)
    seconds = rows.base * np.exp(np.clip(corr, -model.correction_clip, model.correction_clip))
    modes, precisions = rows.rows["mode"].astype(str), rows.rows["precision"].astype(str)
    return np.array([model.interval(float(s), StepContext(mode=m, precision=p))[0]
                     for s, m, p in zip(seconds, modes, precisions, strict=True)])  # fmt: skip


def _weights(samples: StepRows, replay: StepRows, settings: RefitSettings) -> np.ndarray:
    """Each sample weighs 1; the replay rows together weigh `replay_weight` x the samples, per (source, GPU) as in
    training."""
    if not len(replay):
        return np.ones(len(samples))
    w = source_weights(replay.rows)
    w = w / w.sum() * len(samples) * settings.replay_weight
    return np.concatenate([np.ones(len(samples)), w])


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


def _shifted(booster: lgb.Booster, shift: float) -> lgb.Booster:
    """A copy of the booster whose every prediction is `shift` higher (added to each leaf of its last tree)."""
    out = lgb.Booster(model_str=booster.model_to_string())
    last = out.num_trees() - 1
    for leaf in range(int(out.dump_model(start_iteration=last)["tree_info"][0]["num_leaves"])):
        out.set_leaf_output(last, leaf, out.get_leaf_output(last, leaf) + shift)
    return out


def fit_booster(serving: RuntimeModel, samples: StepRows, replay: StepRows, settings: RefitSettings) -> lgb.Booster:
    """The serving step booster, shifted by the rows' weighted median residual, plus `rounds` trees fitted to what
    remains (from scratch if the model has no step booster).

    The shift comes first because boosting cannot learn it: when a whole family runs 40 % slower, every row has
    the same residual, no split has any gain, and LightGBM adds no tree.
    """
    parts = [p for p in (samples, replay) if len(p)]
    x = np.vstack([p.x for p in parts])
    y = np.concatenate([p.target for p in parts])
    weights = _weights(samples, replay, settings)
    params = {
        "objective": "huber", "alpha": 0.3, "learning_rate": settings.learning_rate, "num_leaves": settings.leaves,
        "min_data_in_leaf": settings.min_leaf, "lambda_l2": settings.lambda_l2, "seed": settings.seed,
        "deterministic": True, "num_threads": settings.threads, "verbose": -1,
    }  # fmt: skip
    init = serving.step_booster
    if init is not None:  # a shifted copy: the serving booster itself is never touched
        residual = y - init.predict(x, num_threads=settings.threads)
        init = _shifted(init, _weighted_median(residual, weights))
    data = lgb.Dataset(x, y, weight=weights, free_raw_data=True)
    return lgb.train(params, data, num_boost_round=settings.rounds, init_model=init)


def candidate_model(serving: RuntimeModel, booster: lgb.Booster, *, version: str,
                    summary: dict[str, Any]) -> RuntimeModel:  # fmt: skip
    """The serving model with a re-fitted step booster (op boosters and calibration kept)."""
    return RuntimeModel(
        op_boosters=serving.op_boosters, step_booster=booster, p90_log_margin=serving.p90_log_margin,
        calibration=serving.calibration, correction_clip=serving.correction_clip, version=version,
        training_summary={**serving.training_summary, "refit": summary},
    )  # fmt: skip


def shadow_evaluate(serving: RuntimeModel, samples: StepRows, replay: StepRows, settings: RefitSettings,
                    progress: Progress | None = None) -> ShadowEvaluation:  # fmt: skip
    """Out-of-fold p50s of candidates fitted without each fold's models vs the serving model's on the same rows."""
    groups = samples.rows["group"].astype(str).to_numpy()
    folds = grouped_folds(groups, settings.folds, settings.seed)
    measured = samples.rows["time_s"].to_numpy(dtype=np.float64)
    serving_p50 = p50_seconds(serving, samples)
    candidate_p50 = np.full(len(samples), np.nan)
    per_fold = []
    for i, test in enumerate(folds):
        booster = fit_booster(serving, samples.subset(~test), replay, settings)
        candidate_p50[test] = p50_seconds(serving, samples.subset(test), booster)
        s = ErrorStats.of(measured=measured[test], predicted=serving_p50[test])
        c = ErrorStats.of(measured=measured[test], predicted=candidate_p50[test])
        per_fold.append({"fold": i, "samples": int(test.sum()), "models": sorted(set(groups[test])),
                         "serving_mean_abs_log": s.mean_abs_log, "candidate_mean_abs_log": c.mean_abs_log})
        if progress:
            progress("shadow evaluation", i + 1, len(folds))
    return ShadowEvaluation(serving=ErrorStats.of(measured=measured, predicted=serving_p50),
                            candidate=ErrorStats.of(measured=measured, predicted=candidate_p50), folds=len(folds),
                            groups=len(set(groups)), per_fold=per_fold)  # fmt: skip


def decide(*, evaluation: ShadowEvaluation, settings: RefitSettings, serving_version: str,
           candidate_version: str) -> Decision:  # fmt: skip
    """Promote only when the candidate's held-out error is not worse than the serving model's. Pure."""
    s, c = evaluation.serving.mean_abs_log, evaluation.candidate.mean_abs_log
    numbers = (f"held-out mean |log error| over {evaluation.candidate.n} samples of {evaluation.groups} models: "
               f"candidate {c:.4f} vs serving {s:.4f}")  # fmt: skip
    if not c <= s + settings.tolerance:  # also refuses a NaN
        return Decision(False, f"kept the serving model: candidate is worse ({numbers})", serving_version)
    return Decision(True, f"promoted: candidate is not worse ({numbers})", serving_version, candidate_version)


def refit(*, serving: RuntimeModel, samples: pd.DataFrame, now: dt.datetime,
          settings: RefitSettings = RefitSettings(), replay: tuple[pd.DataFrame, list[GraphSummary]] | None = None,
          progress: Progress | None = None) -> RefitResult:  # fmt: skip
    """Fit a candidate from the samples (and replay rows), shadow-evaluate it, decide.

    `samples`: `BenchmarkDB.job_samples()`; `replay`: the DB's model rows with their graph summaries
    (`train.attach_graphs`), or None. The serving model is not modified.
    """
    serving = RuntimeModel.from_dict(serving.to_dict())  # private copy: its op cache is not shared with a server
    frame, summaries, skipped = samples_as_model_rows(samples)
    if progress:
        progress("features", 0, 1)
    sample_rows = StepRows.build(serving, frame, summaries)
    if len(sample_rows):  # judged against the model of its day; re-checked against the serving one
        keep = plausible(serving, sample_rows, settings)
        skipped["implausible under the serving model"] += int((~keep).sum())
        sample_rows = sample_rows.subset(keep)
    skipped = +skipped  # drop zero counts
    counts = {"usable": len(sample_rows), **{f"skipped: {k}": v for k, v in sorted(skipped.items())}}
    groups = int(sample_rows.rows["group"].nunique()) if len(sample_rows) else 0
    if len(sample_rows) < settings.min_samples:
        why = f"too few samples to re-fit: {len(sample_rows)} usable accepted samples (need {settings.min_samples})"
        return RefitResult(Decision(False, why, serving.version), None, counts)
    if groups < settings.min_groups:
        why = f"too few distinct models to hold out: {groups} (need {settings.min_groups})"
        return RefitResult(Decision(False, why, serving.version), None, counts)
    no_rows = np.zeros(len(sample_rows), dtype=bool)
    replay_rows = StepRows.build(serving, *replay) if replay is not None else sample_rows.subset(no_rows)
    if progress:
        progress("features", 1, 1)
    evaluation = shadow_evaluate(serving, sample_rows, replay_rows, settings, progress)
    version = refit_version(serving.version, now)
    decision = decide(evaluation=evaluation, settings=settings, serving_version=serving.version,
                      candidate_version=version)  # fmt: skip
    if not decision.promote:
        return RefitResult(decision, evaluation, counts)
    booster = fit_booster(serving, sample_rows, replay_rows, settings)
    summary = {"from_version": serving.version, "at": now.astimezone(dt.UTC).isoformat(),
               "samples": len(sample_rows), "models": groups, "replay_rows": len(replay_rows),
               "settings": asdict(settings),
               "heldout_mean_abs_log": {"serving": evaluation.serving.mean_abs_log,
                                        "candidate": evaluation.candidate.mean_abs_log}}  # fmt: skip
    if progress:
        progress("candidate", 1, 1)
    candidate = candidate_model(serving, booster, version=version, summary=summary)
    return RefitResult(decision, evaluation, counts, candidate)

