"""Measured step time of an attempt (pure): progress reports first, else wall time less start-up."""

from __future__ import annotations

import pytest

from offpeak.progress import Progress
from offpeak_operator.measure import (
    MAX_MEASUREMENTS, assumed_startup, checkpointed_steps, measure_attempt, with_measurement,
)  # fmt: skip
from offpeak_operator.predictions import GpuPrediction, Prediction

# 1000 steps of 0.5 s on T4 plus 60 s of start-up, as the predictor answers by default
PRED = Prediction(source="predictor", steps=1000, gpus=(
    GpuPrediction(gpu_type="T4", step_seconds=0.5, step_seconds_p90=1.0, job_seconds=560.0, job_seconds_p90=1120.0),))


def measure(**kw):
    args = dict(gpu_type="T4", wall_seconds=760.0, reports=[None], attempt=1, steps=1000, completed=True,
                prediction=PRED, spec_startup=None)
    return measure_attempt(**{**args, **kw})


def test_wall_time_less_the_start_up_the_predictor_assumed() -> None:
    m = measure()
    assert m.source == "wall" and m.startup_seconds == 60.0
    assert m.step_seconds == pytest.approx(0.7) and m.error == pytest.approx(0.4)  # 40 % slower than predicted
    assert m.to_status()["error"] == pytest.approx(0.4) and m.to_status()["predictedStepSeconds"] == 0.5


def test_the_spec_start_up_wins_over_the_predictors() -> None:
    assert measure(spec_startup=0.0).step_seconds == pytest.approx(0.76)
    assert measure(spec_startup=260.0).step_seconds == pytest.approx(0.5)
    assert assumed_startup(PRED, "T4", spec_startup=None) == 60.0
    fallback = Prediction(source="default", steps=1000, gpus=(GpuPrediction("T4", 1, 1.5, 1000, 1500),))
    assert assumed_startup(fallback, "T4", spec_startup=None) == 0.0


def test_a_progress_report_is_the_measurement_when_there_is_one() -> None:
    fast = Progress(steps=1000, attempt_steps=1000, step_seconds=0.55, startup_seconds=200.0)
    slow = Progress(steps=1000, attempt_steps=1000, step_seconds=0.6, startup_seconds=160.0)
    m = measure(reports=[fast, None, slow])  # the slowest worker sets the pace
    assert (m.source, m.step_seconds, m.startup_seconds, m.steps) == ("progress", 0.6, 160.0, 1000)
    assert m.error == pytest.approx(0.2)


def test_an_interrupted_attempt_is_measured_only_from_a_report() -> None:
    assert measure(completed=False) is None
    partial = Progress(steps=700, attempt_steps=300, step_seconds=0.5)
    m = measure(completed=False, reports=[partial], wall_seconds=None)
    assert m is not None and m.steps == 300 and m.startup_seconds == 0.0


def test_no_measurement_when_the_run_is_shorter_than_its_start_up_or_without_times() -> None:
    assert measure(wall_seconds=50.0) is None
    assert measure(wall_seconds=None) is None
    assert measure(steps=0) is None


def test_a_fallback_prediction_gives_no_error_figure() -> None:
    fallback = Prediction(source="user-estimate", steps=1000, gpus=(GpuPrediction("T4", 1, 1.5, 1000, 1500),))
    m = measure(prediction=fallback)
    assert m.predicted_step_seconds is None and m.error is None and "error" not in m.to_status()


def test_measurements_keep_one_entry_per_attempt_and_the_latest_ones() -> None:
    entries = None
    for attempt in range(1, MAX_MEASUREMENTS + 5):
        entries = with_measurement(entries, measure(attempt=attempt))
    assert len(entries) == MAX_MEASUREMENTS and entries[-1]["attempt"] == MAX_MEASUREMENTS + 4
    again = with_measurement(entries, measure(attempt=entries[-1]["attempt"], spec_startup=0.0))
    assert len(again) == MAX_MEASUREMENTS and again[-1]["stepSeconds"] == pytest.approx(0.76)


def test_checkpointed_steps_is_the_lowest_reported() -> None:
    a = Progress(steps=500, attempt_steps=500, step_seconds=0.1, checkpoint_steps=400)
    b = Progress(steps=500, attempt_steps=500, step_seconds=0.1, checkpoint_steps=450)
    assert checkpointed_steps([a, b, None]) == 400
    assert checkpointed_steps([None, Progress(steps=1, attempt_steps=1, step_seconds=None)]) is None
