"""A running job's pace from its live reports: reported or observed, when it is steady, the time left, the margin."""

from __future__ import annotations

import pytest

from offpeak_core.livepace import Pace, Report, differs, pace, pace_error, remaining, steady
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
