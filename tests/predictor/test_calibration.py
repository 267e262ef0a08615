"""Per-GPU-type calibration from collected rows: the pure rule, the predictor applying it, the DB read back."""

import json
import math
import random
import statistics
import subprocess
import sys

import pandas as pd
import pytest

from offpeak_graph.schema import save_graph
from offpeak_predictor.calibration import CalibrationSettings, GpuCalibration, _held_out_gain, calibrate
from offpeak_predictor.collected import load_calibration
from offpeak_predictor.correction import CorrectionTable, keys_for
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.predict import Predictor

from .conftest import mlp_graph


def test_calibration_is_the_shrunk_median_and_bounded():
    slow = math.log(4.9)  # within the 5x a row may be off, beyond the 4x a calibration may move
    cal = calibrate({"A100-PCIE-40GB": [math.log(2.0)], "T4": [math.log(2.0)] * 8, "V100-PCIE-32GB": [slow] * 50})
    assert cal["A100-PCIE-40GB"].log_factor == pytest.approx(math.log(2.0) / 3)  # one row: 1 / (1 + 2)
    assert cal["T4"].log_factor == pytest.approx(0.8 * math.log(2.0))  # eight rows: 80 %
    assert cal["V100-PCIE-32GB"].factor == pytest.approx(4.0)  # bounded at max_factor
    assert cal["V100-PCIE-32GB"].median_log_ratio == slow and cal["T4"].rows == 8


def test_calibration_uses_the_median_and_skips_gpus_without_finite_rows():
    cal = calibrate({"T4": [0.1, 0.2, 0.15, 0.12, 1.5, math.nan], "L4": [math.nan], "A10": []},
                    settings=CalibrationSettings(prior_rows=0.0))  # fmt: skip
    assert set(cal) == {"T4"}
    assert cal["T4"].log_factor == pytest.approx(0.15) and cal["T4"].rows == 5  # the odd row does not move it


def test_rows_that_do_not_predict_each_other_leave_the_gpu_at_the_models_answer():
    # measured / predicted of the new-gpu plan's 8 whole steps on a real H200 (reports/device/h200-2026-11-28)
    h200 = [math.log(r) for r in (1.68, 0.94, 0.70, 1.07, 2.56, 1.49, 1.87, 1.21)]
    agreeing = [math.log(r) for r in (1.30, 1.25, 1.40, 1.22, 1.35, 1.28, 1.31, 1.27)]
    cal = calibrate({"H200-SXM-141GB": h200, "L40S": agreeing})
    refused, used = cal["H200-SXM-141GB"], cal["L40S"]
    assert refused.held_out_gain is not None and refused.held_out_gain < 0
    assert refused.log_factor == 0.0 and refused.median_log_ratio == pytest.approx(math.log(1.34), abs=0.01)
    assert used.held_out_gain is not None and used.held_out_gain > 0
    assert used.factor == pytest.approx(math.exp(0.8 * (math.log(1.28) + math.log(1.30)) / 2))  # the shrunk median
    one = calibrate({"T4": [math.log(2.0)]})["T4"]
    assert one.held_out_gain is None and one.log_factor > 0  # one row cannot be checked: used, shrunk


def test_prediction_for_a_calibrated_gpu_moves_the_others_do_not(tiny_model):
    graph = mlp_graph(batch=32, width=1024)
    plain = Predictor(tiny_model)
    before = {p["gpu_type"]: p for p in plain.predict(graph, ["T4", "A100-PCIE-40GB"])}
    calibrated = Predictor(tiny_model, calibration={"T4": GpuCalibration("T4", math.log(1.5), 6, math.log(1.6))})
    after = {p["gpu_type"]: p for p in calibrated.predict(graph, ["T4", "A100-PCIE-40GB"])}
    assert after["T4"]["step_seconds"] == pytest.approx(1.5 * before["T4"]["step_seconds"])
    assert after["T4"]["step_seconds_p90"] == pytest.approx(1.5 * before["T4"]["step_seconds_p90"])
    assert after["T4"]["correction"]["level"] == "gpu" and after["T4"]["correction"]["samples"] == 6
    assert after["A100-PCIE-40GB"]["step_seconds"] == before["A100-PCIE-40GB"]["step_seconds"]
    assert "correction" not in after["A100-PCIE-40GB"]
    # the model's own answer (what samples are judged against) ignores the calibration
    raw = calibrated.predict(graph, ["T4"], corrected=False)[0]
    assert raw["step_seconds"] == before["T4"]["step_seconds"]


def test_job_samples_refine_from_the_calibration_not_from_the_model(tiny_model):
    graph = mlp_graph(batch=32, width=1024)
    table = CorrectionTable()
    model_step = Predictor(tiny_model).predict(graph, ["T4"])[0]["step_seconds"]
    keys = keys_for(graph_hash=graph.content_hash(), family="mlp", gpu_type="T4", precision="fp32", mode="train",
                    batch_size=32, num_gpus=1)  # fmt: skip
    table.add(keys[:1], math.log(2.0))  # one family sample at 2x the model
    with_cal = Predictor(tiny_model, corrections=table, calibration={"T4": GpuCalibration("T4", math.log(1.5), 4, 0)})
    without = Predictor(tiny_model, corrections=table)
    a = with_cal.predict(graph, ["T4"])[0]["step_seconds"] / model_step
    b = without.predict(graph, ["T4"])[0]["step_seconds"] / model_step
    w = 1 / 1.5  # one sample, prior strength 0.5
    assert a == pytest.approx(math.exp(math.log(1.5) + w * (math.log(2.0) - math.log(1.5))))
    assert b == pytest.approx(math.exp(w * math.log(2.0)))


def _collected_db(tmp_path, model, *, gpu: str, ratio: float, n: int) -> BenchmarkDB:
    """A DB with n collected rows on `gpu`, each measured at `ratio` x the model's prediction."""
    db = BenchmarkDB(tmp_path / "b.sqlite")
    rows = []
    for i in range(n):
        graph = mlp_graph(batch=16 * (i + 1), width=512, name=f"collect_mlp{i}")
        path = tmp_path / f"g{i}.json.gz"
        save_graph(graph, path)
        predicted = Predictor(model).predict(graph, [gpu], corrected=False)[0]["step_seconds"]
        rows.append({"source": "collect", "gpu": gpu, "precision": "fp32", "mode": "train", "optimizer": "adam",
                     "model_name": graph.model_name, "family": "collect-cnn", "graph_kind": "graph_file",
                     "graph_ref": str(path), "batch_size": graph.batch_size, "num_gpus": 1,
                     "time_s": ratio * predicted})  # fmt: skip
    rows.append({**rows[0], "gpu": "cpu", "time_s": 1.0})  # a CPU run: not a GPU type, ignored
    rows.append({**rows[0], "graph_ref": str(tmp_path / "gone.json.gz")})  # graph file gone: skipped
    db.append("model_samples", pd.DataFrame(rows))
    return db


def test_load_calibration_reads_collected_rows_of_each_gpu(tmp_path, tiny_model):
    db = _collected_db(tmp_path, tiny_model, gpu="T4", ratio=2.0, n=4)
    cal = load_calibration(predictor=Predictor(tiny_model), db=db)
    assert set(cal) == {"T4"} and cal["T4"].rows == 4
    assert cal["T4"].median_log_ratio == pytest.approx(math.log(2.0))
    assert cal["T4"].factor == pytest.approx(2.0 ** (4 / 6))


def test_offpeak_predict_with_db_uses_the_collected_rows(tmp_path, tiny_model):
    model_path = tmp_path / "m.lgbm"
    tiny_model.save(model_path)
    db = _collected_db(tmp_path, tiny_model, gpu="T4", ratio=3.0, n=6)
    graph_path = tmp_path / "job.json.gz"
    save_graph(mlp_graph(batch=64, width=1024), graph_path)

    def predict(*extra: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "offpeak.cli", "predict", "--graph", str(graph_path), "--gpu",
                              "T4", "--model", str(model_path), "--json", *extra],
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
        return json.loads(out)

    plain, calibrated = predict(), predict("--db", str(db.path))
    assert calibrated["step_seconds"] == pytest.approx(plain["step_seconds"] * 3.0 ** (6 / 8), rel=1e-6)
    assert calibrated["correction"]["level"] == "gpu"


def test_the_held_out_gain_is_each_row_against_the_factor_of_all_the_others():
    settings = CalibrationSettings(max_factor=2.0)  # some rows beyond the bound: clipped as the factor is
    bound = math.log(settings.max_factor)

    def factor(rows):  # the calibration's rule, written out
        return max(-bound, min(bound, len(rows) / (len(rows) + settings.prior_rows) * statistics.median(rows)))

    rng = random.Random(7)
    for n in (2, 3, 4, 7, 8, 31):
        xs = [rng.gauss(0.2, 0.6) for _ in range(n)]
        direct = statistics.fmean(abs(x) - abs(x - factor(xs[:i] + xs[i + 1:])) for i, x in enumerate(xs))
        assert _held_out_gain(xs, settings) == pytest.approx(direct)
