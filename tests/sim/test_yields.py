"""Planned stops at a checkpoint before the forecast window ends, and the restart cost of every attempt."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from offpeak_sim.engine import EngineSettings, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.metrics import summarise
from offpeak_sim.policies import POLICIES

from .conftest import make_scenario

H = 3600.0
MIN = 60.0
EXACT = FeedSettings(mode="exact")


def _short_window_scenario():
    """One node, free for the first 25 min of the run, then all online until 1 h; one 2-GPU job of 2 h on A100
    whose p90 is a tenth of the truth (so the strict rule admits it into the 25-min window)."""
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0, 1440 + 25 : 1440 + 60] = 8
    return make_scenario(demand, [(0.0, 4 * H, 2)], pred_ratio=0.1)


def _run(sc, names, **engine):
    return simulate(sc, [POLICIES[n] for n in names], feed=WindowFeed(sc, EXACT),
                    settings=EngineSettings(**({"yield_at_checkpoints": True, "check_invariants": True,
                                                "checkpoint_seconds": 10 * MIN} | engine)))


def test_a_job_yields_at_its_last_checkpoint_before_the_window_ends() -> None:
    sc = _short_window_scenario()
    r = _run(sc, ["offpeak-p90"], restart_seconds=0.0)["offpeak-p90"]
    m = summarise(sc, {"offpeak-p90": r})["offpeak-p90"]
    assert r.placements[0][2] == sc.start_s
    assert r.t.yields == 1 and m["yields"] == 1 and m["jobs_yielded"] == 1
    assert r.t.evictions == 0 and r.t.lost_gpu_s == 0.0
    # the 20 min to the checkpoint are kept: the second attempt runs the other 100 min (2 h on A100)
    assert r.finish[0] == pytest.approx(r.placements[1][2] + 100 * MIN)
    assert r.t.online_delay_events == 0 and m["online_gpu_requests_blocked"] == 0  # gone before online came back
    assert r.placements[1][2] >= sc.start_s + H  # requeued, restarted once the node is free again
    assert np.isfinite(r.finish[0])


def test_without_yielding_the_same_job_is_evicted() -> None:
    sc = _short_window_scenario()
    r = _run(sc, ["offpeak-p90"], restart_seconds=0.0, yield_at_checkpoints=False)["offpeak-p90"]
    assert r.t.yields == 0 and r.t.evictions == 1
    assert r.t.lost_gpu_s == pytest.approx(5 * MIN * 2)  # evicted at 25 min, 5 min after the 20-min checkpoint
    assert summarise(sc, {"x": r})["x"]["online_gpu_requests_blocked"] == 2


def test_the_checkpoints_follow_the_restart() -> None:
    sc = _short_window_scenario()
    r = _run(sc, ["offpeak-p90"], restart_seconds=MIN)["offpeak-p90"]
    # start-up 1 min, checkpoints at 11 and 21 min; the one after (31) is past the window end less the margin
    assert r.t.yields == 1 and r.t.evictions == 0 and r.t.lost_gpu_s == 0.0
    assert r.finish[0] == pytest.approx(r.placements[1][2] + MIN + 100 * MIN)  # 20 min kept, then a restart
    assert r.t.startup_gpu_s >= 2 * MIN * 2  # both attempts paid it


def test_a_job_that_saves_on_stop_keeps_the_whole_window() -> None:
    sc = _short_window_scenario()
    r = _run(sc, ["offpeak-p90"], restart_seconds=0.0, save_on_stop_seconds=MIN)["offpeak-p90"]
    m = summarise(sc, {"x": r})["x"]
    # window ends at 25 min, less the 60-s margin: told to stop at 23 min, saved and gone at 24, nothing lost
    assert r.t.yields == 1 and r.t.evictions == 0 and r.t.lost_gpu_s == 0.0
    assert m["online_gpu_requests_blocked"] == 0
    assert r.t.ran_gpu_s >= 24 * MIN * 2
    # 23 of the 120 min kept, against 20 when it stops at its last periodic checkpoint
    assert r.finish[0] == pytest.approx(r.placements[1][2] + 97 * MIN)


def test_a_job_that_cannot_checkpoint_never_yields() -> None:
    sc = _short_window_scenario()
    r = simulate(sc, [POLICIES["offpeak-p90"]], feed=WindowFeed(sc, EXACT),
                 settings=EngineSettings(check_invariants=True, checkpoint_seconds=0.0, yield_at_checkpoints=True)
                 )["offpeak-p90"]
    assert r.t.yields == 0 and r.t.evictions == 1


def test_only_the_offpeak_policies_yield() -> None:
    sc = _short_window_scenario()
    oracle_like = replace(POLICIES["offpeak-p90"], name="no-yield", yields=False)
    runs = simulate(sc, [POLICIES["offpeak-p90"], oracle_like, POLICIES["backfill"]], feed=WindowFeed(sc, EXACT),
                    settings=EngineSettings(check_invariants=True, checkpoint_seconds=10 * MIN, yield_at_checkpoints=True))
    assert runs["offpeak-p90"].t.yields == 1
    assert runs["no-yield"].t.yields == 0 and runs["backfill"].t.yields == 0
    assert POLICIES["offpeak"].yields and not POLICIES["oracle"].yields and not POLICIES["backfill"].yields
    off = simulate(sc, [POLICIES["offpeak-p90"]], feed=WindowFeed(sc, EXACT),
                   settings=EngineSettings(checkpoint_seconds=10 * MIN))["offpeak-p90"]
    assert off.t.yields == 0  # off unless the engine turns it on


def test_restart_cost_delays_useful_work_on_each_attempt() -> None:
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0, 1440 + 100 : 1440 + 200] = 8  # online takes the node from 100 to 200 min into the run
    sc = make_scenario(demand, [(0.0, 8 * H, 2)])  # 4 h on A100
    finish = {}
    for s in (0.0, MIN):
        r = simulate(sc, [POLICIES["backfill"]], feed=None,
                     settings=EngineSettings(check_invariants=True, checkpoint_seconds=30 * MIN, restart_seconds=s)
                     )["backfill"]
        assert r.t.evictions == 1 and len(r.placements) == 2
        assert r.t.startup_gpu_s == pytest.approx(2 * s * 2)  # two attempts, 2 GPUs
        # 90 min checkpointed in the first attempt either way (30/60/90, or 31/61/91 with the start-up)
        assert r.finish[0] == pytest.approx(sc.start_s + 200 * MIN + s + (240 - 90) * MIN)
        finish[s] = r.finish[0]
    assert finish[MIN] - finish[0.0] == pytest.approx(MIN)


def test_work_running_at_the_end_excludes_its_start_up() -> None:
    demand = np.zeros((1, 2 * 1440 + 1))
    sc = make_scenario(demand, [(1439 * MIN, 4 * H, 1)])  # starts in the run's last minute, still starting at its end
    r = simulate(sc, [POLICIES["backfill"]], feed=None, settings=EngineSettings(restart_seconds=MIN))["backfill"]
    m = summarise(sc, {"b": r})["b"]
    assert len(r.runs) == 1
    assert m["work_done_ref_gpu_hours"] == 0.0 and m["restart_gpu_hours"] > 0


def test_a_pod_started_later_into_a_shorter_window_does_not_make_an_earlier_one_yield() -> None:
    # online takes 4 of the 8 GPUs from 25 min: the first pod's 2 GPUs stay free, the later 4-GPU pod's do not
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0, 1440 + 25 : 1440 + 60] = 4
    sc = make_scenario(demand, [(0.0, 4 * H, 2), (MIN, 4 * H, 4)], pred_ratio=np.array([1.0, 0.1]))
    r = _run(sc, ["offpeak-p90"], restart_seconds=0.0)["offpeak-p90"]
    assert r.first_start[0] == sc.start_s and r.first_start[1] == sc.start_s + MIN  # both on the one node
    assert r.job_yields[0] == 0 and r.job_yields[1] == 1  # the later one goes at its 21-min checkpoint
    assert r.t.evictions == 0 and r.t.lost_gpu_s == 0.0


def test_a_measured_pace_stops_at_a_checkpoint_a_job_whose_short_prediction_would_run_into_an_eviction() -> None:
    """The window is 15 min, checkpoints every 10 min; the job's p90 says 12 min (the truth: 2 h). At its first
    checkpoint the prediction says it finishes in time, so it runs on and is evicted at 15 min. Once its pace is
    measured (2 min in, `live_pace_seconds`), the same checkpoint is a planned stop that loses nothing."""
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0, 1440 + 15 : 1440 + 60] = 8
    sc = make_scenario(demand, [(0.0, 4 * H, 2)], pred_ratio=0.1)
    predicted = _run(sc, ["offpeak-p90"], restart_seconds=0.0)["offpeak-p90"]
    assert predicted.t.yields == 0 and predicted.t.evictions == 1
    assert predicted.t.lost_gpu_s == pytest.approx(5 * MIN * 2)
    live = _run(sc, ["offpeak-p90"], restart_seconds=0.0, live_pace_seconds=2 * MIN)["offpeak-p90"]
    assert live.t.yields == 1 and live.t.evictions == 0 and live.t.lost_gpu_s == 0.0
    assert live.placements[0][2] == predicted.placements[0][2] == sc.start_s  # the same admission
