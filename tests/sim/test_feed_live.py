"""The feed brings a node's forecast up to date when its online demand changes between refreshes, as the
extender's store rebuilds a node's view on online pod events; and it matches a fresh `forecast_node` then."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from offpeak_core.forecast import ForecastSettings, fit_seasonal, forecast_demand, forecast_now, level_since
from offpeak_core.idleruns import IdleRuns, fit_idle_runs
from offpeak_core.windows import free_profile
from offpeak_sim.forecasting import FeedSettings, WindowFeed

from .conftest import daily, make_scenario, windows_now


def test_a_surprise_between_refreshes_closes_the_nodes_windows_at_once() -> None:
    demand = daily(2, 3, [(600, 900, 8)])  # busy 10:00-15:00 every day, else idle
    sc = make_scenario(demand, [])
    m = int(sc.start_s // 60) + 60  # 01:00 on the run's first day: forecast idle for hours
    sc.demand[0, m + 3 :] = 8  # online work comes back on node 0 three minutes after a refresh
    live = WindowFeed(sc, FeedSettings(refresh_seconds=600))
    stale = WindowFeed(sc, FeedSettings(refresh_seconds=600, live_updates=False))
    for f in (live, stale):
        f.maybe_refresh(m * 60.0)
        assert windows_now(f, 0, offline_gpus=0, now=m * 60.0)  # a window now
        f.maybe_refresh((m + 3) * 60.0)
    assert not windows_now(live, 0, offline_gpus=0, now=(m + 3) * 60.0)  # closed at once
    assert windows_now(stale, 0, offline_gpus=0, now=(m + 3) * 60.0)  # still open until the next refresh
    assert live.updates == 1 and windows_now(live, 1, offline_gpus=0, now=(m + 3) * 60.0)  # node 1 untouched


def test_a_rise_the_forecast_missed_closes_a_node_for_one_hold_from_the_rise() -> None:
    """As in the extender: online demand stepping up where the history never had it closes the node for an hour
    from the rise; after that, the GPUs the new level leaves are a window again (not only once a refit saw it)."""
    demand = daily(2, 3, [(600, 900, 8)])  # busy 10:00-15:00 every day, else idle
    sc = make_scenario(demand, [])
    m = int(sc.start_s // 60) + 60  # 01:00 on the run's first day: forecast idle for hours
    sc.demand[0, m + 3 :] = 4  # 4 GPUs of online work from 01:03 on, never seen at that hour
    feed = WindowFeed(sc, FeedSettings(refresh_seconds=600))
    hold = int(feed.s.forecast.hold_seconds // 60)
    feed.maybe_refresh(m * 60.0)
    for minute in range(m + 1, m + 3 + hold + 12):
        feed.maybe_refresh(minute * 60.0)
        feed.update_live(minute * 60.0)
        if minute == m + 3 + hold // 2:  # within the hour from the rise: closed
            assert not windows_now(feed, 0, offline_gpus=0, now=minute * 60.0)
    now = (m + 3 + hold + 11) * 60.0  # past the hour from the rise, and a refresh since
    windows = windows_now(feed, 0, offline_gpus=0, now=now)
    assert windows and max(w.free_gpus for w in windows) == 4, windows  # the 4 GPUs the new level leaves


def test_a_live_update_gives_what_the_fit_gives_with_the_ages_of_a_fresh_fit(random_scenario) -> None:
    """The feed keeps the (daily) seasonal fit and its complete runs, brings the open runs' ages to the minute
    (looking back a day first) and stays on the refresh's step grid: the same free GPUs as forecasting from that
    fit with a fresh fit's ages, from the current step on."""
    sc = random_scenario
    fs = ForecastSettings()
    feed = WindowFeed(sc, FeedSettings(refresh_seconds=1800, refit_seconds=86400, forecast=fs))
    start = sc.start_s
    feed.maybe_refresh(start)
    m0 = int(start // 60)
    checked = 0
    for now in start + 60.0 * np.arange(1, 30):
        m = int(now // 60)
        for n in feed.update_live(now):
            cap = int(sc.fleet.gpus[n])
            model = fit_seasonal(times=np.arange(m0) * 60.0, online=sc.demand[n, :m0].astype(float), now=start,
                                 settings=fs)
            fresh = fit_idle_runs(times=np.arange(m) * 60.0, online=sc.demand[n, :m].astype(float), now=now,
                                  history_seconds=fs.history_seconds, max_gap_seconds=fs.step_seconds)
            assert model.runs is not None and fresh is not None
            runs = IdleRuns(at=fresh.at, lengths=model.runs.lengths, age=fresh.age[: len(model.runs.age)])
            fitted = forecast_demand(model=replace(model, runs=runs), start=feed.refreshed_at)
            lo = m - int(np.ceil(2 * fs.hold_seconds / 60))  # the minutes of the last two holds, as the store
            rose = level_since(times=np.arange(lo, m + 1) * 60.0, online=sc.demand[n, lo : m + 1].astype(float),
                               level=float(sc.demand[n, m]), tolerance=fs.live_tolerance)
            fc = forecast_now(fitted=fitted, capacity=cap, now=now, settings=fs, live_online=float(sc.demand[n, m]),
                              live_rose_at=rose)
            assert fc is not None
            want = free_profile(forecast=fc, capacity=cap).free
            assert np.array_equal(feed.free[n][-want.size :], want), (n, now)
            checked += 1
    assert checked > 5


def test_the_bounds_for_every_count_of_gpus_are_each_counts_own(random_scenario) -> None:
    """`left_bounds` (every count of GPUs at once, counted once a minute for every policy) gives, for offline pods
    holding `offline` GPUs and w more asked, what `left_upper_bound` gives for `offline + w` alone: at a refresh and
    between refreshes, after live updates moved some nodes' forecasts, for two policies holding different GPUs."""
    sc = random_scenario
    feed = WindowFeed(sc, FeedSettings(refresh_seconds=600))
    rng = np.random.default_rng(3)
    gpus = int(sc.fleet.gpus.max())
    for minute in (0, 7, 13):
        now = sc.start_s + minute * 60.0
        feed.maybe_refresh(now)
        for _ in range(2):
            offline = rng.integers(0, gpus + 1, sc.fleet.size)
            got = feed.left_bounds(now=now, offline=offline, levels=gpus)
            for w in range(gpus + 1):
                assert np.array_equal(got[w], feed.left_upper_bound(now=now, gpus_needed=offline + w)), (minute, w)
    assert feed.updates > 0  # live updates happened between the refreshes
