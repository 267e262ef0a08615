"""A running job's pace from its live reports: reported or observed, when it is steady, the time left, the margin,
and the live progress its pods carry for the extender and the evictor."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offpeak_core.livepace import LiveProgress, Pace, Report, differs, pace, pace_error, remaining, steady
from offpeak_core.pace import MEASURED_P90_RATIO


def test_a_report_with_its_own_step_time_is_the_pace_without_its_first_step() -> None:
    got = pace(latest=Report(at=100.0, steps=450, step_seconds=0.3, attempt_steps=50))
    assert got == Pace(step_seconds=0.3, steady_steps=49, source="reported")


def test_reports_of_steps_only_are_timed_between_the_baseline_and_the_latest() -> None:
    baseline = Report(at=1000.0, steps=10)  # the first report after the first (warm-up) step
    got = pace(latest=Report(at=1030.0, steps=110), baseline=baseline)
    assert got == Pace(step_seconds=pytest.approx(0.3), steady_steps=100, source="observed")


@pytest.mark.parametrize("latest", [Report(at=1030.0, steps=10), Report(at=1000.0, steps=50),
                                    Report(at=999.0, steps=50)])
def test_no_pace_without_progress_since_the_baseline(latest: Report) -> None:
    assert pace(latest=latest, baseline=Report(at=1000.0, steps=10)) is None
    assert pace(latest=latest) is None  # nor without a baseline


def test_a_pace_is_steady_once_it_rests_on_enough_steps() -> None:
    assert not steady(None)
    assert not steady(Pace(0.3, steady_steps=4, source="observed"))
    assert steady(Pace(0.3, steady_steps=5, source="observed"))
    assert not steady(Pace(0.3, steady_steps=49, source="reported"), min_steps=50)


def test_time_left_is_the_steps_left_at_the_pace_with_a_narrow_p90() -> None:
    p50, p90 = remaining(step_seconds=0.5, steps_done=600, total_steps=1000)
    assert p50 == pytest.approx(200.0) and p90 == pytest.approx(200.0 * MEASURED_P90_RATIO)
    assert remaining(step_seconds=0.5, steps_done=1200, total_steps=1000) == (0.0, 0.0)


def test_a_pace_differs_when_it_is_beyond_the_margin_either_way() -> None:
    slower = pace_error(measured=1.4, predicted=1.0)
    assert slower == pytest.approx(0.4) and differs(slower, margin=0.15)
    assert differs(pace_error(measured=0.8, predicted=1.0), margin=0.15)
    assert not differs(pace_error(measured=1.1, predicted=1.0), margin=0.15)
    assert pace_error(measured=1.0, predicted=0.0) is None and not differs(None, margin=0.15)


# ---- the pods' copy: what the extender and evictor time a running attempt by ----------------------------------------

LIVE = LiveProgress(at=5000.0, step_seconds=2.0, steps=400, total_steps=1000, attempt_from_step=100,
                    checkpoint_step=350, workers=2)


def test_live_progress_times_the_rest_of_the_attempt_by_its_measured_pace() -> None:
    assert LIVE.remaining() == (pytest.approx(1200.0), pytest.approx(1200.0 * MEASURED_P90_RATIO))
    assert LIVE.finish_by() == pytest.approx(5000.0 + 1200.0 * MEASURED_P90_RATIO)
    assert LIVE.last_checkpoint_at() == pytest.approx(5000.0 - 50 * 2.0)  # 50 steps since step 350, 2 s each
    assert LIVE.since_checkpoint(5060.0) == pytest.approx(160.0)
    assert LIVE.work_left() == pytest.approx(650 / 900)  # a restart resumes from step 350 of the 100..1000 attempt


def test_without_a_checkpoint_in_this_attempt_nothing_is_saved_yet() -> None:
    none_yet = replace(LIVE, checkpoint_step=None)
    assert none_yet.last_checkpoint_at() is None and none_yet.since_checkpoint(6000.0) is None
    assert none_yet.work_left() == 1.0
    assert replace(LIVE, checkpoint_step=100).last_checkpoint_at() is None  # the one it resumed from
    assert replace(LIVE, attempt_from_step=1000).work_left() == 0.0


def test_live_progress_goes_through_its_annotation_unchanged() -> None:
    assert LiveProgress.decode(LIVE.encode()) == LIVE
    assert LiveProgress.decode(replace(LIVE, checkpoint_step=None).encode()) == replace(LIVE, checkpoint_step=None)
    # what the operator wrote before `workers` and `attemptFromStep` were known reads as one worker from step 0
    old = LiveProgress.decode('{"at": 1, "stepSeconds": 0.5, "steps": 3, "totalSteps": 9}')
    assert (old.workers, old.attempt_from_step, old.checkpoint_step) == (1, 0, None)


@pytest.mark.parametrize(("text", "why"), [
    ("not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"at": 1, "steps": 3, "totalSteps": 9}', "stepSeconds"),
    ('{"at": 1, "stepSeconds": 0.5, "steps": -3, "totalSteps": 9}', "whole steps"),
    ('{"at": 1, "stepSeconds": 0.5, "steps": 2.5, "totalSteps": 9}', "whole steps"),
    ('{"at": 1, "stepSeconds": 0, "steps": 3, "totalSteps": 9}', "stepSeconds > 0"),
    ('{"at": "NaN", "stepSeconds": 1, "steps": 3, "totalSteps": 9}', "finite"),
])
def test_an_unreadable_live_progress_annotation_is_refused_with_its_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        LiveProgress.decode(text)
