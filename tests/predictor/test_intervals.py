"""Calibrated p50/p90: conformal quantiles per regime, fallbacks, persistence, and what a trained model serves."""

import math

import numpy as np
import pandas as pd
import pytest

from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import StepContext, summarise
from offpeak_predictor.intervals import (
    ERA_PT2, POOLED, Calibration, calibrate, conformal_quantile, interval_metrics, regime_of, size_bucket, software_era,
)  # fmt: skip
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.train import (
    TrainSettings, calibration_residuals, fit_calibration, grouped_folds, measured_gpu_types,
)  # fmt: skip

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


def test_software_era_is_pytorch_2_or_later_only():
    assert [software_era(s) for s in ("pytorch-2.11", "pytorch-2.1", "PyTorch-3.0", "pytorch-10.2")] == ["pt2"] * 4
    assert [software_era(s) for s in ("pytorch-1.x", "pytorch-1.13", "pytorch", "pytorch-ngc", "tensorflow-1",
                                      "torch7", "cudnn-deepbench", "", None)] == [""] * 9  # fmt: skip


def _modern_calibration() -> Calibration:
    """Legacy residuals wide (GPU-grouped modern ones among them), modern ones of new models on measured GPUs tight."""
    rng = np.random.default_rng(5)
    legacy, seen, gpu_out = rng.normal(0.0, 0.6, 600), rng.normal(0.0, 0.05, 200), rng.normal(0.1, 0.3, 200)
    kw = {"mode": "train", "precision": "bf16", "step_seconds": 0.05}
    regimes = ([regime_of(**kw)] * 600 + [regime_of(**kw, era=ERA_PT2, seen=True)] * 200
               + [regime_of(**kw, era=ERA_PT2, seen=False)] * 200)  # fmt: skip
    return calibrate(residuals=np.r_[legacy, seen, gpu_out], regimes=regimes,
                     measured_gpus=frozenset({resolve_gpu("H100-SXM5-80GB").name}))  # fmt: skip


def test_modern_steps_on_a_measured_gpu_get_cells_of_their_own():
    kw = {"mode": "train", "precision": "bf16", "step_seconds": 0.05}
    assert regime_of(**kw, era=ERA_PT2, seen=True) == "pt2|seen|train/amp/medium"
    assert regime_of(**kw, era=ERA_PT2, seen=False) == regime_of(**kw, era="", seen=True) == "train/amp/medium"
    cal = _modern_calibration()
    h100, a10 = resolve_gpu("H100-SXM5-80GB").name, resolve_gpu("A10").name
    seen, legacy = cal.offsets(**kw, era=ERA_PT2, gpu=h100)[1], cal.offsets(**kw)[1]
    assert seen == pytest.approx(1.2816 * 0.05, rel=0.3)
    assert cal.cells["pt2|seen|train/amp/medium"].n == 200
    # an unmeasured GPU, old software or an unknown GPU: the legacy cell, which pools every residual as before
    assert cal.offsets(**kw, era=ERA_PT2, gpu=a10)[1] == cal.offsets(**kw, era="", gpu=h100)[1] == legacy
    assert cal.offsets(**kw, era=ERA_PT2, gpu=None)[1] == legacy
    assert cal.cells["train/amp/medium"].n == cal.cells[POOLED].n == 1000
    assert seen < legacy


def test_modern_regimes_fall_back_through_their_own_pools_then_the_legacy_chain():
    cal = _modern_calibration()
    h100 = resolve_gpu("H100-SXM5-80GB").name
    # an inference step on a measured GPU: no modern inference cell, so the modern pool (all its residuals)
    assert cal.lookup(regime_of(mode="inference", precision="fp32", step_seconds=1.0, era=ERA_PT2, seen=True))[0] \
        == "pt2|seen"
    no_gpus = Calibration.from_dict(cal.to_dict() | {"measured_gpus": []})  # a model file before this change
    kw = {"mode": "train", "precision": "bf16", "step_seconds": 0.05}
    assert no_gpus.offsets(**kw, era=ERA_PT2, gpu=h100) == cal.offsets(**kw)
    legacy_only = calibrate(residuals=np.random.default_rng(2).normal(0, 0.4, 100), regimes=["train/amp/medium"] * 100,
                            measured_gpus=frozenset({h100}))  # fmt: skip
    assert legacy_only.lookup("pt2|seen|train/amp/medium")[0] == "train/amp/medium"
    assert Calibration.from_dict(cal.to_dict()) == cal and cal.to_dict()["measured_gpus"] == [h100]


def test_a_model_serves_the_cell_of_the_gpu_and_software_asked(tiny_model):
    summary = summarise(mlp_graph(batch=32, width=1024))
    h100, a10 = resolve_gpu("H100-SXM5-80GB"), resolve_gpu("A10")
    model = RuntimeModel(op_boosters=tiny_model.op_boosters, step_booster=tiny_model.step_booster,
                         calibration=_modern_calibration())  # fmt: skip
    ctx = StepContext(precision="bf16")
    assert ctx.era == ERA_PT2  # a cluster's job runs today's PyTorch

    def width(gpu, c):
        pred = model.predict_step(summary, gpu, c)
        batch = model.predict_steps_batch([(summary, gpu, c)])[0]
        assert batch.step_seconds_p90 / batch.step_seconds == pytest.approx(pred.step_seconds_p90 / pred.step_seconds)
        return pred.step_seconds_p90 / pred.step_seconds

    seen, unmeasured, legacy = width(h100, ctx), width(a10, ctx), width(h100, StepContext(precision="bf16", era=""))
    assert seen < unmeasured and unmeasured == pytest.approx(legacy)
    # whichever size bucket the step falls in, the modern residuals of train/amp are the only ones it can use
    assert seen == pytest.approx(math.exp(model.calibration.cells["pt2|seen|train/amp"].q90))


def test_residuals_of_family_folds_calibrate_modern_cells_and_of_gpu_folds_the_legacy_ones():
    rng = np.random.default_rng(4)
    n = 120
    rows = pd.DataFrame({
        "family": [f"f{i % 6}" for i in range(n)], "gpu": [("T4", "V100-PCIE-32GB", "A10")[i % 3] for i in range(n)],
        "mode": "train", "precision": "bf16", "software": ["pytorch-2.11" if i < 60 else "pytorch-1.x" for i in range(n)],
    })  # fmt: skip
    x, y = rng.normal(size=(n, 3)), rng.normal(0, 0.1, n)
    settings = TrainSettings(step_rounds=5, step_min_leaf=3, threads=1)
    resid, regimes = calibration_residuals(x=x, y=y, base=np.full(n, 0.05), rows=rows, settings=settings,
                                           weights=np.ones(n), clip=math.log(4.0))  # fmt: skip
    assert len(resid) == len(regimes) == 2 * n  # once grouped by family, once by GPU
    by_family, by_gpu = regimes[:n], regimes[n:]
    assert all(r.startswith("pt2|seen|") for r in by_family[:60])
    assert not any("|" in r for r in by_family[60:] + by_gpu)  # PyTorch 1 rows, and GPU folds: the legacy cells
    cal = fit_calibration(x=x, y=y, base=np.full(n, 0.05), rows=rows, settings=settings, weights=np.ones(n),
                          clip=math.log(4.0))  # fmt: skip
    assert cal is not None and cal.measured_gpus == {resolve_gpu(g).name for g in ("T4", "V100-PCIE-32GB", "A10")}
    assert cal.cells["pt2|seen"].n == 60 and cal.cells[POOLED].n == 2 * n
    only_old = rows.assign(software=["pytorch-2.11" if g == "A10" else "pytorch-1.x" for g in rows["gpu"]])
    assert measured_gpu_types(only_old) == {resolve_gpu("A10").name}  # measured with old software only: not seen
