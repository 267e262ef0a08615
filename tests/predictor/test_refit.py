"""The re-fit without HTTP: candidate from samples, shadow evaluation on held-out models, the decision."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from offpeak_predictor.predict import Predictor
from offpeak_predictor.refit import (
    ErrorStats, RefitSettings, ShadowEvaluation, base_version_of, decide, refit, refit_version,
)  # fmt: skip

from .conftest import mlp_graph
from .refit_support import MODELS, add_samples

NOW = dt.datetime(2026, 12, 1, 3, 0, 0, tzinfo=dt.UTC)
FAST = RefitSettings(threads=1)
SLOW_FAMILY = 1.4  # the cluster's runs of the family are 40 % slower than the model predicts


def test_a_biased_family_is_learned_and_the_candidate_is_promoted(tiny_model, tmp_path) -> None:
    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda name, gpu, batch: SLOW_FAMILY)
    result = refit(serving=tiny_model, samples=db.job_samples(), now=NOW, settings=FAST)
    assert result.samples == {"usable": 36}
    ev = result.evaluation
    assert ev is not None and ev.groups == len(MODELS) and ev.serving.n == ev.candidate.n == 36
    assert ev.serving.mean_abs_log == pytest.approx(math.log(SLOW_FAMILY), abs=0.03)
    assert ev.candidate.mean_abs_log < 0.5 * ev.serving.mean_abs_log  # held-out models, not seen in their fold
    assert result.decision.promote and "promoted" in result.decision.reason
    candidate = result.candidate
    assert candidate is not None and candidate.version == refit_version(tiny_model.version, NOW)
    assert result.decision.candidate_version == candidate.version
    # it carries over to a batch size no sample had, on every GPU type
    graph = mlp_graph(batch=32, width=1024, layers=3, name="mlp-new")
    for gpu in ("T4", "A100-PCIE-40GB"):
        old = Predictor(tiny_model).predict(graph, [gpu])[0]["step_seconds"]
        new = Predictor(candidate).predict(graph, [gpu])[0]["step_seconds"]
        assert 1.2 < new / old < 1.6, gpu
    # op boosters and calibration are the serving model's; the serving model is untouched
    assert candidate.op_boosters.keys() == tiny_model.op_boosters.keys()
    assert candidate.calibration == tiny_model.calibration
    assert candidate.training_summary["refit"]["from_version"] == tiny_model.version
    assert candidate.step_booster is not None and tiny_model.step_booster is not None
    assert candidate.step_booster.num_trees() == tiny_model.step_booster.num_trees() + FAST.rounds


def test_a_candidate_worse_on_held_out_models_is_not_promoted(tiny_model, tmp_path) -> None:
    # twin models of nearly the same shape with opposite biases: what a fold learns from one twin is wrong for
    # the held-out other, so the candidate's held-out error is worse than the serving model's
    pairs = [(f"mlp-{i}x", f"mlp-{i}y", width) for i, width in enumerate((256, 768, 1536, 2048))]
    twins = tuple(m for x, y, width in pairs for m in ((x, width, 3), (y, width + 8, 3)))
    bias = {}
    for i, (x, y, _) in enumerate(pairs):
        bias[x] = 1.5 if i % 2 == 0 else 1 / 1.5
        bias[y] = 1 / bias[x]
    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda name, gpu, batch: bias[name], models=twins)
    result = refit(serving=tiny_model, samples=db.job_samples(), now=NOW, settings=FAST)
    ev = result.evaluation
    assert ev is not None and ev.candidate.mean_abs_log > ev.serving.mean_abs_log
    assert not result.decision.promote and result.candidate is None
    assert result.decision.reason.startswith("kept the serving model: candidate is worse")
    assert f"{ev.candidate.mean_abs_log:.4f}" in result.decision.reason


def test_too_few_samples_or_models_means_no_refit_and_says_why(tiny_model, tmp_path) -> None:
    few = add_samples(tmp_path / "few.sqlite", tiny_model, lambda *_: SLOW_FAMILY, models=MODELS[:2],
                      batches=(16,))  # fmt: skip
    result = refit(serving=tiny_model, samples=few.job_samples(), now=NOW, settings=FAST)
    assert not result.decision.promote and result.evaluation is None and result.candidate is None
    assert result.decision.reason == "too few samples to re-fit: 6 usable accepted samples (need 30)"
    narrow = add_samples(tmp_path / "narrow.sqlite", tiny_model, lambda *_: SLOW_FAMILY, models=MODELS[:3],
                         batches=(8, 16, 32, 64))  # 36 samples of 3 models
    result = refit(serving=tiny_model, samples=narrow.job_samples(), now=NOW, settings=FAST)
    assert not result.decision.promote
    assert result.decision.reason == "too few distinct models to hold out: 3 (need 4)"


def test_only_accepted_plausible_samples_with_a_graph_are_learned_from(tiny_model, tmp_path) -> None:
    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: SLOW_FAMILY, models=MODELS[:1], batches=(16,))
    add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: 50.0, models=MODELS[:1], batches=(16,),
                status="quarantined")  # fmt: skip
    add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: 8.0, models=MODELS[1:2], batches=(16,))  # accepted
    # under an older model, now more than 5x off the serving one
    db.add_job_sample(job="ns/x", gpu="T4", graph_hash="abc", step_seconds=0.1, job_seconds=None, steps=None,
                      graph=None, status="unverified")  # fmt: skip
    result = refit(serving=tiny_model, samples=db.job_samples(), now=NOW, settings=FAST)
    assert result.samples == {"usable": 3, "skipped: implausible under the serving model": 3,
                              "skipped: status quarantined": 3, "skipped: status unverified": 1}  # fmt: skip


def _evaluation(serving: float, candidate: float) -> ShadowEvaluation:
    def stats(x: float) -> ErrorStats:
        return ErrorStats(n=40, mean_abs_log=x, median_abs_log=x, mape=x * 100, median_ape=x * 100, within_20=0.5)

    return ShadowEvaluation(serving=stats(serving), candidate=stats(candidate), folds=5, groups=6)


@pytest.mark.parametrize(("serving", "candidate", "tolerance", "promote"), [
    (0.30, 0.10, 0.0, True), (0.30, 0.30, 0.0, True), (0.30, 0.31, 0.0, False), (0.30, 0.31, 0.02, True),
    (0.30, math.nan, 0.0, False),
])  # fmt: skip
def test_the_decision_rule(serving: float, candidate: float, tolerance: float, promote: bool) -> None:
    decision = decide(evaluation=_evaluation(serving, candidate), settings=RefitSettings(tolerance=tolerance),
                      serving_version="v1", candidate_version="v1+refit.x")  # fmt: skip
    assert decision.promote is promote
    assert decision.candidate_version == ("v1+refit.x" if promote else None)


def test_versions_name_their_base_and_time() -> None:
    first = refit_version("offpeak-rt-20261123", NOW)
    assert first == "offpeak-rt-20261123+refit.20261201T030000Z"
    later = refit_version(first, NOW + dt.timedelta(days=1))
    assert later == "offpeak-rt-20261123+refit.20261202T030000Z"  # a refit of a refit keeps the base
    assert base_version_of(later) == base_version_of("offpeak-rt-20261123") == "offpeak-rt-20261123"


def test_error_stats() -> None:
    stats = ErrorStats.of(measured=np.array([1.0, 2.0, 4.0]), predicted=np.array([1.0, 2.5, 2.0]))
    assert stats.n == 3 and stats.mape == pytest.approx((0 + 25 + 50) / 3)
    assert stats.mean_abs_log == pytest.approx((0 + math.log(1.25) + math.log(2)) / 3)
    assert stats.within_20 == pytest.approx(1 / 3)


def test_the_answer_is_json(tiny_model, tmp_path) -> None:
    import json

    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: 1.0, models=MODELS[:1], batches=(16,))
    body = json.loads(json.dumps(refit(serving=tiny_model, samples=db.job_samples(), now=NOW).to_dict(),
                                 allow_nan=False))  # fmt: skip
    assert body["decision"]["promote"] is False and body["evaluation"] is None and body["samples"]["usable"] == 3
