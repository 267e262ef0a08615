"""Engine invariants: capacity, online demand served, conservation of GPU-seconds, pruning changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_sim import placement
from offpeak_sim.engine import EngineSettings, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.metrics import summarise
from offpeak_sim.policies import POLICIES

from .conftest import noisy_scenario

ALL = list(POLICIES.values())


@pytest.mark.parametrize("mode", ["seasonal", "exact"])
def test_capacity_and_conservation_hold_for_every_policy(random_scenario, mode: str) -> None:
    sc = random_scenario
    feed = WindowFeed(sc, FeedSettings(mode=mode))
    runs = simulate(sc, ALL, feed=feed, settings=EngineSettings(check_invariants=True, checkpoint_seconds=900))
    slow = sc.fleet.slowdown(0)
    idle = sc.idle_gpu_seconds()
    for name, r in runs.items():
        g = sc.jobs.gpus
        in_flight = sum(max(0.0, sc.end_s - x.start - x.startup) * x.gpus for x in r.runs.values())
        useful = float((r.useful_ref * slow * g).sum())
        # every GPU-second an offline pod held is kept work, thrown-away work, start-up, or work running at the end
        assert r.t.startup_gpu_s > 0, name
        assert r.t.ran_gpu_s == pytest.approx(useful + r.t.lost_gpu_s + r.t.startup_gpu_s + in_flight, rel=1e-9), name
        done = np.isfinite(r.finish)
        assert done.any(), name
        assert np.allclose(r.useful_ref[done], sc.jobs.duration_s[done]), name  # finished = all work kept
        assert (r.useful_ref <= sc.jobs.duration_s + 1e-6).all()
        assert r.t.occupancy.sum() * 60 <= idle  # never more offline GPU-time than idle GPU-time
        m = summarise(sc, {name: r})[name]
        # all nodes are A100 (0.5 x reference time): kept work in reference GPU-hours is twice the kept GPU-hours
        kept = m["harvested_gpu_hours"] - m["restart_gpu_hours"]
        assert m["work_done_ref_gpu_hours"] * slow == pytest.approx(kept, rel=1e-9)
        start_up = EngineSettings().restart_seconds
        assert (r.finish[done] >= sc.jobs.arrival_s[done] + start_up + sc.jobs.duration_s[done] * slow - 1e-6).all()
    blind = runs["backfill"].t.evictions
    assert blind > 0  # the scenario does exercise evictions
    # the summary over every policy: JCT over the jobs all of them finished, each policy's figures well formed
    m = summarise(sc, runs)
    assert len({v["jct_jobs"] for v in m.values()}) == 1  # same job set for every policy
    for v in m.values():
        for k in ("harvested_gpu_hours", "harvest_share", "evictions", "lost_gpu_seconds", "jct_mean_s", "jct_p95_s"):
            assert k in v
        assert 0 <= v["harvest_share"] <= 1
        assert v["jct_p95_s"] >= v["jct_p50_s"]


def test_a_policy_decides_alone_as_beside_others_on_one_feed() -> None:
    """The windowed policies share one feed, and the node views it builds for the GPUs a policy holds: each decides
    as it does alone (a view kept for one policy's GPUs is never another's)."""
    sc = noisy_scenario(days=2, n_jobs=40, arrivals_days=0.5)
    pols = [POLICIES[n] for n in ("offpeak", "oracle")]
    settings = EngineSettings(checkpoint_seconds=600)
    together = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=settings)
    for p in pols:
        alone = simulate(sc, [p], feed=WindowFeed(sc, FeedSettings()), settings=settings)
        assert alone[p.name].placements == together[p.name].placements, p.name
    assert len({tuple(r.placements) for r in together.values()}) == len(pols)  # they do decide differently


def test_online_demand_gets_its_gpus_back_at_once(random_scenario) -> None:
    sc = random_scenario
    runs = simulate(sc, [POLICIES["backfill"]], feed=None, settings=EngineSettings(check_invariants=True))
    r = runs["backfill"]
    assert r.t.evictions > 0
    assert r.t.online_delay_events > 0
    # grace seconds per GPU short, as documented
    assert r.t.online_delay_gpu_s >= r.t.online_delay_events * EngineSettings().eviction_grace_seconds


def test_pruning_gives_the_same_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds that skip jobs and nodes (a node's forecast window; a gang's room in the nodes' views now, at the
    fewest pods the gang may run as, over the node columns used on fleets of 48 nodes and more; a runtime-blind width
    not asked again while the free GPUs stay) drop only what no node and no gang plan would take: with columns forced
    on this small fleet, the runs are those of the unpruned node-by-node path."""
    sc = noisy_scenario(widths=(1, 1, 2, 4, 8, 12, 18))  # gangs of 2 pods and more, of 3 at least (18 GPUs)
    pols = [POLICIES[n] for n in ("backfill", "offpeak", "oracle", "offpeak-ckpt")]  # backfill: widths asked once
    b = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=EngineSettings(prune=False, checkpoint_seconds=600))
    monkeypatch.setattr(placement, "COLUMNS_FROM_NODES", 1)
    a = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=EngineSettings(prune=True, checkpoint_seconds=600))
    ma, mb = summarise(sc, a), summarise(sc, b)
    for name in a:
        assert np.array_equal(a[name].first_start, b[name].first_start, equal_nan=True), name
        assert a[name].placements == b[name].placements, name
        for k in ("harvested_gpu_hours", "evictions", "lost_gpu_seconds", "jobs_completed"):
            assert ma[name][k] == mb[name][k], (name, k)
    assert all(r.gang_starts > 0 for r in a.values())  # gangs are planned here
    wide = {name: {int(sc.jobs.gpus[j]) for j, _, _ in r.placements} for name, r in a.items()}
    assert all(18 in w for w in wide.values()), wide  # and gangs of 3 pods and more started
    assert all(a[n].t.decisions <= b[n].t.decisions for n in a)
    assert all(a[n].t.decisions < b[n].t.decisions for n in ("offpeak", "oracle", "offpeak-ckpt"))  # jobs skipped


def test_feed_matches_the_extenders_forecast_node(random_scenario) -> None:
    """The extender's two halves: the fit over its history up to now (a range query has a point at now) and, at
    request time, the live override held from when the level rose in its latest samples (the last two holds)."""
    from offpeak_core.forecast import ForecastSettings, fit_seasonal, forecast_demand, forecast_now, level_since
    from offpeak_core.windows import free_profile

    sc = random_scenario
    fs = ForecastSettings()
    feed = WindowFeed(sc, FeedSettings(refresh_seconds=600, refit_seconds=600, forecast=fs))
    surprises = 0
    for now in sc.start_s + np.arange(0, 36 * 3600, 1200.0):
        feed.maybe_refresh(now)
        m = int(now // 60)
        for n in range(sc.fleet.size):
            times = np.arange(m + 1) * 60.0
            online = sc.demand[n, : m + 1].astype(float)
            fitted = forecast_demand(model=fit_seasonal(times=times, online=online, now=now, settings=fs), start=now)
            recent = times > now - 2 * fs.hold_seconds
            rose = level_since(times=times[recent], online=online[recent], level=float(sc.demand[n, m]),
                               tolerance=fs.live_tolerance)
            fc = forecast_now(fitted=fitted, capacity=int(sc.fleet.gpus[n]), now=now, settings=fs,
                              live_online=float(sc.demand[n, m]), live_rose_at=rose)
            assert fc is not None
            assert np.array_equal(feed.free[n], free_profile(forecast=fc, capacity=int(sc.fleet.gpus[n])).free)
            surprises += int(fc.online[1] == sc.fleet.gpus[n] and sc.demand[n, m] < sc.fleet.gpus[n])
    assert surprises > 0  # the live override's "online is back" case was exercised
