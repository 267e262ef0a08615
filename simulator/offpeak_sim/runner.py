"""One simulation run end to end: scenario, window feed, engine, metrics. No printing, no files."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from offpeak_sim import metrics
from offpeak_sim.engine import EngineSettings
from offpeak_sim.forecasting import FeedSettings
from offpeak_sim.policies import Policy
from offpeak_sim.scenario import Scenario, ScenarioSettings, build_scenario
from offpeak_sim.workers import simulate_policies


@dataclass
class Outcome:
    scenario: Scenario
    metrics: dict[str, dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    harvest: dict[str, list[float]] = field(default_factory=dict)
    jct: dict[str, list[float]] = field(default_factory=dict)


def run(
    *,
    scenario_settings: ScenarioSettings,
    policies: list[Policy],
    feed_settings: FeedSettings = FeedSettings(),
    engine_settings: EngineSettings = EngineSettings(),
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> Outcome:
    """Build the scenario and simulate every policy on it, in up to `workers` processes (the same figures however
    many); `progress(done, total)` gets minutes simulated."""
    t0 = time.perf_counter()
    sc = build_scenario(scenario_settings)
    t1 = time.perf_counter()
    total = sc.end_minute - sc.start_minute
    tick = None if progress is None else (lambda done: progress(done, total))
    runs = simulate_policies(sc, policies, feed_settings=feed_settings, settings=engine_settings, workers=workers,
                             progress=tick)
    t2 = time.perf_counter()
    m = metrics.summarise(sc, runs)
    settings = {
        "scenario": asdict(scenario_settings),
        "feed": asdict(feed_settings),
        "engine": asdict(engine_settings),
        "policies": [p.name for p in policies],
    }
    meta = {
        "settings": settings,
        "scenario": sc.notes | {"nodes": sc.fleet.size, "gpus": int(sc.fleet.gpus.sum()), "gpu_types": sc.fleet.types},
        "timing_s": {"load": t1 - t0, "simulate": t2 - t1},
    }
    h = metrics.harvest_series(runs)
    meta["harvest_gpu_hours_hourly"] = h
    return Outcome(sc, m, meta, h, metrics.jct_samples(sc, runs))
