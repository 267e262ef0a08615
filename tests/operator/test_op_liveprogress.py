"""What a running attempt's live report means for its TrainingJob (pure): pace, ETA, the Event, the early sample."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from optestkit import NOW

from offpeak_operator.liveprogress import PACE_DIFFERS, live_update
from offpeak_operator.livereports import timestamp
from offpeak_operator.predictions import GpuPrediction, Prediction
from offpeak_operator.settings import LiveSettings

GPU = "A100-SXM4-40GB"
PREDICTION = Prediction(source="predictor", steps=1000, gpus=(GpuPrediction(
    gpu_type=GPU, step_seconds=0.5, step_seconds_p90=0.8, job_seconds=500.0, job_seconds_p90=800.0),))
SETTINGS = LiveSettings(steady_steps=5, sample_steps=50, margin=0.15)


def _report(seconds: float, **fields: Any) -> dict[str, Any]:
    return {"attempt": 1, "receivedAt": timestamp(NOW + timedelta(seconds=seconds)), **fields}


def _update(status: dict[str, Any], **kw: Any):
    args = {"attempt": 1, "gpu_type": GPU, "prediction": PREDICTION, "total_steps": 1000, "attempt_start": NOW,
            "narrowed": False, "settings": SETTINGS, **kw}
    return live_update(status=status, **args)


def _then(status: dict[str, Any], update) -> dict[str, Any]:
    return {**status, **update.status}


def test_a_reported_pace_gives_pace_eta_and_a_live_measurement() -> None:
    status = {"attempts": 1, "liveReport": _report(60, steps=101, stepSeconds=0.55, attemptSteps=101,
                                                    startupSeconds=5.0)}
    got = _update(status)
    pace = got.status["livePace"]
    assert pace["stepSeconds"] == 0.55 and pace["steadySteps"] == 100 and pace["source"] == "reported"
    assert pace["error"] == pytest.approx(0.1) and pace["predictedStepSeconds"] == 0.5
    assert got.status["etaSeconds"] == pytest.approx(899 * 0.55, abs=0.1) == pace["etaSeconds"]
    assert pace["finishTime"] == timestamp(NOW + timedelta(seconds=60 + 899 * 0.55))
    (m,) = got.status["measurements"]
    assert (m["source"], m["gpuType"], m["stepSeconds"], m["startupSeconds"]) == ("live", GPU, 0.55, 5.0)
    assert got.event is None  # 10 % off: within the margin
    assert got.sample is not None and got.sample.source == "live" and got.sample.steps == 100
    assert _update(_then(status, got)) is None  # the same report: nothing new


def test_a_pace_beyond_the_margin_raises_one_event_per_attempt() -> None:
    status: dict[str, Any] = {"attempts": 1, "liveReport": _report(30, steps=11, stepSeconds=0.7,
                                                                    attemptSteps=11)}
    first = _update(status)
    assert first.event is not None
    kind, reason, message = first.event
    assert (kind, reason) == ("Warning", PACE_DIFFERS)
    assert "40% slower than predicted (0.5s)" in message and "p90 margin of 15%" in message and GPU in message
    assert first.sample is None  # 10 steady steps: not yet a sample
    status = _then(status, first) | {"liveReport": _report(40, steps=31, stepSeconds=0.7, attemptSteps=31)}
    again = _update(status)
    assert again.event is None and again.status["livePace"]["announced"] is True


def test_a_faster_pace_is_said_too_but_not_as_a_warning() -> None:
    got = _update({"attempts": 1, "liveReport": _report(30, steps=21, stepSeconds=0.3, attemptSteps=21)})
    assert got.event is not None and got.event[0] == "Normal" and "40% faster" in got.event[2]


def test_reports_of_steps_only_are_timed_from_the_first_after_the_first_step() -> None:
    status: dict[str, Any] = {"attempts": 1, "completedSteps": 0, "liveReport": _report(20, steps=1)}
    first = _update(status)
    assert first.status["livePace"]["baseline"]["steps"] == 1 and "stepSeconds" not in first.status["livePace"]
    status = _then(status, first) | {"liveReport": _report(20 + 10 * 0.7, steps=11)}
    second = _update(status)
    pace = second.status["livePace"]
    assert pace["source"] == "observed" and pace["steadySteps"] == 10
    assert pace["stepSeconds"] == pytest.approx(0.7, rel=1e-3) and second.event is not None


def test_a_resumed_attempts_pace_counts_from_where_it_resumed() -> None:
    status = {"attempts": 2, "completedSteps": 400,
              "liveReport": {**_report(20, steps=400), "attempt": 2}}  # still at its first step
    got = _update(status, attempt=2)
    assert "baseline" not in got.status["livePace"]


def test_the_sample_goes_once_after_enough_steady_steps() -> None:
    status: dict[str, Any] = {"attempts": 1, "liveReport": _report(30, steps=40, stepSeconds=0.5, attemptSteps=40)}
    early = _update(status)
    assert early.sample is None
    status = _then(status, early) | {"liveReport": _report(40, steps=60, stepSeconds=0.5, attemptSteps=60)}
    ready = _update(status)
    assert ready.sample is not None and ready.status["livePace"]["sampled"] is True
    status = _then(status, ready)
    status["livePace"] = {**status["livePace"], "sampleId": 7}  # the reconciler keeps the predictor's id
    status["liveReport"] = _report(50, steps=80, stepSeconds=0.5, attemptSteps=80)
    later = _update(status)
    assert later.sample is None and later.status["livePace"]["sampleId"] == 7


def test_no_event_or_sample_while_an_elastic_attempt_runs_narrower() -> None:
    got = _update({"attempts": 1, "liveReport": _report(30, steps=81, stepSeconds=0.9, attemptSteps=81)},
                  narrowed=True)
    assert got.event is None and got.sample is None and got.status["livePace"]["stepSeconds"] == 0.9


@pytest.mark.parametrize("status", [
    {"attempts": 2, "liveReport": _report(30, steps=81, stepSeconds=0.9, attemptSteps=81)},  # attempt 1's report
    {"attempts": 1},
    {"attempts": 1, "liveReport": {"attempt": 1, "receivedAt": "not a time", "steps": 3}},
    {"attempts": 1, "liveReport": _report(30, metrics=[{"name": "loss", "value": "1"}])},  # no step, no percentage
])
def test_nothing_to_read(status: dict[str, Any]) -> None:
    assert _update(status, attempt=status["attempts"]) is None


def test_without_a_prediction_for_the_gpu_type_the_pace_is_kept_without_comparing() -> None:
    got = _update({"attempts": 1, "liveReport": _report(30, steps=81, stepSeconds=0.9, attemptSteps=81)},
                  gpu_type="H100-SXM5-80GB")
    assert got.event is None and "error" not in got.status["livePace"]
    assert got.sample is not None and got.sample.predicted_step_seconds is None


def test_a_steady_pace_goes_onto_the_pods_and_again_only_when_it_says_something_new() -> None:
    status: dict[str, Any] = {"attempts": 1, "completedSteps": 100,
                              "liveReport": _report(60, steps=201, stepSeconds=0.5, attemptSteps=101,
                                                    checkpointSteps=150)}
    first = _update(status, workers=2)
    live = first.progress
    assert live is not None
    assert (live.steps, live.total_steps, live.attempt_from_step, live.checkpoint_step, live.workers) == (
        201, 1000, 100, 150, 2)
    assert live.at == (NOW + timedelta(seconds=60)).timestamp() and live.step_seconds == 0.5
    assert first.status["livePace"]["annotated"]["finishBy"] == pytest.approx(live.finish_by(), abs=1e-3)
    # a minute on at the same pace: the finish it implies has not moved, nothing to write
    status = _then(status, first) | {"liveReport": _report(120, steps=321, stepSeconds=0.5, attemptSteps=221,
                                                           checkpointSteps=150)}
    same = _update(status, workers=2)
    assert same.progress is None and same.status["livePace"]["annotated"] == first.status["livePace"]["annotated"]
    # a new checkpoint is news (what an eviction would lose), and so is a pace that moves the finish
    checkpointed = _update(status | {"liveReport": _report(120, steps=321, stepSeconds=0.5, attemptSteps=221,
                                                           checkpointSteps=300)}, workers=2)
    assert checkpointed.progress is not None and checkpointed.progress.checkpoint_step == 300
    slower = _update(status | {"liveReport": _report(120, steps=321, stepSeconds=0.6, attemptSteps=221,
                                                     checkpointSteps=150)}, workers=2)
    assert slower.progress is not None and slower.progress.step_seconds == 0.6


def test_no_live_progress_on_the_pods_before_the_pace_is_steady() -> None:
    got = _update({"attempts": 1, "liveReport": _report(10, steps=3, stepSeconds=0.5, attemptSteps=3)})
    assert got is not None and got.progress is None and "annotated" not in got.status["livePace"]


def test_the_first_steady_eta_is_kept_while_later_reports_move_the_eta() -> None:
    status: dict[str, Any] = {"attempts": 1, "liveReport": _report(30, steps=11, stepSeconds=0.7, attemptSteps=11)}
    first = _update(status)
    expected = timestamp(NOW + timedelta(seconds=30 + 989 * 0.7))
    assert first.status["livePace"]["firstFinishTime"] == expected == first.status["livePace"]["finishTime"]
    status = _then(status, first) | {"liveReport": _report(50, steps=41, stepSeconds=0.6, attemptSteps=41)}
    later = _update(status).status["livePace"]
    assert later["finishTime"] == timestamp(NOW + timedelta(seconds=50 + 959 * 0.6))
    assert later["firstFinishTime"] == expected  # the dashboard's ETA drift compares the end with this one
