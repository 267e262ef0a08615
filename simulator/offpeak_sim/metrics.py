"""Per-policy figures from the engine's tallies: harvest, interference, JCT, queueing, decision latency.

JCT and queueing delay are taken over the jobs that *every* simulated policy completed (resp. started), so a
policy that never runs the long jobs does not look faster for it; each policy's own completed/started counts
are reported next to them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from offpeak_sim.engine import PolicyRun, Tally
from offpeak_sim.scenario import Scenario


def _stats(x: np.ndarray, prefix: str) -> dict[str, float | None]:
    if x.size == 0:
        return {f"{prefix}_mean_s": None, f"{prefix}_p50_s": None, f"{prefix}_p95_s": None}
    return {
        f"{prefix}_mean_s": float(np.mean(x)),
        f"{prefix}_p50_s": float(np.percentile(x, 50)),
        f"{prefix}_p95_s": float(np.percentile(x, 95)),
    }


def wait_percentile(waits: Mapping[float, int], total: int, q: float) -> float | None:
    """The q-quantile (0..1) of online GPU requests' waits: `waits` maps seconds to how many requests waited so,
    the other `total - sum(waits)` requests waited 0 s. Lower (inverted-CDF) quantile: the smallest wait that at
    least q of the requests did not exceed. None when there were no requests."""
    if total <= 0:
        return None
    values = sorted(waits)
    counts = np.array([0, *(waits[v] for v in values)], dtype=float)
    counts[0] = max(0, total - counts[1:].sum())
    cdf = np.cumsum(counts) / counts.sum()
    return float([0.0, *values][int(np.searchsorted(cdf, q - 1e-12, side="left"))])


def online_wait(t: Tally) -> dict[str, float | int | None]:
    """Online GPUs' wait for a GPU held by offline work: p50, p99, worst, and how many waited at all."""
    blocked = int(sum(t.online_waits.values()))
    n = int(t.online_gpu_requests)
    return {
        "online_gpu_requests": n,
        "online_gpu_requests_blocked": blocked,
        "online_wait_p50_s": wait_percentile(t.online_waits, n, 0.50),
        "online_wait_p99_s": wait_percentile(t.online_waits, n, 0.99),
        "online_wait_max_s": max(t.online_waits, default=0.0) if n else None,
    }


def work_done_ref_gpu_s(scenario: Scenario, r: PolicyRun) -> float:
    """Useful offline work in reference-GPU (V100) GPU-seconds: kept work plus work still running at the end.

    Harvested GPU-hours count occupancy, so a job on a slow GPU "harvests" more for the same work; this does not,
    nor does it count the start-up of attempts (`EngineSettings.restart_seconds`).
    """
    g = scenario.jobs.gpus
    kept = float((r.useful_ref * g).sum())
    running = sum(max(0.0, scenario.end_s - x.start - x.startup) / x.slowdown * g[x.job] for x in r.runs.values())
    return kept + running


def summarise(scenario: Scenario, runs: Mapping[str, PolicyRun]) -> dict[str, dict[str, float | int | None]]:
    """Return {policy: metrics}; keys are part of the `offpeak simulate` report contract."""
    idle = scenario.idle_gpu_seconds()
    arrival = scenario.jobs.arrival_s
    done_all = np.logical_and.reduce([np.isfinite(r.finish) for r in runs.values()])
    started_all = np.logical_and.reduce([np.isfinite(r.first_start) for r in runs.values()])
    out: dict[str, dict[str, float | int | None]] = {}
    for name, r in runs.items():
        t = r.t
        harvested = t.ran_gpu_s - t.lost_gpu_s
        lat = np.array(t.decision_s) * 1e6
        m: dict[str, float | int | None] = {
            "harvested_gpu_hours": harvested / 3600.0,
            "harvest_share": harvested / idle if idle > 0 else 0.0,
            "idle_gpu_hours": idle / 3600.0,
            "ran_gpu_hours": t.ran_gpu_s / 3600.0,
            "work_done_ref_gpu_hours": work_done_ref_gpu_s(scenario, r) / 3600.0,
            "evictions": int(t.evictions),
            "yields": int(t.yields),
            "lost_gpu_seconds": float(t.lost_gpu_s),
            "online_delayed_gpu_seconds": float(t.online_delay_gpu_s),
            "online_delay_events": int(t.online_delay_events),
            **online_wait(t),
            "jobs": len(scenario.jobs),
            "jobs_started": int(np.isfinite(r.first_start).sum()),
            "jobs_completed": int(np.isfinite(r.finish).sum()),
            "jobs_evicted": int((r.job_evictions > 0).sum()),
            "jobs_yielded": int((r.job_yields > 0).sum()),
            "restart_gpu_hours": float(t.startup_gpu_s) / 3600.0,
            "gang_starts": int(r.gang_starts),
            **({"narrow_starts": int(r.narrow_starts), "joins": int(t.joins)} if r.elastic else {}),
            **({"narrowings": int(t.narrowings)} if r.elastic and r.s.elastic_narrow else {}),
            "jct_jobs": int(done_all.sum()),
        }
        m.update(_stats((r.finish - arrival)[done_all], "jct"))
        m.update(_stats((r.first_start - arrival)[started_all], "queue_delay"))
        m["decisions"] = int(t.decisions)
        m["decision_latency_mean_us"] = float(lat.mean()) if lat.size else None
        m["decision_latency_p99_us"] = float(np.percentile(lat, 99)) if lat.size else None
        out[name] = m
    return out


def harvest_series(runs: Mapping[str, PolicyRun], *, minutes_per_point: int = 60) -> dict[str, list[float]]:
    """Cumulative harvested GPU-hours per policy, one point per `minutes_per_point` (occupancy sampled per minute)."""
    series = {}
    for name, r in runs.items():
        cum = np.cumsum(r.t.occupancy * 60.0 - r.t.lost_by_minute) / 3600.0
        series[name] = [float(x) for x in cum[minutes_per_point - 1 :: minutes_per_point]]
    return series


def jct_samples(scenario: Scenario, runs: Mapping[str, PolicyRun]) -> dict[str, list[float]]:
    """JCT (s) of the jobs every policy completed, per policy (for the CDF plot)."""
    done_all = np.logical_and.reduce([np.isfinite(r.finish) for r in runs.values()])
    return {n: [float(x) for x in (r.finish - scenario.jobs.arrival_s)[done_all]] for n, r in runs.items()}
