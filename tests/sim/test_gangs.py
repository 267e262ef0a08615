"""Wide jobs run as gangs across nodes (all or nothing); the feed learns window survival without peeking ahead."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_sim.engine import EngineSettings, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.policies import POLICIES

from .conftest import daily, make_scenario

H = 3600.0
EXACT = FeedSettings(mode="exact")


def _run(sc, names, **engine):
    return simulate(sc, [POLICIES[n] for n in names], feed=WindowFeed(sc, EXACT),
                    settings=EngineSettings(check_invariants=True, **engine))


@pytest.mark.parametrize("name", ["backfill", "default", "oracle", "offpeak"])
def test_a_job_wider_than_any_node_runs_across_nodes(name: str) -> None:
    demand = np.zeros((3, 3 * 1440 + 1))
    demand[0] = 2  # node 0 has 6 free, nodes 1 and 2 have 8
    sc = make_scenario(demand, [(0.0, 2 * H, 12)])
    r = _run(sc, [name])[name]
    s = EngineSettings().restart_seconds
    assert r.first_start[0] == sc.start_s
    assert r.finish[0] == pytest.approx(sc.start_s + s + 2 * H * 0.5)  # start-up, then A100: half the reference time
    assert r.gang_starts == 1
    assert r.t.ran_gpu_s == pytest.approx(12 * (H + s))  # 12 GPUs for 1 h and the start-up


def test_without_gangs_a_wide_job_never_starts() -> None:
    sc = make_scenario(np.zeros((2, 3 * 1440 + 1)), [(0.0, 2 * H, 12)])
    r = _run(sc, ["backfill"], gangs=False)["backfill"]
    assert np.isnan(r.first_start[0])


def test_losing_one_member_evicts_the_whole_gang() -> None:
    demand = np.zeros((2, 3 * 1440 + 1))
    day = 1440
    demand[1, day + 100 : day + 200] = 8  # online takes node 1 at 01:40 of the run's first day
    sc = make_scenario(demand, [(0.0, 8 * H, 16)])
    r = _run(sc, ["backfill"], checkpoint_seconds=1800)["backfill"]
    assert r.t.evictions == 1
    # 1 min start-up, checkpoints at 31, 61, 91 min: 9 min since the last one at 100 min, on all 16 GPUs
    assert r.t.lost_gpu_s == pytest.approx(9 * 60 * 16)
    assert r.placements[0][2] == sc.start_s and len(r.placements) >= 2  # restarted once node 1 is free again
    assert np.isfinite(r.finish[0])


def test_members_take_only_nodes_whose_window_fits() -> None:
    # nodes 0 and 1 are taken by online work after 1 h every day; nodes 2 and 3 stay free until 20:00
    demand = daily(4, 3, [(60, 1440, 0)])
    demand[:2] = daily(2, 3, [(60, 600, 8)])
    demand[2:] = daily(2, 3, [(1200, 1440, 8)])
    sc = make_scenario(demand, [(0.0, 4 * H, 16)])  # 2 h on A100
    runs = _run(sc, ["offpeak-p90", "backfill"])
    strict, blind = runs["offpeak-p90"], runs["backfill"]
    assert strict.t.evictions == 0 and strict.gang_starts == 1
    assert strict.placements[0] == (0, 2, sc.start_s)  # the gang starts on node 2 (with node 3) at once
    assert blind.placements[0] == (0, 0, sc.start_s)  # first fit: nodes 0 and 1, taken back after 1 h
    assert blind.t.evictions >= 1


def test_window_survival_is_learnt_only_from_what_has_been_seen() -> None:
    demand = daily(2, 4, [(360, 1440, 8)])  # free 00:00-06:00 every day
    sc = make_scenario(demand, [], history_days=1)
    feed = WindowFeed(sc, FeedSettings(mode="exact", refresh_seconds=600, survival_seconds=600))
    feed.maybe_refresh(sc.start_s)
    assert feed.survival is not None and feed.survival.closed.sum() == 0  # nothing has closed yet
    for now in sc.start_s + np.arange(600, 2 * 86400, 600.0):
        feed.maybe_refresh(now)
    sv = feed.survival
    c = sv.klass(6 * H)
    t = np.array([H, 5.5 * H, 7 * H])
    assert sv.samples()[c] > 0
    assert np.allclose(sv.curve(t)[c], [1.0, 1.0, 0.0])  # a 6 h forecast window really lasted 6 h
