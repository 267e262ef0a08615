"""Hand-built scenarios: a few nodes, online demand given minute by minute, jobs given one by one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from offpeak_core.model import IdleWindow
from offpeak_sim.estimates import default_profile
from offpeak_sim.fleet import build_fleet
from offpeak_sim.forecasting import WindowFeed
from offpeak_sim.jobs import JobStream
from offpeak_sim.scenario import Scenario

DAY = 86400.0


def make_scenario(
    demand: np.ndarray,
    jobs: Sequence[tuple[float, float, int]],
    *,
    gpus_per_node: int = 8,
    gpu_type: str = "A100-SXM4-40GB",
    history_days: int = 1,
    pred_ratio: float | np.ndarray = 1.0,
    p90_ratio: float = 1.0,
    user_ratio: float = 1.0,
) -> Scenario:
    """`demand` [nodes, minutes] covers history + run; jobs are (arrival seconds after the run start, reference
    duration seconds, GPUs). Reference seconds run `slowdown` times as long on the node's type (A100: 0.5)."""
    nodes, minutes = demand.shape
    fleet = build_fleet(nodes=nodes, gpus_per_node=gpus_per_node, mix={gpu_type: 1.0})
    start = history_days * DAY
    arr = np.array([j[0] for j in jobs], dtype=float) + start
    order = np.argsort(arr, kind="stable")
    js = JobStream(
        ids=np.array([f"j{i}" for i in range(len(jobs))])[order],
        arrival_s=arr[order],
        duration_s=np.array([j[1] for j in jobs], dtype=float)[order],
        gpus=np.array([j[2] for j in jobs], dtype=np.int64)[order],
    )
    ratio = np.broadcast_to(np.asarray(pred_ratio, dtype=float).reshape(-1, 1), (len(jobs), 1))[order].copy()
    return Scenario(
        fleet=fleet,
        demand=demand.astype(np.int16),
        start_s=start,
        end_s=(minutes - 1) * 60.0,
        jobs=js,
        pred_ratio=ratio,
        p90_ratio=p90_ratio,
        user_est_ref_s=js.duration_s * user_ratio,
        profile=default_profile(),
    )


def daily(nodes: int, days: int, busy: Sequence[tuple[int, int, int]], *, gpus: int = 8) -> np.ndarray:
    """Demand [nodes, days*1440 + 1] repeating every day: (start minute, end minute, GPUs busy) per rule."""
    day = np.zeros(1440, dtype=np.int16)
    for a, b, g in busy:
        day[a:b] = np.maximum(day[a:b], g)
    one = np.tile(day, days)
    one = np.concatenate([one, one[:1]])
    return np.tile(np.minimum(one, gpus), (nodes, 1))


def noisy_scenario(*, days: int = 3, n_jobs: int = 80, arrivals_days: float = 1.5,
                   widths: Sequence[int] = (1, 1, 2, 4, 8)) -> Scenario:
    """Six nodes of 8 GPUs, noisy online demand with a daily cycle over `days` (the first is history), `n_jobs` jobs
    of GPUs drawn from `widths` arriving over the first `arrivals_days` of the run (seeded: the same scenario every
    time)."""
    rng = np.random.default_rng(7)
    nodes = 6
    t = np.arange(days * 1440 + 1)
    base = 4 + 3 * np.sin(2 * np.pi * t / 1440)
    demand = np.clip(np.rint(base[None, :] + rng.normal(0, 1.2, (nodes, t.size))), 0, 8)
    jobs = [
        (float(rng.uniform(0, arrivals_days * DAY)), float(rng.uniform(600, 6 * 3600)),
         int(rng.choice(list(widths))))
        for _ in range(n_jobs)
    ]
    return make_scenario(demand, jobs, pred_ratio=rng.lognormal(0, 0.3, n_jobs), p90_ratio=1.5, user_ratio=2.0)


@pytest.fixture
def random_scenario() -> Scenario:
    """Six nodes, noisy online demand with a daily cycle, 80 jobs of mixed sizes over two days."""
    return noisy_scenario()


def windows_now(feed: WindowFeed, node: int, *, offline_gpus: int, now: float) -> list[IdleWindow]:
    """The windows of the node's view (`WindowFeed.view`, what the filter reads) open at `now`."""
    view = feed.view(node, offline_gpus=offline_gpus, free_now=0, now=now)
    return [w for w in view.windows or () if w.start <= now and (w.end is None or w.end > now)]
