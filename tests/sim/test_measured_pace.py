"""A job's earlier attempt timed its steps: the predictor-led policies believe the rest of it at that pace, with the
narrow p90 of a measured pace (`offpeak_core.pace`), on that GPU type only, as the operator does for a resumed job."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_core.pace import MEASURED_P90_RATIO
from offpeak_sim.engine import EngineSettings, PolicyRun
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.policies import POLICIES, believed_p50_p90

from .conftest import daily, make_scenario

H = 3600.0


def test_beliefs_use_the_measured_pace_where_it_was_measured_and_the_prediction_elsewhere() -> None:
    sc = make_scenario(daily(1, 2, []), [(0.0, 4 * H, 1), (0.0, 4 * H, 1)], pred_ratio=0.5, p90_ratio=2.0)
    rem = sc.jobs.duration_s.astype(float)
    measured = np.array([[True], [False]])
    p50, p90 = believed_p50_p90(POLICIES["offpeak"], scenario=sc, jobs=np.array([0, 1]), remaining_ref_s=rem,
                                measured=measured)
    true = 4 * H * sc.slowdowns()[0]
    assert p50[0, 0] == pytest.approx(true) and p90[0, 0] == pytest.approx(true * MEASURED_P90_RATIO)
    assert p50[1, 0] == pytest.approx(true * 0.5) and p90[1, 0] == pytest.approx(true * 0.5 * 2.0)
    plain = believed_p50_p90(POLICIES["offpeak"], scenario=sc, jobs=np.array([1]), remaining_ref_s=rem)
    assert plain[1][0, 0] == p90[1, 0]
    oracle = believed_p50_p90(POLICIES["oracle"], scenario=sc, jobs=np.array([0]), remaining_ref_s=rem,
                              measured=measured)
    assert oracle[1][0, 0] == pytest.approx(true)  # the truth needs no narrowing


def _evicted_once(at_s: float) -> tuple[PolicyRun, int]:
    """A strict-policy run whose one job (2 h on the A100, predicted right, p90 x2) was started and stopped after
    `at_s` seconds; the node is free 00:00-04:00 every day. Returns the run and the minute of the stop."""
    sc = make_scenario(daily(1, 3, [(240, 1440, 8)]), [(0.0, 4 * H, 8)], p90_ratio=2.0)
    feed = WindowFeed(sc, FeedSettings(mode="exact"))
    run = PolicyRun(POLICIES["offpeak-p90"], sc, feed, EngineSettings(check_invariants=True))
    run._start(0, 0, sc.start_s)
    run._stop(run.runs[0], sc.start_s + at_s)
    return run, sc.start_minute + int(at_s // 60)


def _schedule(run: PolicyRun, minute: int) -> None:
    """One minute of the engine, as `simulate` drives it (the shared feed refreshed, then the policy's step)."""
    assert run.feed is not None
    run.feed.maybe_refresh(minute * 60.0)
    run.step(minute, np.array([], dtype=np.int64))


def test_an_attempt_that_timed_its_steps_lets_the_rest_fit_a_window_its_prediction_does_not() -> None:
    run, minute = _evicted_once(1800.0)  # 29 min of steps after the 1-min start-up, nothing checkpointed
    assert run.measured[0].tolist() == [True] and run.queue == [0]
    # 3.5 h left in today's window; the prediction's p90 needs 2 h x 2 x 1.15 = 4.6 h, the measured pace 2.5 h
    _schedule(run, minute)
    assert 0 in run.runs and run.placements[-1] == (0, 0, minute * 60.0)

    unmeasured, minute = _evicted_once(1800.0)
    unmeasured.measured[:] = False
    _schedule(unmeasured, minute)
    assert 0 not in unmeasured.runs and unmeasured.queue == [0]


def test_an_attempt_stopped_in_its_start_up_measured_nothing() -> None:
    run, _ = _evicted_once(30.0)
    assert not run.measured.any()
