"""Everything a run needs, built once and shared by every policy: fleet, online demand, jobs and beliefs.

Time: simulation seconds from 0 = midnight (UTC) at the start of the online history. The first
`history_days` are history only (the forecaster learns from them, no jobs run); jobs arrive from
`start_s = history_days * 86400` on. The extender's forecaster reads times as POSIX seconds; that is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from offpeak.errors import UserError
from offpeak_sim import estimates, jobs as jobs_mod, online
from offpeak_sim.fleet import DEFAULT_MIX, SLOWDOWN, Fleet, build_fleet, parse_mix
from offpeak_sim.jobs import JobStream
from offpeak_sim.onlinepods import OnlinePlacement

DAY = 86400.0


@dataclass(frozen=True)
class ScenarioSettings:
    """Workload knobs (a scenario file's sections map onto these: `offpeak_sim.scenariofile`, which checks them)."""

    online_trace: Path
    jobs_trace: Path
    nodes: int = 200
    gpus_per_node: int = 8
    gpu_mix: str = DEFAULT_MIX
    days: float = 7.0
    history_days: int = 7
    jobs_start_day: float = 0.0  # which day of the job trace the run starts at
    load: float = 0.8  # offered offline GPU-seconds / idle GPU-seconds (thinning target)
    clusters: tuple[str, ...] = ()  # ITP clusters to use ('' = all)
    seed: int = 0
    online: online.OnlineSettings = field(default_factory=online.OnlineSettings)
    predictor_reports: Path | None = None  # folder with the predictor's evaluation JSON
    predictor_sigma: float | None = None  # set: log-normal error with this sigma instead of any report
    fold_wide_jobs: bool = False  # True: jobs wider than a node run on one node, longer (the old model, no gangs)


@dataclass(frozen=True)
class Scenario:
    """Inputs of one simulated period, identical for every policy."""

    fleet: Fleet
    # int16 [nodes, minutes]: online GPUs per node per minute (history + run). With pod-placed online demand
    # (`online_pods` set) the run's part is the placement with no offline pods: each policy places its own.
    demand: np.ndarray
    start_s: float
    end_s: float
    jobs: JobStream
    pred_ratio: np.ndarray  # [jobs, types]: predictor's p50 / true runtime
    p90_ratio: float
    user_est_ref_s: np.ndarray  # [jobs]: user's wall-time estimate on the reference GPU
    profile: estimates.ErrorProfile
    notes: dict[str, object] = field(default_factory=dict)
    online_pods: OnlinePlacement | None = None  # pod-placed online demand: the placement where the run starts

    @property
    def start_minute(self) -> int:
        return int(self.start_s // 60)

    @property
    def end_minute(self) -> int:
        return int(self.end_s // 60)

    def idle_gpu_seconds(self) -> float:
        """GPU-seconds free of online work during the run: the harvestable capacity."""
        d = self.demand[:, self.start_minute : self.end_minute].astype(np.int64)
        return float((self.fleet.gpus[:, None] - d).sum() * 60.0)

    def slowdowns(self) -> np.ndarray:
        return np.array([SLOWDOWN[t] for t in self.fleet.types])


def build_scenario(s: ScenarioSettings) -> Scenario:
    """Load traces, build the fleet, thin the job stream to the target load, draw runtime beliefs."""
    fleet = build_fleet(nodes=s.nodes, gpus_per_node=s.gpus_per_node, mix=parse_mix(s.gpu_mix))
    start_s = s.history_days * DAY
    end_s = start_s + s.days * DAY
    minutes = int(np.ceil(end_s / 60.0)) + 1
    on = online.load_online(s.online_trace, fleet=fleet, minutes=minutes, seed=s.seed, settings=s.online,
                            start_minute=int(start_s // 60))
    demand = on.demand
    all_jobs = jobs_mod.load_jobs(s.jobs_trace, clusters=s.clusters)
    if s.fold_wide_jobs:
        all_jobs = jobs_mod.fold_to_node(all_jobs, gpus_per_node=s.gpus_per_node)
    period = jobs_mod.window(all_jobs, start_s=s.jobs_start_day * DAY, length_s=s.days * DAY)
    if len(period) == 0:
        raise UserError(f"no jobs arrive in days {s.jobs_start_day}..{s.jobs_start_day + s.days} of {s.jobs_trace}")
    rng = np.random.default_rng(s.seed + 1)
    d = demand[:, int(start_s // 60) : int(end_s // 60)].astype(np.int64)
    idle = float((fleet.gpus[:, None] - d).sum() * 60.0)
    # the job trace's GPU-seconds are reference (V100) seconds; offered load counts them on the fleet's GPUs
    mean_slowdown = float(np.mean([SLOWDOWN[t] for t in fleet.gpu_types]))
    offered_before = period.gpu_seconds() * mean_slowdown
    kept = jobs_mod.thin_to_load(period, target_gpu_seconds=s.load * idle / mean_slowdown, rng=rng)
    kept = JobStream(kept.ids, kept.arrival_s + start_s, kept.duration_s, kept.gpus)
    profile = None
    if s.predictor_sigma is not None:
        profile = estimates.default_profile(sigma=s.predictor_sigma, seed=s.seed)
    elif s.predictor_reports is not None:
        profile = estimates.profile_from_reports(s.predictor_reports, seed=s.seed)
    profile = profile or estimates.default_profile(seed=s.seed)
    pred_ratio = profile.sample_ratio(rng, (len(kept), len(fleet.types)))
    user = estimates.user_estimates(kept.duration_s, rng=rng)
    notes: dict[str, object] = {
        "online_layout": online.detect_layout(s.online_trace),
        "online_placement": "pinned" if on.placement is None else "pods",
        "online_busy_share": float(d.sum() / (fleet.gpus.sum() * d.shape[1])),
        "jobs_in_period": len(period),
        "jobs_kept": len(kept),
        "offered_load_before_thinning": offered_before / idle if idle else float("inf"),
        "offered_load": kept.gpu_seconds() * mean_slowdown / idle if idle else float("inf"),
        "predictor_profile": profile.describe(),
    }
    return Scenario(fleet, demand, start_s, end_s, kept, pred_ratio, profile.p90_ratio, user, profile, notes,
                    online_pods=on.placement)
