"""Pod-placed online demand: online pods go where the default scheduler would put them, and only a pod that finds
no room makes the evictor (`plan_for_pending`) evict."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from offpeak_core import evictions
from offpeak_sim import engine as engine_mod
from offpeak_sim import online, paths
from offpeak_sim.engine import EngineSettings, PolicyRun, simulate
from offpeak_sim.fleet import build_fleet
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.onlinepods import OnlinePlacement, OnlinePools, place_without_offline, reference_demand
from offpeak_sim.policies import POLICIES
from offpeak_sim.scenario import Scenario

from .conftest import DAY, make_scenario

H = 3600.0
RUN = 1440  # the run's first minute in these scenarios (one day of history)
NO_CKPT = EngineSettings(checkpoint_seconds=0.0, check_invariants=True)


def pod_scenario(counts: np.ndarray, jobs, *, nodes: int, seed: int = 0, pools=None) -> Scenario:
    """One pool of all `nodes` (unless `pools` lists them) running `counts[pool, minute]` 1-GPU online pods."""
    pool_nodes = pools or (np.arange(nodes),)
    c = np.atleast_2d(counts).astype(np.int64)
    p = OnlinePools(tuple(np.asarray(x) for x in pool_nodes), c, np.ones(len(pool_nodes), dtype=np.int64))
    cap = np.full(nodes, 8, dtype=np.int64)
    ref, at_start = reference_demand(p, cap, seed=seed, minutes=c.shape[1], start_minute=RUN)
    return replace(make_scenario(ref, jobs), online_pods=at_start)


def counts(before: int, changes: dict[int, int], minutes: int = 2 * 1440 + 1) -> np.ndarray:
    """Pod count per minute: `before`, then from run minute m on `changes[m]`."""
    c = np.full(minutes, before, dtype=np.int64)
    for m, v in sorted(changes.items()):
        c[RUN + m :] = v
    return c


def test_a_rise_with_room_on_another_pool_node_evicts_nothing() -> None:
    # a 4-GPU job takes node 0 at the run start; online rises 0 -> 8 pods: node 1 has 8 GPUs free
    jobs = [(0.0, 10 * H, 4)]
    sc = pod_scenario(counts(0, {60: 8}), jobs, nodes=2)
    r = simulate(sc, [POLICIES["backfill"]], feed=None, settings=NO_CKPT)["backfill"]
    assert r.t.evictions == 0
    assert r.t.online_gpu_requests == 8 and sum(r.t.online_waits.values()) == 0
    assert r.demand[:, RUN + 60].sum() == 8 and r.demand[0, RUN + 60] <= 4
    # the pinned model packs the same 8 GPUs onto node 0 and evicts the job
    pinned = np.zeros((2, 2 * 1440 + 1), dtype=np.int16)
    pinned[0, RUN + 60 :] = 8
    r = simulate(make_scenario(pinned, jobs), [POLICIES["backfill"]], feed=None, settings=NO_CKPT)["backfill"]
    assert r.t.evictions == 1


def test_new_pods_spread_to_the_node_with_most_unallocated_gpus() -> None:
    sc = pod_scenario(counts(0, {60: 6}), [(0.0, 10 * H, 2)], nodes=3)
    r = simulate(sc, [POLICIES["backfill"]], feed=None, settings=NO_CKPT)["backfill"]
    # node 0 holds the 2-GPU job: 4 pods level the unallocated GPUs to 6 each, the last 2 go to tied nodes
    on = r.demand[:, RUN + 60].astype(int)
    unallocated = 8 - on - np.array([2, 0, 0])
    assert on.sum() == 6 and on[1] >= 2 and on[2] >= 2 and unallocated.max() - unallocated.min() <= 1


def test_with_no_room_the_evicted_pod_is_the_one_plan_for_pending_picks(monkeypatch) -> None:
    # job 0 (4 GPUs) on node 0 from the start, job 1 (4 GPUs) on node 1 from 30 min (default: most free GPUs);
    # 8 online pods fill the free GPUs at 60 min; a 9th at 90 min finds no room: plan_for_pending evicts job 1,
    # which loses less (60 min of 4 GPUs, no checkpoints, against job 0's 90 min)
    plans: list[evictions.EvictionPlan | None] = []

    def spy(**kw):
        plan = evictions.plan_for_pending(**kw)
        plans.append(plan)
        return plan

    monkeypatch.setattr(engine_mod, "plan_for_pending", spy)
    sc = pod_scenario(counts(0, {60: 8, 90: 9}), [(0.0, 10 * H, 4), (1800.0, 10 * H, 4)], nodes=2)
    r = simulate(sc, [POLICIES["default"]], feed=None, settings=NO_CKPT)["default"]
    assert len(plans) == 1 and plans[0] is not None
    assert plans[0].node == sc.fleet.names[1] and [v.name for v in plans[0].victims] == ["1"]
    assert list(r.job_evictions) == [0, 1]
    assert list(r.demand[:, RUN + 90]) == [4, 5]  # the pod went where the GPUs were freed
    assert r.t.online_waits == {30.0: 1} and r.t.online_delay_events == 1


@pytest.mark.parametrize("policy", ["backfill", "default"])
def test_every_eviction_is_a_victim_of_plan_for_pending(monkeypatch, policy: str) -> None:
    plans: list[evictions.EvictionPlan] = []

    def spy(**kw):
        plan = evictions.plan_for_pending(**kw)
        if plan is not None:
            plans.append(plan)
        return plan

    monkeypatch.setattr(engine_mod, "plan_for_pending", spy)
    rng = np.random.default_rng(3)
    t = np.arange(3 * 1440 + 1)
    c = np.clip(np.rint(16 + 10 * np.sin(2 * np.pi * t / 1440) + rng.normal(0, 3, t.size)), 0, 32)
    jobs = [(float(rng.uniform(0, 1.5 * DAY)), float(rng.uniform(600, 6 * H)), int(rng.choice([1, 2, 4, 8])))
            for _ in range(60)]
    two = np.stack([c, c // 2])  # pool 1 (nodes 4, 5) runs half of pool 0's count
    sc = pod_scenario(two, jobs, nodes=6, pools=(np.array([0, 1, 2, 3]), np.array([4, 5])), seed=1)
    r = simulate(sc, [POLICIES[policy]], feed=None, settings=NO_CKPT)[policy]
    assert r.t.evictions > 0
    victims = Counter(int(v.name) for p in plans for v in p.victims)
    assert victims == Counter({j: int(n) for j, n in enumerate(r.job_evictions) if n})
    assert (r.demand[:, sc.start_minute : sc.end_minute].sum(axis=0) == sc.demand[:, sc.start_minute : sc.end_minute]
            .sum(axis=0)).all()  # every online pod got its GPU in its minute


def test_falling_demand_ends_pods_and_frees_their_gpus() -> None:
    # 16 online pods fill both nodes during the history; 8 end at run minute 30; an 8-GPU job waits for them
    sc = pod_scenario(counts(16, {30: 8}), [(0.0, 2 * H, 8)], nodes=2)
    r = simulate(sc, [POLICIES["backfill"]], feed=None, settings=NO_CKPT)["backfill"]
    assert r.first_start[0] == sc.start_s + 30 * 60
    assert r.demand[:, RUN + 30].sum() == 8 and r.t.evictions == 0


def test_ending_pods_are_chosen_at_random_among_the_pools_pods() -> None:
    pools = OnlinePools((np.array([0, 1]),), np.zeros((1, 1), dtype=np.int64), np.array([1]))
    left = []
    for seed in range(400):
        st = OnlinePlacement.empty(pools, np.array([8, 8]), seed=seed)
        st.pods_on[:] = [6, 2]
        st.end(0, 4)
        assert st.pods_on.sum() == 4
        left.append(int(st.pods_on[0]))
    assert len(set(left)) > 1  # not always the same pods
    assert np.mean(left) == pytest.approx(4 * 6 / 8, abs=0.15)  # hypergeometric: 3 of the 4 left on node 0


def test_history_is_the_same_placement_with_no_offline_pods() -> None:
    # 0 -> 6 pods on 3 nodes in the history: spread 2/2/2 (the pinned model would give 6/0/0)
    c = np.zeros(2 * 1440 + 1, dtype=np.int64)
    c[600:] = 6
    sc = pod_scenario(c, [(DAY - 60, 600.0, 1)], nodes=3)  # a job after the run: no offline pods at all
    assert list(sc.demand[:, 700]) == [2, 2, 2]
    # every policy carries on from where the history ends; with no offline pods it stays the history's process
    r = simulate(sc, [POLICIES["backfill"], POLICIES["default"]], feed=None)
    for run in r.values():
        assert (run.demand == sc.demand).all()


def test_history_has_churn_placed_like_the_run() -> None:
    st = OnlinePlacement.empty(OnlinePools((np.arange(4),), np.array([[0, 12, 5, 20]]), np.array([1])),
                               np.full(4, 8), seed=0)
    seen = []
    for m in range(4):
        place_without_offline(st, m)
        seen.append(st.online_gpus.copy())
    assert [int(x.sum()) for x in seen] == [0, 12, 5, 20]
    assert max(seen[1]) - min(seen[1]) <= 1 and max(seen[3]) <= 8


def _helios(seed: int, placement: str = "pods") -> online.OnlineDemand:
    fleet = build_fleet(nodes=20, gpus_per_node=8, mix={"A100-SXM4-40GB": 1.0})
    return online.load_online(paths.data_root() / "traces" / "helios-earth-vc-2020-05", fleet=fleet,
                              minutes=2 * 1440, seed=seed, start_minute=1440,
                              settings=online.OnlineSettings(placement=placement))


def test_helios_pod_placement_is_deterministic_per_seed_and_keeps_the_vc_totals() -> None:
    a, b, c = _helios(0), _helios(0), _helios(1)
    assert a.placement is not None and b.placement is not None
    assert (a.demand == b.demand).all() and (a.placement.pods_on == b.placement.pods_on).all()
    assert not (a.demand == c.demand).all()
    pinned = _helios(0, "pinned")
    assert pinned.placement is None
    assert (a.demand.sum(axis=0) == pinned.demand.sum(axis=0)).all()  # same VC counts, other nodes
    assert not (a.demand == pinned.demand).all()
    assert (a.placement.online_gpus == a.demand[:, 1439]).all()  # the run starts where the history ends


def test_pod_placed_runs_are_deterministic_per_seed(random_scenario) -> None:
    c = np.clip(random_scenario.demand.sum(axis=0), 0, 48).astype(np.int64)
    runs = []
    for _ in range(2):
        sc = pod_scenario(c, [(0.0, 3 * H, 4), (600.0, 5 * H, 8), (900.0, H, 2)], nodes=6, seed=5)
        runs.append(simulate(sc, [POLICIES["offpeak"], POLICIES["backfill"]], feed=WindowFeed(sc, FeedSettings()),
                             settings=EngineSettings(check_invariants=True)))
    for name in runs[0]:
        a, b = runs[0][name], runs[1][name]
        assert (a.demand == b.demand).all() and a.placements == b.placements and a.t.evictions == b.t.evictions


def test_each_windowed_policy_forecasts_from_its_own_online_demand(random_scenario) -> None:
    c = np.clip(random_scenario.demand.sum(axis=0), 0, 48).astype(np.int64)
    sc = pod_scenario(c, [(0.0, 3 * H, 4), (600.0, 5 * H, 8)], nodes=6, seed=5)
    template = WindowFeed(sc, FeedSettings())
    runs = simulate(sc, [POLICIES["offpeak"], POLICIES["oracle"]], feed=template)
    feeds = [r.feed for r in runs.values()]
    assert feeds[0] is not feeds[1] and template.refresh_index == -1  # the shared feed is only a template
    for r in runs.values():
        assert r.feed is not None and r.feed.demand is r.demand and r.feed.survival is not None
    with pytest.raises(ValueError, match="pinned"):
        PolicyRun(POLICIES["offpeak"], sc, WindowFeed(sc, FeedSettings(mode="exact")), EngineSettings())


def test_a_causal_feed_learns_the_same_window_survival_as_the_shared_one(random_scenario) -> None:
    # on pinned demand, the feed that finds window closes as the clock passes them agrees with the one that reads
    # them from the future (a day before the end: both have followed every window for the whole horizon)
    sc = random_scenario
    shared = WindowFeed(sc, FeedSettings())
    causal = shared.fork(sc.demand.copy())
    for m in range(sc.start_minute, sc.start_minute + 1440, 7):
        now = m * 60.0
        assert shared.maybe_refresh(now) == causal.maybe_refresh(now)
        assert (shared.free == causal.free).all()
        assert shared.survival is not None and causal.survival is not None
        assert (shared.survival.closed == causal.survival.closed).all()
        assert (shared.survival.open_at == causal.survival.open_at).all()
    assert shared.survival.closed.sum() > 0
