"""Elastic width (a TrainingJob's minWorkers): a checkpointing job starts on the widest k of its N GPUs that fits
now, ceil(fraction × N) <= k <= N, its remaining runtime scaled by N / k; off, nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_sim.engine import EngineSettings, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.jobs import elastic_min_gpus
from offpeak_sim.metrics import summarise
from offpeak_sim.policies import POLICIES
from offpeak_sim.scenario import Scenario

from .conftest import make_scenario, noisy_scenario

H = 3600.0
EXACT = FeedSettings(mode="exact")
START_UP = EngineSettings().restart_seconds


@pytest.fixture(scope="module")
def noisy() -> Scenario:
    """The engine tests' noisy scenario at a little over half the size (one run day, 48 jobs over 0.95 of it): in the
    four capacity runs it still has narrow starts and joins under every policy, evictions, gangs and jobs running at
    the end, and its runs execute the same lines of engine.py, elastic.py and placement.py as the full-size
    `random_scenario` (checked with a line tracer), in a quarter of the time."""
    return noisy_scenario(days=2, n_jobs=48, arrivals_days=0.95)


def _run(sc, names, **engine):
    return simulate(sc, [POLICIES[n] for n in names], feed=WindowFeed(sc, EXACT),
                    settings=EngineSettings(check_invariants=True, **engine))


def test_least_width_is_a_share_of_the_gpus_rounded_up_and_only_checkpointing_multi_gpu_jobs_shrink() -> None:
    g = np.array([1, 2, 3, 8, 16, 64])
    assert elastic_min_gpus(g, fraction=0.5, checkpointing=True).tolist() == [1, 1, 2, 4, 8, 32]
    assert elastic_min_gpus(g, fraction=0.3, checkpointing=True).tolist() == [1, 1, 1, 3, 5, 20]
    assert elastic_min_gpus(g, fraction=0.5, checkpointing=False).tolist() == g.tolist()  # no checkpoint: rigid
    assert elastic_min_gpus(g, fraction=None, checkpointing=True).tolist() == g.tolist()
    assert elastic_min_gpus(g, fraction=1.0, checkpointing=True).tolist() == g.tolist()
    # a fraction outside 0..1 never gets here: the scenario file refuses it (tests/sim/test_scenariofile.py)


@pytest.mark.parametrize("name", ["backfill", "offpeak", "offpeak-p90"])
def test_a_job_that_fits_at_half_width_starts_at_half_width_with_its_runtime_doubled(name: str) -> None:
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0] = 4  # one node, 4 of its 8 GPUs held by online work the whole time
    sc = make_scenario(demand, [(0.0, 2 * H, 8)])  # 8 GPUs, 2 h of reference work: 1 h on 8 A100s
    rigid = _run(sc, [name])[name]
    assert np.isnan(rigid.first_start[0])  # elastic off: it waits for 8 GPUs, which never come
    r = _run(sc, [name], elastic_min_fraction=0.5)[name]
    assert r.first_start[0] == sc.start_s
    assert r.finish[0] == pytest.approx(sc.start_s + START_UP + 2 * H)  # 4 GPUs: twice the hour
    assert r.t.ran_gpu_s == pytest.approx(4 * (2 * H + START_UP))  # the same GPU-seconds of work, on 4 GPUs
    assert r.narrow_starts == 1
    m = summarise(sc, {name: r})[name]
    assert m["work_done_ref_gpu_hours"] == pytest.approx(2 * 8)  # 2 reference hours on 8 GPUs, whatever the width
    assert m["narrow_starts"] == 1
    assert "narrow_starts" not in summarise(sc, {name: rigid})[name]  # reports without elasticity are unchanged


def test_below_the_least_width_it_still_waits() -> None:
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0] = 5  # 3 GPUs free, the 8-GPU job may go down to 4
    sc = make_scenario(demand, [(0.0, 2 * H, 8)])
    r = _run(sc, ["backfill"], elastic_min_fraction=0.5)["backfill"]
    assert np.isnan(r.first_start[0])


def test_it_takes_the_widest_width_that_fits_across_nodes() -> None:
    demand = np.zeros((2, 3 * 1440 + 1))
    demand[0] = 2  # 6 + 8 = 14 GPUs free: a 16-GPU job (least 8) runs as a 14-GPU gang
    sc = make_scenario(demand, [(0.0, 2 * H, 16)])
    for name in ("backfill", "offpeak"):
        r = _run(sc, [name], elastic_min_fraction=0.5)[name]
        assert r.first_start[0] == sc.start_s, name
        assert r.gang_starts == 1 and r.narrow_starts == 1, name
        assert r.finish[0] == pytest.approx(sc.start_s + START_UP + H * 16 / 14), name


def test_a_full_width_fit_is_taken_at_full_width() -> None:
    sc = make_scenario(np.zeros((1, 3 * 1440 + 1)), [(0.0, 2 * H, 8)])
    r = _run(sc, ["offpeak"], elastic_min_fraction=0.5)["offpeak"]
    assert r.narrow_starts == 0 and r.finish[0] == pytest.approx(sc.start_s + START_UP + H)


def test_the_strict_rule_runs_narrower_where_only_a_narrow_window_is_long_enough() -> None:
    # 8 GPUs free for 1.5 h, then 4 of them stay free all day: the 8-GPU job needs 1 h (x 1.15) at full width,
    # but the window for 8 GPUs lasts 1.5 h only from 00:00; a 3 h job at full width waits, at half width
    # (6 h) it needs 6.9 h of 4 GPUs, which it has
    demand = np.zeros((1, 3 * 1440 + 1), dtype=np.int16)
    for d in range(3):
        demand[0, d * 1440 + 90 : (d + 1) * 1440] = 4
    sc = make_scenario(demand, [(0.0, 6 * H, 8)])  # 3 h on 8 A100s
    rigid = _run(sc, ["offpeak-p90"])["offpeak-p90"]
    el = _run(sc, ["offpeak-p90"], elastic_min_fraction=0.5)["offpeak-p90"]
    assert rigid.first_start[0] != sc.start_s  # no 3.45-h window for 8 GPUs now
    assert el.first_start[0] == sc.start_s and el.narrow_starts == 1
    assert el.t.evictions == 0
    assert el.finish[0] == pytest.approx(sc.start_s + START_UP + 6 * H)


def test_an_evicted_narrow_attempt_keeps_its_checkpointed_work_in_reference_seconds() -> None:
    demand = np.zeros((1, 3 * 1440 + 1), dtype=np.int16)
    day = 1440
    demand[0, day:] = 4
    demand[0, day + 100 : day + 200] = 8  # online takes the whole node at 01:40 of the run's first day
    sc = make_scenario(demand, [(0.0, 8 * H, 8)])
    r = _run(sc, ["backfill"], elastic_min_fraction=0.5, checkpoint_seconds=1800)["backfill"]
    assert r.t.evictions == 1
    # width 4 (on A100s at half width 1 reference second takes 1 s): checkpoints at 31, 61, 91 min; evicted at 100
    assert r.t.lost_gpu_s == pytest.approx(9 * 60 * 4)
    # 90 min of reference work kept; back at 03:20 on 4 GPUs for the 6.5 reference hours left
    assert r.placements[-1] == (0, 0, sc.start_s + 200 * 60)
    assert r.finish[0] == pytest.approx(sc.start_s + 200 * 60 + START_UP + 6.5 * H)
    assert r.useful_ref[0] == pytest.approx(8 * H)


@pytest.mark.parametrize(("join", "narrow"), [(False, False), (True, False), (True, True)],
                         ids=["start-width", "joins", "joins-narrow"])
@pytest.mark.parametrize("mode", ["seasonal", "exact"])
def test_capacity_and_conservation_hold_with_elastic_width(noisy, mode: str, join: bool, narrow: bool) -> None:
    sc = noisy
    runs = simulate(sc, list(POLICIES.values()), feed=WindowFeed(sc, FeedSettings(mode=mode)),
                    settings=EngineSettings(check_invariants=True, checkpoint_seconds=900, elastic_min_fraction=0.5,
                                            elastic_join=join, elastic_narrow=narrow))
    slow = sc.fleet.slowdown(0)
    for name, r in runs.items():
        in_flight = sum(max(0.0, sc.end_s - x.start - x.startup) * x.gpus for x in r.runs.values())
        useful = float((r.useful_ref * slow * sc.jobs.gpus).sum())
        assert r.t.ran_gpu_s == pytest.approx(useful + r.t.lost_gpu_s + r.t.startup_gpu_s + in_flight, rel=1e-9), name
        done = np.isfinite(r.finish)
        assert np.allclose(r.useful_ref[done], sc.jobs.duration_s[done]), name
        assert all(x.gpus <= sc.jobs.gpus[x.job] and len(x.members) <= 8 for x in r.runs.values())
        m = summarise(sc, {name: r})[name]
        kept = m["harvested_gpu_hours"] - m["restart_gpu_hours"]
        assert m["work_done_ref_gpu_hours"] * slow == pytest.approx(kept, rel=1e-9), name
    # the scenario does exercise narrow starts (and joins) under every policy, gangs, evictions, jobs still running
    assert all(r.narrow_starts > 0 and r.gang_starts > 0 for r in runs.values())
    if join:
        assert all(r.t.joins > 0 for r in runs.values())
    assert sum(r.t.evictions for r in runs.values()) > 0 and any(r.runs for r in runs.values())
    assert (sum(r.t.narrowings for r in runs.values()) > 0) == narrow  # gangs do go on narrower here


@pytest.mark.parametrize("gangs", [True, False])
def test_pruning_gives_the_same_decisions_with_elastic_width(noisy, gangs: bool) -> None:
    """Pruning must not drop an elastic job whose full width fits no node: with gangs off, only its narrower
    widths can place it, and the bound is per width."""
    sc = noisy
    pols = [POLICIES[n] for n in ("offpeak", "offpeak-p90", "oracle")]
    kw = dict(checkpoint_seconds=600, elastic_min_fraction=0.5, gangs=gangs)
    a = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=EngineSettings(prune=True, **kw))
    b = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=EngineSettings(prune=False, **kw))
    for name in a:
        assert np.array_equal(a[name].first_start, b[name].first_start, equal_nan=True), name
        assert a[name].placements == b[name].placements, name
        assert a[name].narrow_starts == b[name].narrow_starts, name
    assert all(r.narrow_starts > 0 for r in a.values())  # narrower widths are tried, and pruned, in this scenario


def test_off_is_the_rigid_engine(noisy) -> None:
    sc = noisy
    pols = [POLICIES[n] for n in ("backfill", "offpeak")]
    a = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=EngineSettings())
    b = simulate(sc, pols, feed=WindowFeed(sc, FeedSettings()), settings=EngineSettings(elastic_min_fraction=0.0))
    for name in a:
        assert a[name].placements == b[name].placements and a[name].narrow_starts == 0, name


@pytest.mark.parametrize("name", ["backfill", "offpeak"])
def test_a_waiting_worker_joins_when_its_gpus_free_up_and_the_job_restarts_from_its_checkpoint(name: str) -> None:
    demand = np.zeros((1, 3 * 1440 + 1), dtype=np.int16)
    day = 1440
    demand[0, : day + 120] = 4  # 4 GPUs free until 02:00 of the run's first day, then all 8
    sc = make_scenario(demand, [(0.0, 8 * H, 8)])  # 8 reference hours: 8 h on 4 A100s, 4 h on 8
    stay = _run(sc, [name], elastic_min_fraction=0.5, checkpoint_seconds=1800)[name]
    assert stay.t.joins == 0 and stay.finish[0] == pytest.approx(sc.start_s + START_UP + 8 * H)
    r = _run(sc, [name], elastic_min_fraction=0.5, elastic_join=True, checkpoint_seconds=1800)[name]
    assert r.t.joins == 1 and r.t.evictions == 0 and r.narrow_starts == 1
    # checkpoints at 31, 61, 91 min at width 4 (1 reference second a second): 29 min on 4 GPUs lost at 02:00,
    # then a fresh start-up and the 6.5 reference hours left on 8 A100s
    assert r.t.lost_gpu_s == pytest.approx(29 * 60 * 4)
    assert r.finish[0] == pytest.approx(sc.start_s + 2 * H + START_UP + 6.5 * H / 2)
    assert r.placements[-1] == (0, 0, sc.start_s + 2 * H)
    assert r.useful_ref[0] == pytest.approx(8 * H)
    assert summarise(sc, {name: r})[name]["joins"] == 1


def test_a_scenario_refuses_joins_and_narrowing_without_elastic_width(tmp_path) -> None:
    from offpeak.errors import UserError
    from offpeak_sim.scenariofile import load

    path = tmp_path / "join.yaml"
    for elastic in ("{join: true}", "{narrow: true}", "{min_fraction: 0, join: true}"):
        path.write_text(f"elastic: {elastic}\n")
        with pytest.raises(UserError, match=r"join\.yaml: elastic\.join and elastic\.narrow need elastic\.min_f"):
            load([path])
    path.write_text("elastic: {min_fraction: 0.5, join: true, narrow: true}\n")
    engine = load([path]).settings.engine
    assert (engine.elastic_min_fraction, engine.elastic_join, engine.elastic_narrow) == (0.5, True, True)


def test_only_jobs_from_a_size_up_are_elastic_when_asked() -> None:
    g = np.array([2, 8, 9, 16])
    assert elastic_min_gpus(g, fraction=0.5, checkpointing=True, from_gpus=9).tolist() == [2, 8, 5, 8]
    demand = np.zeros((1, 3 * 1440 + 1))
    demand[0] = 4
    sc = make_scenario(demand, [(0.0, 2 * H, 8)])
    r = _run(sc, ["backfill"], elastic_min_fraction=0.5, elastic_from_gpus=9)["backfill"]
    assert np.isnan(r.first_start[0])  # an 8-GPU job on 8-GPU nodes is not wide: rigid


def _gang_losing_a_node(lost_node: int) -> tuple:
    """Two 8-GPU nodes, one 16-GPU job of 8 reference hours (4 h at full width on A100s) run as a gang from the run's
    start; online work takes all of `lost_node` at 01:40."""
    demand = np.zeros((2, 3 * 1440 + 1), dtype=np.int16)
    demand[lost_node, 1440 + 100:] = 8
    return make_scenario(demand, [(0.0, 8 * H, 16)])


def test_a_gang_that_loses_a_node_goes_on_with_the_others_from_its_checkpoint() -> None:
    sc = _gang_losing_a_node(1)
    r = _run(sc, ["backfill"], elastic_min_fraction=0.5, elastic_narrow=True, checkpoint_seconds=1800)["backfill"]
    assert r.placements[0] == (0, 0, sc.start_s) and r.gang_starts == 1  # worker 0 on node 0
    assert r.t.evictions == 1 and r.t.narrowings == 1
    # checkpoints at 31, 61, 91 min on 16 GPUs: 9 min of them lost at 01:40, 3 reference hours kept; the other
    # 5 go on at once on node 0's 8 GPUs (a reference second a second) after a fresh start-up
    assert r.t.lost_gpu_s == pytest.approx(9 * 60 * 16)
    assert r.placements[-1] == (0, 0, sc.start_s + 100 * 60)
    assert r.finish[0] == pytest.approx(sc.start_s + 100 * 60 + START_UP + 5 * H)
    assert r.useful_ref[0] == pytest.approx(8 * H)
    assert summarise(sc, {"backfill": r})["backfill"]["narrowings"] == 1


@pytest.mark.parametrize("case", ["worker 0's node", "below the least width", "narrowing off"])
def test_a_gang_that_cannot_go_on_narrower_is_requeued(case: str) -> None:
    sc = _gang_losing_a_node(0 if case == "worker 0's node" else 1)
    fraction = 0.75 if case == "below the least width" else 0.5  # 12 of 16 GPUs: one node's 8 are too few
    r = _run(sc, ["backfill"], elastic_min_fraction=fraction, elastic_narrow=case != "narrowing off",
             checkpoint_seconds=1800)["backfill"]
    assert r.t.evictions == 1 and r.t.narrowings == 0
    if case == "narrowing off":
        assert "narrowings" not in summarise(sc, {"backfill": r})["backfill"]  # reports without it are unchanged
