"""Calibrated p50/p90: conformal quantiles per regime, fallbacks, persistence, and what a trained model serves."""

import math

import numpy as np
import pytest

from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import StepContext, summarise
from offpeak_predictor.intervals import (
    POOLED, Calibration, calibrate, conformal_quantile, interval_metrics, regime_of, size_bucket,
)  # fmt: skip
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.train import grouped_folds

from .conftest import mlp_graph


def test_conformal_quantile_is_the_ceil_n_plus_one_rank():
    r = np.arange(1.0, 100.0)  # 99 residuals: rank ceil(100 * 0.9) = 90
    assert conformal_quantile(r[::-1], 0.9) == 90.0
    assert conformal_quantile(np.array([0.3, 0.1]), 0.9) == 0.3  # rank beyond n: the largest
    with pytest.raises(ValueError):
        conformal_quantile(np.array([]), 0.9)


def test_regimes_split_mode_precision_family_and_size():
    assert regime_of(mode="train", precision="bf16", step_seconds=0.05) == "train/amp/medium"
    assert regime_of(mode="train", precision="tf32", step_seconds=0.5) == "train/full/large"
    assert regime_of(mode="inference", precision="fp32", step_seconds=0.001) == "inference/full/small"
    assert [size_bucket(t) for t in (0.0099, 0.01, 0.0999, 0.1)] == ["small", "medium", "medium", "large"]


def test_each_regime_gets_its_own_spread_and_sparse_regimes_fall_back():
    rng = np.random.default_rng(1)
    tight = rng.normal(0.0, 0.05, 400)
    wide = rng.normal(0.2, 0.5, 400)
    few = rng.normal(3.0, 0.1, 5)  # too few for their own cell: they use their (mode, precision family) pool
    cal = calibrate(residuals=np.r_[tight, wide, few],
                    regimes=["train/full/large"] * 400 + ["train/amp/small"] * 400 + ["train/full/small"] * 5,
                    min_count=30)  # fmt: skip
    t, w = cal.lookup("train/full/large")[1], cal.lookup("train/amp/small")[1]
    assert t.q90 - t.q50 == pytest.approx(1.2816 * 0.05, rel=0.25)
    assert w.q90 - w.q50 == pytest.approx(1.2816 * 0.5, rel=0.25) and w.q50 == pytest.approx(0.2, abs=0.08)
    name, cell = cal.lookup("train/full/small")
    assert name == "train/full" and cell.n == 405
    assert cal.lookup("inference/amp/large")[0] == POOLED


def test_conformal_p90_covers_about_90_percent_of_fresh_residuals():
    rng = np.random.default_rng(7)
    cal = calibrate(residuals=rng.standard_t(4, 2000) * 0.3, regimes=["train/full/medium"] * 2000)
    fresh = rng.standard_t(4, 20000) * 0.3
    q50, q90 = cal.offsets(mode="train", precision="fp32", step_seconds=0.05)
    assert (fresh <= q90).mean() == pytest.approx(0.9, abs=0.02)
    assert q50 == 0.0  # the p50 stays the model's own estimate unless asked to recentre


def test_recentring_moves_the_p50_to_the_median_residual_and_p90_stays():
    rng = np.random.default_rng(3)
    resid = rng.normal(0.4, 0.3, 3000)
    plain = calibrate(residuals=resid, regimes=["train/amp/large"] * 3000)
    moved = calibrate(residuals=resid, regimes=["train/amp/large"] * 3000, recentre=True)
    kw = {"mode": "train", "precision": "bf16", "step_seconds": 1.0}
    assert plain.offsets(**kw)[0] == 0.0 and moved.offsets(**kw)[0] == pytest.approx(0.4, abs=0.03)
    assert plain.offsets(**kw)[1] == moved.offsets(**kw)[1] == pytest.approx(0.4 + 1.2816 * 0.3, abs=0.05)
    low = calibrate(residuals=rng.normal(-1.0, 0.1, 500), regimes=["train/amp/large"] * 500)
    assert low.offsets(**kw) == (0.0, 0.0)  # an over-predicting regime: p90 = p50, never below it
    assert Calibration.from_dict(moved.to_dict()).recentre


def test_calibration_round_trips_and_old_model_files_keep_their_fixed_margin(tiny_model, tmp_path):
    assert tiny_model.calibration is not None
    back = Calibration.from_dict(tiny_model.calibration.to_dict())
    assert back == tiny_model.calibration
    path = tmp_path / "m.json.gz"
    tiny_model.save(path)
    assert RuntimeModel.load(path).calibration == tiny_model.calibration
    old = tiny_model.to_dict() | {"calibration": None}
    legacy = RuntimeModel.from_dict(old)
    legacy.p90_log_margin = math.log(2.0)
    pred = legacy.predict_step(summarise(mlp_graph()), resolve_gpu("T4"), StepContext())
    assert pred.step_seconds_p90 / pred.step_seconds == pytest.approx(2.0)


def test_a_trained_model_serves_its_regimes_offsets(tiny_model):
    summary, gpu = summarise(mlp_graph(batch=32, width=1024)), resolve_gpu("V100-PCIE-32GB")
    raw = RuntimeModel(op_boosters=tiny_model.op_boosters, step_booster=tiny_model.step_booster,
                       calibration=Calibration.fixed(0.0))  # the model's own seconds, no offsets  # fmt: skip
    for ctx in (StepContext(), StepContext(mode="inference", optimizer="none")):
        pred = tiny_model.predict_step(summary, gpu, ctx)
        batch = tiny_model.predict_steps_batch([(summary, gpu, ctx)])[0]
        assert (batch.step_seconds, batch.step_seconds_p90) == pytest.approx((pred.step_seconds, pred.step_seconds_p90))
        model_seconds = raw.predict_step(summary, gpu, ctx).step_seconds
        q50, q90 = tiny_model.calibration.offsets(mode=ctx.mode, precision=ctx.precision, step_seconds=model_seconds)
        assert pred.step_seconds == pytest.approx(model_seconds * math.exp(q50))
        assert pred.step_seconds_p90 == pytest.approx(model_seconds * math.exp(q90))
        assert pred.step_seconds_p90 >= pred.step_seconds


def test_grouped_folds_keep_each_group_in_one_fold():
    groups = np.array(["a", "b", "c", "a", "d", "e", "b", "f"])
    folds = grouped_folds(groups, 3, seed=0)
    assert len(folds) == 3 and np.all(np.sum(folds, axis=0) == 1)
    for g in set(groups):
        assert sum(f[groups == g].any() for f in folds) == 1


def test_interval_metrics():
    m = interval_metrics(actual=np.array([1.0, 2.0, 3.0, 10.0]), p50=np.array([1.0, 2.0, 2.0, 5.0]),
                         p90=np.array([1.5, 3.0, 3.0, 6.0]))  # fmt: skip
    assert m["n"] == 4 and m["p90_coverage"] == 0.75 and m["p50_share_below"] == 0.5
    assert m["median_width"] == pytest.approx(1.5)
