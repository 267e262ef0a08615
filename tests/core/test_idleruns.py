"""A node's own idle runs: complete runs, ages, the conditional remaining quantile and the forecast cap."""

from __future__ import annotations

import math

import numpy as np

from offpeak_core.forecast import ForecastSettings, forecast_node
from offpeak_core.idleruns import OpenRunAges, cap_online, fit_idle_runs, remaining_seconds, run_ages
from offpeak_core.windows import free_profile, idle_windows

MIN = 60.0


def _series(pattern: list[tuple[int, int]], repeat: int) -> tuple[np.ndarray, np.ndarray]:
    """Minute samples of (online GPUs, minutes) blocks, repeated."""
    online = np.concatenate([np.full(m, g, dtype=float) for g, m in pattern] * repeat)
    return np.arange(online.size) * MIN, online


def test_complete_runs_and_ages_per_threshold() -> None:
    t, on = _series([(4, 5), (0, 3)], 12)  # busy 5 min, idle 3 min, 12 times
    t, on = t[:-3], on[:-3]  # the last idle stretch is 0 minutes old... cut it: end busy
    runs = fit_idle_runs(times=t, online=on, now=float(t[-1]), history_seconds=1e9, max_gap_seconds=300)
    assert runs is not None
    assert len(runs.lengths) == 4  # thresholds 0..3 close; at 4 online never went above
    assert np.all(runs.lengths[0] == 3 * MIN) and runs.lengths[0].size == 11  # the 12th is cut short by the end
    assert runs.age[0] == -1  # busy at the last sample
    assert runs.age[4] == t[-1] - t[0]  # never above 4: open since the first sample


def test_a_gap_in_the_samples_leaves_a_run_out() -> None:
    t, on = _series([(4, 5), (0, 3)], 4)
    keep = np.ones(t.size, dtype=bool)
    keep[14] = False  # a sample missing inside the second idle run
    runs = fit_idle_runs(times=t[keep], online=on[keep], now=float(t[-1]), history_seconds=1e9, max_gap_seconds=60)
    assert runs is not None
    assert runs.lengths[0].size == 3 - 1  # 4 idle runs, the last cut by the end, one broken by the gap


def test_run_ages_count_from_the_first_free_sample() -> None:
    levels = np.array([8, 8, 3, 2, 2, 5, 2, 2, 2])
    ages = run_ages(times=np.arange(levels.size) * MIN, levels=levels, thresholds=9)
    assert list(ages) == [-1, -1, 2 * MIN, 2 * MIN, 2 * MIN, 6 * MIN, 6 * MIN, 6 * MIN, 8 * MIN]


def test_remaining_is_the_conditional_quantile_and_older_windows_last_longer() -> None:
    lengths = np.sort(np.array([60.0] * 80 + [7200.0] * 20))  # most windows close in a minute, a fifth last 2 h
    young = remaining_seconds(lengths=lengths, age=0.0, quantile=0.9, min_runs=10)
    old = remaining_seconds(lengths=lengths, age=600.0, quantile=0.9, min_runs=10)
    assert young == 60.0  # nine in ten young windows lasted only that
    assert old == 7200.0 - 600.0  # a window 10 minutes old is one of the long ones
    assert math.isinf(remaining_seconds(lengths=lengths, age=7200.0, quantile=0.9, min_runs=10))  # no evidence
    assert math.isinf(remaining_seconds(lengths=lengths[:5], age=0.0, quantile=0.9, min_runs=10))


def test_cap_raises_demand_after_the_runs_end_and_leaves_unknown_steps_busy() -> None:
    t, on = _series([(8, 10), (2, 10)], 30)  # windows for 6 GPUs last 10 minutes, every time
    runs = fit_idle_runs(times=t, online=on, now=float(t[-1]), history_seconds=1e9, max_gap_seconds=300)
    assert runs is not None and runs.age[2] == 9 * MIN  # the last window opened 9 minutes before the last sample
    steps = np.arange(6) * 300.0 + t[-1]
    fc = np.array([2.0, 2.0, 2.0, np.nan, 2.0, 2.0])
    capped = cap_online(times=steps, online=fc, step_seconds=300.0, runs=runs, live_online=2.0, now=float(t[-1]),
                        quantile=0.9, min_runs=10)
    # every window (thresholds 2..7) ends in a minute: no GPU free from the first step on; unknown stays unknown
    assert list(capped[[0, 1, 2, 4, 5]]) == [8] * 5 and np.isnan(capped[3])
    # an hour later the window is older than any the node has had: no evidence, the forecast stands
    capped = cap_online(times=steps, online=fc, step_seconds=300.0, runs=runs, live_online=2.0,
                        now=float(t[-1]) + 3600.0, quantile=0.9, min_runs=10)
    assert capped[0] == 2
    # busy at the fit, free now: the window opened since, age 0, and lasts 10 minutes like the others
    busy_at_fit = fit_idle_runs(times=t[:-10], online=on[:-10], now=float(t[-11]), history_seconds=1e9,
                                max_gap_seconds=300)
    assert busy_at_fit is not None and busy_at_fit.age[2] == -1
    late = np.arange(6) * 300.0 + t[-1]
    capped = cap_online(times=late, online=np.full(6, 2.0), step_seconds=300.0, runs=busy_at_fit, live_online=2.0,
                        now=float(t[-1]), quantile=0.9, min_runs=10)
    assert list(capped) == [2, 2, 8, 8, 8, 8]  # free for the 10 minutes (two steps), then taken
    assert cap_online(times=late, online=np.full(6, 2.0), step_seconds=300.0, runs=busy_at_fit, live_online=8.0,
                      now=float(t[-1]), quantile=0.9, min_runs=10)[0] == 2  # busy now: nothing to cap


def test_forecast_node_ends_a_window_where_the_nodes_own_windows_end() -> None:
    # online comes and goes: 6 GPUs free for 20 minutes, then busy 10, all day long, for a week
    t, on = _series([(2, 20), (8, 10)], 7 * 48)
    now = float(t[-1]) + MIN
    s = ForecastSettings()
    # the seasonal p90 sees every 5-minute bin busy sometimes (the cycle drifts over the day): compare caps only
    off = forecast_node(times=t, online=on, capacity=8, now=now, settings=ForecastSettings(run_quantile=None),
                        live_online=2.0)
    on_ = forecast_node(times=t, online=on, capacity=8, now=now, settings=s, live_online=2.0)
    assert (on_.online >= off.online).all()
    w = [x for x in idle_windows(profile=free_profile(forecast=on_, capacity=8)) if x.start <= now]
    assert all(x.end is not None and x.end - now <= 20 * MIN for x in w if x.free_gpus >= 6)


def test_open_run_ages_kept_minute_by_minute_equal_run_ages() -> None:
    rng = np.random.default_rng(3)
    levels = rng.integers(0, 9, size=(5, 400)) * (rng.random((5, 400)) < 0.3)  # mostly idle, busy at random
    kept = OpenRunAges(levels, thresholds=9)
    for m in (1, 2, 50, 51, 120, 399, 400):  # the clock goes forward, by a minute or by many
        for lo in (0, 30, m - 1):
            for row in range(levels.shape[0]):
                want = run_ages(times=np.arange(lo, m) * MIN, levels=levels[row, lo:m], thresholds=9)
                assert list(kept.ages(row, m=m, lo=max(0, lo), thresholds=9)) == list(want), (m, lo, row)
    assert list(kept.ages(0, m=10, lo=0, thresholds=9)) == list(  # asked about the past: counted afresh
        run_ages(times=np.arange(10) * MIN, levels=levels[0, :10], thresholds=9))
