"""Seasonal forecaster (incl. missing data), live override, declared schedules, window math."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_core.forecast import (
    ForecastSettings, apply_live, fit_seasonal, forecast_demand, forecast_node, level_since,
)
from offpeak_core.schedules import parse_busy_hours
from offpeak_core.windows import current_window, free_profile, idle_windows, node_view

DAY = 600.0  # compressed day, as in the e2e demo
S = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=14 * DAY,
                     quantile=0.9)
MONDAY = 4 * 86400.0  # 1970-01-05 was a Monday


def daily_history(days: int, *, busy_from: float = 0.5, busy_to: float = 0.75, busy: float = 6.0,
                  idle: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Online GPUs: `busy` between fractions busy_from..busy_to of each (compressed) day, else `idle`."""
    t = np.arange(0, days * DAY, S.step_seconds)
    frac = (t % DAY) / DAY
    v = np.where((frac >= busy_from) & (frac < busy_to), busy, idle)
    return t, v


def test_seasonal_forecast_reproduces_daily_pattern_and_windows() -> None:
    t, v = daily_history(7)
    now = 7 * DAY  # start of a day
    fc = forecast_node(times=t, online=v, capacity=8, now=now, settings=S)
    assert fc.online[0] == 1.0 and fc.online[int(0.6 * DAY / S.step_seconds)] == 6.0
    prof = free_profile(forecast=fc, capacity=8)
    wins = idle_windows(profile=prof)
    seven = current_window(windows=wins, now=now, gpus=7)
    assert seven is not None and seven.end == pytest.approx(now + 0.5 * DAY)
    two = current_window(windows=wins, now=now, gpus=2)
    assert two is not None and two.end is None  # 2 GPUs stay free all horizon
    assert two.free_gpus == 2


def test_missing_data_falls_back_with_lower_confidence() -> None:
    t, v = daily_history(14)
    v = v.copy()
    v[np.random.default_rng(0).random(v.size) < 0.3] = np.nan  # dropped scrapes
    model = fit_seasonal(times=t, online=v, now=14 * DAY, settings=S)
    fc = forecast_demand(model=model, start=14 * DAY)
    # each weekday bin was seen at most twice (< min_samples) -> time-of-day fallback
    assert np.all(fc.confidence == pytest.approx(0.7))
    assert fc.online[int(0.6 * DAY / S.step_seconds)] == 6.0
    # a week-long gap on the time-of-day axis: only 10% of the day observed -> overall quantile for the rest
    t2, v2 = daily_history(3)
    keep = (t2 % DAY) < 0.1 * DAY
    fc2 = forecast_demand(model=fit_seasonal(times=t2[keep], online=v2[keep], now=3 * DAY, settings=S),
                          start=3 * DAY)
    assert set(np.unique(fc2.confidence)) == {0.4, 0.7}


def test_no_history_gives_zero_confidence_and_no_window() -> None:
    fc = forecast_node(times=np.array([]), online=np.array([]), capacity=4, now=0.0, settings=S)
    assert np.all(fc.confidence == 0)
    prof = free_profile(forecast=fc, capacity=4)
    assert prof.free.max() == 0
    view = node_view(name="n", gpu_type="T4", gpus_total=4, gpus_free_now=4, profile=prof, now=0.0)
    assert view.data_stale


def test_history_outside_window_and_future_ignored() -> None:
    t, v = daily_history(30)
    model = fit_seasonal(times=t, online=v, now=20 * DAY, settings=S)
    assert model.n_samples == int(14 * DAY / S.step_seconds)


def test_weekly_bins_used_after_enough_weeks() -> None:
    s = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=28 * DAY,
                         min_samples=3)
    start = MONDAY - (MONDAY % DAY)
    t = np.arange(start, start + 28 * DAY, 10.0)
    weekday = ((np.floor(t / DAY) + 3) % 7).astype(int)
    v = np.where(weekday >= 5, 0.0, 5.0)  # weekends idle
    fc = forecast_demand(model=fit_seasonal(times=t, online=v, now=t[-1] + 1, settings=s), start=t[-1] + 10.0)
    assert np.all(fc.confidence == 1.0)
    assert fc.online[0] in (0.0, 5.0)


def test_live_override_closes_window_now() -> None:
    t, v = daily_history(7)
    now = 7 * DAY
    fc = forecast_node(times=t, online=v, capacity=8, now=now, settings=S, live_online=5.0)
    hold_steps = int(S.hold_seconds / S.step_seconds)
    assert np.all(fc.online[:hold_steps] >= 5.0)
    wins = idle_windows(profile=free_profile(forecast=fc, capacity=8))
    assert current_window(windows=wins, now=now, gpus=1) is None  # surprise: no new offline work for a while
    # live below forecast: current step is the truth, the future keeps the forecast
    fc2 = apply_live(forecast=forecast_node(times=t, online=v, capacity=8, now=now, settings=S), live_online=0.0,
                     now=now, settings=S)
    assert fc2.online[0] == 0.0 and fc2.online[1] == 1.0


def test_a_surprise_holds_the_node_for_one_hold_from_when_online_demand_rose() -> None:
    t, v = daily_history(7)
    now = 7 * DAY  # forecast: 1 GPU online now; live: 5 (a rise)
    fitted = forecast_node(times=t, online=v, capacity=8, now=now, settings=S)
    rose = now - 10.0
    just_rose = apply_live(forecast=fitted, live_online=5.0, now=now, settings=S, capacity=8, rose_at=rose)
    full = (fitted.times > now) & (fitted.times < rose + S.hold_seconds)
    assert full.any() and np.all(just_rose.online[full] == 8.0)  # full till the hold from the rise is over
    after = (fitted.times >= rose + S.hold_seconds) & (fitted.times < now + S.hold_seconds)
    assert after.any() and np.all(just_rose.online[after] == 5.0)  # then the level, till a hold from now
    settled = apply_live(forecast=fitted, live_online=5.0, now=now, settings=S, capacity=8,
                         rose_at=now - 2 * S.hold_seconds)
    hold = fitted.times < now + S.hold_seconds
    assert np.all(settled.online[hold] == 5.0)  # the level keeps running a while; 3 GPUs stay free
    unknown = apply_live(forecast=fitted, live_online=5.0, now=now, settings=S, capacity=8)
    assert np.all(unknown.online[hold][1:] == 8.0)  # not known when it rose: from now, as before


def test_level_since_is_the_start_of_the_last_run_at_the_level() -> None:
    t = np.arange(10.0)
    v = np.array([0, 4, 0, 3, 4, 4, 5, np.nan, 4, 4], dtype=float)
    assert level_since(times=t, online=v, level=4.0, tolerance=0.5) == 4.0  # 3 at t=3 was below 3.5
    assert level_since(times=t, online=v, level=3.0, tolerance=0.5) == 3.0
    assert level_since(times=t, online=v, level=5.0, tolerance=0.5) is None  # the newest sample is below it
    assert level_since(times=t, online=v, level=0.0, tolerance=0.5) == 0.0  # never below: since the first sample
    assert level_since(times=t[:0], online=v[:0], level=1.0, tolerance=0.5) is None


def test_declared_schedule_blocks_busy_hours() -> None:
    sched = parse_busy_hours("daily 12:00-18:00")
    t, v = daily_history(7, busy=0.0)
    fc = forecast_node(times=t, online=v, capacity=4, now=7 * DAY, settings=S, schedule=sched)
    i = int(0.6 * DAY / S.step_seconds)
    assert fc.online[i] == 4 and fc.confidence[i] == 1.0
    w = current_window(windows=idle_windows(profile=free_profile(forecast=fc, capacity=4)), now=7 * DAY, gpus=1)
    assert w is not None and w.end == pytest.approx(7 * DAY + 0.5 * DAY)


@pytest.mark.parametrize(
    ("text", "when", "busy"),
    [
        ("Mon-Fri 08:00-20:00", MONDAY + 9 * 3600, True),
        ("Mon-Fri 08:00-20:00", MONDAY + 7 * 3600, False),
        ("Mon-Fri 08:00-20:00", MONDAY + 5 * 86400 + 9 * 3600, False),  # Saturday
        ("Mon-Fri 08:00-20:00; Sat 10:00-14:00", MONDAY + 5 * 86400 + 11 * 3600, True),
        ("Mon-Fri 08:00-20:00, Sat,Sun 10:00-14:00", MONDAY + 6 * 86400 + 11 * 3600, True),
        ("22:00-06:00", MONDAY + 23 * 3600, True),
        ("Fri 22:00-06:00", MONDAY + 5 * 86400 + 2 * 3600, True),  # Saturday 02:00 belongs to Friday's rule
        ("Fri 22:00-06:00", MONDAY + 2 * 3600, False),
        ("Sat-Mon 00:00-24:00", MONDAY + 3600, True),
    ],
)
def test_busy_hours_parsing(text: str, when: float, busy: bool) -> None:
    assert parse_busy_hours(text).busy_at(when) is busy


@pytest.mark.parametrize("bad", ["", "Mon-Fri", "Funday 08:00-10:00", "08:00-08:00", "25:00-26:00", "Mon 8-9"])
def test_busy_hours_bad_input(bad: str) -> None:
    with pytest.raises(ValueError, match="busy-hours"):
        parse_busy_hours(bad)


def test_idle_windows_nested_levels() -> None:
    from offpeak_core.windows import FreeProfile

    prof = FreeProfile(times=np.arange(6) * 10.0, free=np.array([2, 2, 1, 0, 3, 3]),
                       confidence=np.array([1, 1, 1, 1, 0.5, 0.5]), step_seconds=10.0)
    wins = idle_windows(profile=prof)
    spans = {(w.start, w.end, w.free_gpus) for w in wins}
    assert spans == {(0.0, 30.0, 1), (0.0, 20.0, 2), (40.0, None, 3)}
    assert [w.confidence for w in wins if w.start == 40.0] == [0.5]
    closed = idle_windows(profile=prof, open_ended=False)
    assert (40.0, 60.0) in {(w.start, w.end) for w in closed}


def test_a_window_ends_for_certain_where_what_is_known_in_advance_leaves_too_few_gpus() -> None:
    from offpeak_core.windows import FreeProfile

    # forecast: 4 free, then 2 at step 3 (a forecast rise) and 0 at step 5 (announced: the bound is 0 there)
    prof = FreeProfile(times=np.arange(7) * 10.0, free=np.array([4, 4, 4, 2, 2, 0, 4]), confidence=np.ones(7),
                       step_seconds=10.0, bound=np.array([8, 8, 8, 8, 8, 0, 8]))
    by_span = {(w.start, w.end): w for w in idle_windows(profile=prof)}
    assert by_span[0.0, 30.0].free_gpus == 4 and not by_span[0.0, 30.0].end_certain  # the forecast may be wrong
    assert by_span[0.0, 50.0].free_gpus == 2 and by_span[0.0, 50.0].end_certain  # announced: it cannot outlast
    assert not by_span[60.0, None].end_certain  # open-ended
    without = idle_windows(profile=FreeProfile(prof.times, prof.free, prof.confidence, 10.0))
    assert not any(w.end_certain for w in without)


def test_offline_pods_reduce_free_profile() -> None:
    t, v = daily_history(7)
    fc = forecast_node(times=t, online=v, capacity=8, now=7 * DAY, settings=S)
    assert free_profile(forecast=fc, capacity=8, offline_now=3).free[0] == 4


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        ForecastSettings(step_seconds=0)
    with pytest.raises(ValueError):
        ForecastSettings(quantile=1.5)


def test_grouped_quantile_matches_per_group_numpy() -> None:
    from offpeak_core.forecast import _grouped_quantile

    rng = np.random.default_rng(3)
    keys = rng.integers(0, 50, 3000)
    values = np.round(rng.gamma(2.0, 2.0, 3000), 1)
    for q in (0.0, 0.5, 0.9, 1.0):
        got, counts = _grouped_quantile(keys, values, 60, q)
        for k in range(60):
            sel = np.sort(values[keys == k])
            assert counts[k] == sel.size
            if sel.size:
                assert got[k] == sel[int(np.ceil(q * (sel.size - 1)))]
            else:
                assert np.isnan(got[k])
