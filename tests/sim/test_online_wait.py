"""Online pods' wait for GPUs held by offline work: per online GPU request, p50/p99 in the report."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_sim.engine import EngineSettings, Tally, simulate
from offpeak_sim.metrics import online_wait, summarise, wait_percentile
from offpeak_sim.policies import POLICIES

from .conftest import make_scenario

H = 3600.0


def _one_node(rise_to: int) -> np.ndarray:
    """One 8-GPU node: 2 GPUs online all day 0 (history) and until minute 60 of day 1, then `rise_to`."""
    demand = np.full((1, 2 * 1440 + 1), 2, dtype=np.int16)
    demand[0, 1440 + 60 :] = rise_to
    return demand


def test_online_gpus_wait_the_grace_period_only_when_offline_work_holds_them() -> None:
    # a 4-GPU backfill job takes 4 of the 6 free GPUs at the run start; online then rises 2 -> 7 GPUs:
    # 2 of the 5 new online GPUs are free (0 s), 3 need the offline job's GPUs (the grace period)
    sc = make_scenario(_one_node(7), [(0.0, 10 * H, 4)])
    r = simulate(sc, [POLICIES["backfill"]], feed=None,
                 settings=EngineSettings(eviction_grace_seconds=30.0))["backfill"]
    assert r.t.evictions == 1
    assert r.t.online_gpu_requests == 5
    assert r.t.online_waits == {30.0: 3}
    m = summarise(sc, {"backfill": r})["backfill"]
    assert m["online_gpu_requests_blocked"] == 3
    assert m["online_wait_p50_s"] == 30.0  # 3 of 5 waited
    assert m["online_wait_p99_s"] == 30.0
    assert m["online_wait_max_s"] == 30.0


def test_online_wait_is_zero_when_free_gpus_cover_the_rise() -> None:
    sc = make_scenario(_one_node(4), [(0.0, 10 * H, 4)])  # 2 -> 4 online GPUs: 2 of the free GPUs suffice
    r = simulate(sc, [POLICIES["backfill"]], feed=None)["backfill"]
    assert r.t.evictions == 0
    m = summarise(sc, {"backfill": r})["backfill"]
    assert m["online_gpu_requests"] == 2 and m["online_gpu_requests_blocked"] == 0
    assert m["online_wait_p50_s"] == 0.0 and m["online_wait_p99_s"] == 0.0


def test_an_offline_pod_that_exits_sooner_than_the_grace_period_shortens_the_wait() -> None:
    sc = make_scenario(_one_node(8), [(0.0, 10 * H, 4)])
    s = EngineSettings(eviction_grace_seconds=30.0, offline_exit_seconds=5.0)
    r = simulate(sc, [POLICIES["backfill"]], feed=None, settings=s)["backfill"]
    assert r.t.online_waits == {5.0: 4}  # 6 new online GPUs, 2 free, 4 held by the job
    s = EngineSettings(eviction_grace_seconds=30.0, offline_exit_seconds=120.0)  # killed at the grace period
    r = simulate(sc, [POLICIES["backfill"]], feed=None, settings=s)["backfill"]
    assert r.t.online_waits == {30.0: 4}


def test_wait_percentile_counts_the_requests_that_did_not_wait() -> None:
    waits = {30.0: 1, 10.0: 1}
    assert wait_percentile(waits, 100, 0.5) == 0.0
    assert wait_percentile(waits, 100, 0.99) == 10.0
    assert wait_percentile(waits, 100, 1.0) == 30.0
    assert wait_percentile(waits, 2, 0.5) == 10.0
    assert wait_percentile({}, 0, 0.99) is None
    t = Tally()
    assert online_wait(t)["online_wait_p99_s"] is None


@pytest.mark.parametrize("policy", ["backfill", "default"])
def test_every_blocked_online_gpu_is_a_gpu_short_at_an_eviction(random_scenario, policy: str) -> None:
    r = simulate(random_scenario, [POLICIES[policy]], feed=None)[policy]
    grace = EngineSettings().eviction_grace_seconds
    blocked = sum(r.t.online_waits.values())
    assert 0 < blocked <= r.t.online_gpu_requests
    assert blocked * grace == pytest.approx(r.t.online_delay_gpu_s)  # the older GPU-seconds tally agrees
