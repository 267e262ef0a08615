"""Evaluation metrics and baselines on hand-made data (the full CV runs in `offpeak eval-predictor`)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from offpeak_predictor.baselines import FlopsLinear, LayerMLP, roofline_step
from offpeak_predictor.evaluate import INTERVAL_COLUMNS, METHODS, build_report, metrics
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import StepContext, summarise

from .conftest import mlp_graph


def test_metrics_on_known_errors():
    m = metrics(np.array([1.0, 2.0, 4.0, 10.0]), np.array([1.05, 2.0, 3.0, 10.5]))
    assert m["n"] == 4
    assert m["mape"] == pytest.approx((5 + 0 + 25 + 5) / 4)
    assert m["median_ape"] == pytest.approx(5.0)
    assert m["within_10pct"] == pytest.approx(0.75) and m["within_20pct"] == pytest.approx(0.75)
    assert m["rmse_s"] == pytest.approx(math.sqrt((0.0025 + 0 + 1 + 0.25) / 4))


def test_roofline_baseline_scales_with_gpu_and_mode():
    s = summarise(mlp_graph(batch=256, width=4096))
    t4 = roofline_step(s, resolve_gpu("T4"), StepContext(optimizer="none"))
    a100 = roofline_step(s, resolve_gpu("A100"), StepContext(optimizer="none"))
    infer = roofline_step(s, resolve_gpu("T4"), StepContext(mode="inference"))
    assert t4 / a100 == pytest.approx(19.5 / 8.1, rel=0.05)  # compute bound: FP32 peak ratio
    assert t4 == pytest.approx(3 * infer, rel=0.05)  # gemm-dominated: fwd + 2x backward


def test_flops_linear_recovers_a_constant_efficiency():
    graphs = [summarise(mlp_graph(batch=b, width=1024)) for b in (16, 64, 256)]
    ctx = StepContext(optimizer="none")
    rows = pd.DataFrame({"gpu": ["T4"] * 3, "time_s": [3 * s.ops.flops.sum() / (0.4 * 8.1e12) for s in graphs]})
    model = FlopsLinear().fit(graphs, rows, [ctx] * 3)
    assert math.exp(model.log_efficiency) == pytest.approx(0.4, rel=1e-6)
    assert model.predict(graphs[0], resolve_gpu("T4"), ctx) == pytest.approx(rows["time_s"][0], rel=1e-6)


def test_layer_mlp_learns_a_simple_relation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    y = 2 * x[:, 0] - x[:, 1]
    mlp = LayerMLP(hidden=16, epochs=30).fit(x, y)
    pred = mlp.predict_log(x[:100])
    assert np.mean(np.abs(pred - y[:100])) < 0.3


def test_report_has_every_method_and_breakdown():
    models = pd.DataFrame({"time_s": [1.0, 2.0, 3.0], "gpu": ["T4", "T4", "L4"], "source": ["neusight-model"] * 3,
                           "family": ["bert", "gpt2", "bert"], "mode": ["train", "train", "inference"],
                           "precision": ["fp32", "bf16", "fp32"]})  # fmt: skip
    preds = {"leave_one_gpu_out": {m: np.array([1.1, 2.2, 2.7]) for m in (*METHODS, *INTERVAL_COLUMNS)}}
    preds["leave_one_gpu_out"]["offpeak_p90"] = np.array([1.5, 1.9, 3.3])  # covers rows 0 and 2
    preds["leave_one_gpu_out"]["offpeak_legacy_p90"] = np.array([1.1, 2.2, 2.7]) * 2.13
    report = build_report(models, preds, started=0.0, quick=True)
    scheme = report["schemes"]["leave_one_gpu_out"]
    assert set(scheme["overall"]) == {*METHODS, "offpeak_model"}
    calibrated = scheme["intervals"]["calibrated"]
    assert calibrated["p90_coverage"] == pytest.approx(2 / 3) and calibrated["median_width"] == pytest.approx(3.3 / 2.7)  # widths 1.36, 0.86, 1.22
    assert scheme["intervals"]["legacy_fixed_multiplier"]["median_width"] == pytest.approx(2.13)
    assert report["headline"]["intervals"]["leave_one_gpu_out"]["calibrated"]["p90_coverage"] == pytest.approx(0.667)
    assert set(scheme["intervals"]["per_gpu"]) == {"T4", "L4"}
    assert set(scheme["per_gpu"]) == {"T4", "L4"} and scheme["neusight_model_level_train"]["offpeak"]["n"] == 2
    assert report["headline"]["mape_percent"]["leave_one_gpu_out"]["offpeak"] == pytest.approx(10.0)


def test_slices_without_rows_are_null_in_valid_json(tmp_path):
    from offpeak_predictor.evaluate import write_report

    # No NeuSight train rows, and one scheme where no fold ran (every prediction NaN): empty slices.
    models = pd.DataFrame({"time_s": [1.0, 2.0], "gpu": ["T4", "L4"], "source": ["ryujaehun"] * 2,
                           "family": ["resnet", "vgg"], "mode": ["train", "train"], "precision": ["fp32"] * 2})  # fmt: skip
    columns = (*METHODS, *INTERVAL_COLUMNS)
    preds = {"leave_one_gpu_out": {m: np.array([1.1, 1.8]) for m in columns},
             "leave_one_family_out": {m: np.full(2, np.nan) for m in columns}}  # fmt: skip
    report = build_report(models, preds, started=0.0, quick=True)
    headline = report["headline"]["mape_percent"]
    assert headline["leave_one_gpu_out"]["offpeak"] == pytest.approx(10.0)
    assert headline["leave_one_gpu_out_neusight_train_rows"]["offpeak"] is None
    assert headline["leave_one_family_out"]["roofline"] is None
    assert report["schemes"]["leave_one_family_out"]["offpeak_p90_coverage"] is None
    path = tmp_path / "predictor_eval.json"
    write_report(report, path)

    def reject(name):
        raise ValueError(f"{name} is not JSON")

    back = json.loads(path.read_text(), parse_constant=reject)  # NaN/Infinity would raise here
    assert back["headline"]["mape_percent"]["leave_one_family_out"]["offpeak"] is None
    assert "NaN" not in path.read_text()


def test_our_gpus_are_reported_apart_with_the_host_bound_and_amp_slices():
    from offpeak_predictor.evaluate import _own_gpu_headline, _scheme_report

    rows = pd.DataFrame({
        "time_s": [1.0, 1.0, 1.0, 1.0], "gpu": ["H100", "H100", "H200", "H200"], "source": ["offpeak-h100"] * 2 +
        ["offpeak-h200"] * 2, "family": ["resnet", "bert", "resnet", "bert"], "model_name": ["r", "b", "r", "b"],
        "mode": ["train"] * 4, "precision": ["bf16", "fp32", "fp16", "fp32"], "batch_size": [4, 64, 8, 128],
    })  # fmt: skip
    p = {m: np.array([2.0, 1.1, 1.3, 0.9]) for m in (*METHODS, *INTERVAL_COLUMNS)}  # errors 100, 10, 30, 10 %
    headline = _own_gpu_headline(_scheme_report(rows, p, per_model=True))
    assert set(headline) == {"H100", "H200"}
    h100, h200 = headline["H100"], headline["H200"]
    assert h100["all"]["offpeak"] == pytest.approx(55.0) and h100["all"]["n"] == 2
    assert h100["host_bound_batch_le_8"] == {"n": 1, **{m: pytest.approx(100.0) for m in METHODS}}
    assert h100["amp"]["offpeak"] == pytest.approx(100.0) and h100["fp32"]["offpeak"] == pytest.approx(10.0)
    assert h200["host_bound_batch_le_8"]["offpeak"] == pytest.approx(30.0) and h200["amp"]["n"] == 1
