"""Each policy on tiny hand-built scenarios whose right answer is known."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from offpeak_sim.engine import EngineSettings, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.metrics import summarise
from offpeak_sim.policies import POLICIES, parse_policies

from .conftest import daily, make_scenario

H = 3600.0
EXACT = FeedSettings(mode="exact")


def _run(sc, names, *, feed=EXACT, **engine):
    pols = [POLICIES[n] for n in names]
    return simulate(sc, pols, feed=WindowFeed(sc, feed), settings=EngineSettings(check_invariants=True, **engine))


def test_oracle_never_evicts_when_the_forecast_is_exact_and_it_waits_for_whole_windows() -> None:
    # online takes the whole node 10:00-15:00 and half of it 20:00-21:40 every day
    demand = daily(3, 3, [(600, 900, 8), (1200, 1300, 4)])
    rng = np.random.default_rng(3)
    jobs = [(float(rng.uniform(0, 20 * H)), float(rng.uniform(0.2, 8) * H), int(rng.choice([1, 2, 4, 8])))
            for _ in range(40)]
    sc = make_scenario(demand, jobs)
    strict = replace(POLICIES["oracle"], name="oracle-strict", goodput=False)
    runs = simulate(sc, [strict, POLICIES["oracle"], POLICIES["backfill"]], feed=WindowFeed(sc, EXACT),
                    settings=EngineSettings(check_invariants=True, restart_seconds=0.0))
    assert runs["oracle-strict"].t.evictions == 0
    assert runs["oracle-strict"].t.lost_gpu_s == 0
    assert np.isfinite(runs["oracle-strict"].finish).sum() > 20
    assert runs["backfill"].t.evictions > 0  # same jobs, runtime-blind: some cross the busy period
    # the goodput rule takes some windows shorter than the job on purpose: evictions, but far fewer than blind
    assert 0 < runs["oracle"].t.evictions < runs["backfill"].t.evictions


def test_perfect_predictor_behaves_like_the_oracle() -> None:
    demand = daily(3, 3, [(600, 900, 8), (1200, 1300, 4)])
    rng = np.random.default_rng(4)
    jobs = [(float(rng.uniform(0, 20 * H)), float(rng.uniform(0.2, 8) * H), 1) for _ in range(30)]
    sc = make_scenario(demand, jobs, pred_ratio=1.0, p90_ratio=1.0)
    m = summarise(sc, _run(sc, ["offpeak", "oracle"]))
    assert m["offpeak"] == m["oracle"] | {k: m["offpeak"][k] for k in m["offpeak"] if "latency" in k}


def test_runtime_aware_policies_wait_for_a_window_blind_ones_do_not() -> None:
    # one node; the whole node is busy 02:00-06:00; a 3 h job (6 h reference on A100) arrives at 00:00
    demand = daily(1, 3, [(120, 360, 8)])
    sc = make_scenario(demand, [(0.0, 6 * H, 1)])
    runs = _run(sc, ["oracle", "backfill"], checkpoint_seconds=1800, restart_seconds=0.0)
    o, b = runs["oracle"], runs["backfill"]
    assert o.t.evictions == 0 and o.first_start[0] >= sc.start_s + 6 * H  # waits until the busy period is over
    assert b.first_start[0] == sc.start_s and b.t.evictions == 1  # starts at once, evicted at 02:00
    # evicted after 120 min with 30 min checkpoints: nothing since the last checkpoint is lost
    assert b.t.lost_gpu_s == 0
    assert b.finish[0] < o.finish[0]  # and the checkpointed progress lets it finish earlier


def test_lost_work_is_the_time_since_the_last_checkpoint() -> None:
    demand = daily(1, 3, [(100, 200, 8)])  # busy from 01:40
    sc = make_scenario(demand, [(0.0, 8 * H, 2)])
    r = _run(sc, ["backfill"], checkpoint_seconds=1800, restart_seconds=0.0)["backfill"]
    assert r.t.evictions == 1
    assert r.t.lost_gpu_s == pytest.approx(10 * 60 * 2)  # 100 min = 3 checkpoints + 10 min, on 2 GPUs
    none = _run(sc, ["backfill"], checkpoint_seconds=0, restart_seconds=0.0)["backfill"]
    assert none.t.lost_gpu_s == pytest.approx(100 * 60 * 2)  # no checkpoints: the whole attempt
    # with a 1-min start-up the checkpoints fall at 31, 61, 91 min: 9 min lost, the start-up counted apart
    r = _run(sc, ["backfill"], checkpoint_seconds=1800, restart_seconds=60.0)["backfill"]
    assert r.t.lost_gpu_s == pytest.approx(9 * 60 * 2)
    # an attempt that kept nothing loses everything it held, its start-up included
    none = _run(sc, ["backfill"], checkpoint_seconds=0, restart_seconds=60.0)["backfill"]
    assert none.t.lost_gpu_s == pytest.approx(100 * 60 * 2)


def test_default_spreads_and_backfill_packs_first_fit() -> None:
    demand = np.zeros((3, 3 * 1440 + 1))
    demand[0], demand[1] = 6, 3  # free: node0 2, node1 5, node2 8
    sc = make_scenario(demand, [(0.0, 48 * H, 1)])
    runs = simulate(sc, [POLICIES["default"], POLICIES["backfill"]], feed=None)
    assert runs["default"].placements[0][1] == 2  # most free GPUs
    assert runs["backfill"].placements[0][1] == 0  # first node that fits


def test_window_policies_best_fit_the_tightest_window() -> None:
    demand = np.zeros((2, 3 * 1440 + 1))
    day = 1440
    demand[0, day + 60 : day + 600] = 8  # node 0 busy from 01:00 of the run's first day
    demand[1, day + 180 : day + 600] = 8  # node 1 busy from 03:00
    short, long_ = (0.0, 1 * H, 1), (0.0, 3 * H, 1)  # 30 min and 1.5 h on A100
    for job, want in ((short, 0), (long_, 1)):
        sc = make_scenario(demand, [job])
        r = _run(sc, ["oracle"], margin=0.0)["oracle"]
        assert r.placements[0] == (0, want, sc.start_s)
        assert r.t.evictions == 0


def test_user_estimates_that_are_too_long_keep_jobs_waiting() -> None:
    demand = daily(1, 3, [(120, 360, 8)])  # 2 h free at the start of the day
    sc = make_scenario(demand, [(0.0, 2 * H, 1)], user_ratio=4.0)  # 1 h on A100, user says 4 h
    runs = _run(sc, ["user-estimate", "oracle"])
    assert runs["oracle"].first_start[0] == sc.start_s
    assert runs["user-estimate"].first_start[0] >= sc.start_s + 6 * H


def test_parse_policies() -> None:
    assert [p.name for p in parse_policies("oracle, backfill")] == ["oracle", "backfill"]
    assert len(parse_policies("all")) == 5
    from offpeak.errors import UserError

    with pytest.raises(UserError, match="unknown policy"):
        parse_policies("default,fifo")


def test_checkpoint_capped_offpeak_runs_a_long_job_across_windows() -> None:
    # free 00:00-06:00 every day (busy the rest); a 10 h job (20 h reference on A100), checkpoints every 30 min
    demand = daily(1, 5, [(360, 1440, 8)])
    sc = make_scenario(demand, [(0.0, 20 * H, 1)], pred_ratio=1.0, p90_ratio=1.0)
    runs = _run(sc, ["offpeak-p90", "offpeak-ckpt"], checkpoint_seconds=1800, restart_seconds=0.0)
    assert np.isnan(runs["offpeak-p90"].first_start[0])  # never fits a 6 h window
    ck = runs["offpeak-ckpt"]
    assert ck.first_start[0] == sc.start_s
    assert np.isfinite(ck.finish[0])  # done over two nights
    assert ck.t.lost_gpu_s == 0  # every window ends on a checkpoint boundary here
    # a 1-min restart moves the checkpoints off the window's end: evicted 29 min after one, unless it yields there
    late = _run(sc, ["offpeak-ckpt"], checkpoint_seconds=1800)["offpeak-ckpt"]
    assert late.t.evictions == 1 and late.t.lost_gpu_s == pytest.approx(29 * 60)
    yielded = _run(sc, ["offpeak-ckpt"], checkpoint_seconds=1800, yield_at_checkpoints=True)["offpeak-ckpt"]
    assert yielded.t.evictions == 0 and yielded.t.lost_gpu_s == 0 and yielded.t.yields == 1
