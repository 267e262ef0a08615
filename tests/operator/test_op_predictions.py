from __future__ import annotations

import pytest

from offpeak_core.pace import MEASURED_P90_RATIO
from offpeak_operator.predictions import (FallbackSettings, PredictorResponseError, fallback, from_predictor,
                                          measured_step_seconds, remaining_seconds, Prediction)

RESPONSE = {"model_version": "m7", "graph_hash": "sha256:ab", "predictions": [
    {"gpu": "A100", "gpu_type": "A100-SXM4-40GB", "step_seconds": 0.1, "step_seconds_p90": 0.12,
     "job_seconds": 100.0, "job_seconds_p90": 120.0, "model_version": "m7"},
    {"gpu": "T4", "gpu_type": "T4", "step_seconds": 0.4, "step_seconds_p90": 0.5, "job_seconds": 400.0,
     "job_seconds_p90": 500.0, "model_version": "m7"},
]}


def test_predictor_answer_is_kept_per_gpu() -> None:
    p = from_predictor(RESPONSE, steps=1000, asked=["A100", "T4"], canonical=["A100-SXM4-40GB", "T4"])
    assert p.source == "predictor" and p.model_version == "m7"
    assert p.for_gpu("A100-SXM4-40GB").job_seconds_p90 == 120.0
    assert p.fastest().gpu_type == "A100-SXM4-40GB"
    assert Prediction.from_status(p.to_status()) == p


def test_missing_gpu_in_answer_is_an_error() -> None:
    with pytest.raises(PredictorResponseError, match="V100"):
        from_predictor(RESPONSE, steps=10, asked=["V100"], canonical=["V100-SXM2-16GB"])
    with pytest.raises(PredictorResponseError):
        from_predictor({"nope": 1}, steps=10, asked=["T4"], canonical=["T4"])


def test_fallback_prefers_the_users_estimate() -> None:
    p = fallback(asked=["T4"], canonical=["T4"], steps=100, estimated_seconds=3600, settings=FallbackSettings())
    assert p.source == "user-estimate" and p.gpus[0].job_seconds == 3600 and p.gpus[0].step_seconds == 36
    assert p.gpus[0].job_seconds_p90 == 3600 * 1.5


def test_fallback_default_is_per_step() -> None:
    p = fallback(asked=["T4", "A10"], canonical=["T4", "A10"], steps=500, estimated_seconds=None,
                 settings=FallbackSettings(default_step_seconds=2.0, p90_factor=2.0))
    assert p.source == "default" and [g.job_seconds for g in p.gpus] == [1000.0, 1000.0]
    assert p.gpus[1].job_seconds_p90 == 2000.0


def test_fallback_adds_startup_to_the_per_step_default_only() -> None:
    settings = FallbackSettings(default_step_seconds=2.0, p90_factor=2.0)
    p = fallback(asked=["T4"], canonical=["T4"], steps=500, estimated_seconds=None, startup_seconds=30,
                 settings=settings)
    assert p.gpus[0].job_seconds == 1030.0 and p.gpus[0].job_seconds_p90 == 2060.0
    p = fallback(asked=["T4"], canonical=["T4"], steps=500, estimated_seconds=900, startup_seconds=30,
                 settings=settings)
    assert p.gpus[0].job_seconds == 900.0  # the user's estimate already is the whole job


def test_remaining_seconds_scale_with_work_left() -> None:
    p = from_predictor(RESPONSE, steps=1000, asked=["A100", "T4"], canonical=["A100-SXM4-40GB", "T4"])
    assert remaining_seconds(p, completed_steps=0)["T4"] == {"p50": 400.0, "p90": 500.0}
    assert remaining_seconds(p, completed_steps=750)["A100-SXM4-40GB"] == {"p50": 25.0, "p90": 30.0}
    assert remaining_seconds(p, completed_steps=5000)["T4"] == {"p50": 0.0, "p90": 0.0}


def test_memory_verdict_reaches_status_and_the_extenders_annotation() -> None:
    rows = [dict(r) for r in RESPONSE["predictions"]]
    rows[0].update(peak_memory_gib=31.2, gpu_memory_gib=37.25, fits_memory=True)
    rows[1].update(peak_memory_gib=31.2, gpu_memory_gib=14.9, fits_memory=False)
    p = from_predictor({**RESPONSE, "predictions": rows}, steps=1000, asked=["A100", "T4"],
                       canonical=["A100-SXM4-40GB", "T4"])
    assert Prediction.from_status(p.to_status()) == p
    t4 = next(g for g in p.to_status()["gpus"] if g["gpuType"] == "T4")
    assert (t4["fitsMemory"], t4["peakMemoryGiB"], t4["gpuMemoryGiB"]) == (False, 31.2, 14.9)
    ann = remaining_seconds(p, completed_steps=500)
    assert ann["T4"] == {"p50": 200.0, "p90": 250.0, "fits_memory": False, "peak_memory_gib": 31.2,
                         "gpu_memory_gib": 14.9}
    old = from_predictor(RESPONSE, steps=1000, asked=["A100", "T4"], canonical=["A100-SXM4-40GB", "T4"])
    assert "fits_memory" not in remaining_seconds(old, completed_steps=0)["T4"]  # no verdict: none invented


def test_a_measured_pace_times_the_rest_of_the_job_with_a_narrow_p90_on_its_gpu_type_only() -> None:
    p = from_predictor(RESPONSE, steps=1000, asked=["A100", "T4"], canonical=["A100-SXM4-40GB", "T4"])
    t4 = p.for_gpu("T4")
    assert t4 is not None and t4.job_seconds_p90 > 1.2 * t4.job_seconds  # the prediction's own spread is wide
    ann = remaining_seconds(p, completed_steps=500, measured_step_seconds={"T4": [0.5]})
    startup = t4.job_seconds - 1000 * t4.step_seconds
    assert ann["T4"]["p50"] == pytest.approx(startup + 500 * 0.5)
    assert ann["T4"]["p90"] == pytest.approx(ann["T4"]["p50"] * MEASURED_P90_RATIO, abs=1e-3)
    assert ann["A100-SXM4-40GB"] == remaining_seconds(p, completed_steps=500)["A100-SXM4-40GB"]  # not measured there
    # two attempts that measured different paces: the latest times the rest, their spread widens the p90
    ann = remaining_seconds(p, completed_steps=500, measured_step_seconds={"T4": [0.4, 0.6]})
    assert ann["T4"]["p50"] == pytest.approx(startup + 500 * 0.6)
    assert ann["T4"]["p90"] == pytest.approx(ann["T4"]["p50"] * 1.5, abs=1e-3)
    # nothing done yet: a pace measured before is not used (no steps to scale from)
    assert remaining_seconds(p, completed_steps=0, measured_step_seconds={"T4": [0.5]}) == \
        remaining_seconds(p, completed_steps=0)


def test_measured_step_seconds_keeps_every_progress_measurement_per_gpu_type_in_order() -> None:
    rows = [{"source": "progress", "gpuType": "T4", "stepSeconds": 0.4},
            {"source": "wall", "gpuType": "T4", "stepSeconds": 9.0},  # wall-clock guesses are not a pace
            {"source": "progress", "gpuType": "A100", "stepSeconds": 0.1},
            {"source": "progress", "gpuType": "T4", "stepSeconds": 0.5},
            {"source": "progress", "gpuType": "T4", "stepSeconds": "fast"}, "junk"]
    assert measured_step_seconds(rows) == {"T4": [0.4, 0.5], "A100": [0.1]}
    assert measured_step_seconds(None) == {}
