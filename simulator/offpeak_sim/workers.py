"""Policies simulated side by side in worker processes, with the same figures as one process.

A policy's run reads nothing of another's: the policies share only the window feed, which is a pure function of the
online demand and the scenario (pod-placed online demand gives each policy its own feed anyway), and every random
draw is made when the scenario is built. So groups of policies run in forked processes, each with its own feed, and
each run comes back as its results (`PolicyRun.__getstate__`). What this costs: the shared forecast is made once per
process, so groups are balanced by a rough weight (a windowed policy's decisions cost several times a runtime-blind
one's) and only as many processes as there are cores are used.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from typing import Any

from offpeak_sim.engine import EngineSettings, PolicyRun, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.policies import Policy
from offpeak_sim.scenario import Scenario

WINDOWED_WEIGHT = 2  # a windowed policy's cost against a runtime-blind one's (bench/sim_week.py: ~2-7x a decision)

_CHILD: tuple[Scenario, FeedSettings, EngineSettings, Any] | None = None  # what forked children read


def default_workers() -> int:
    """The cores this process may use (`offpeak simulate --workers`'s default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


def groups(policies: list[Policy], workers: int) -> list[list[Policy]]:
    """At most `workers` groups of similar weight (heaviest first into the lightest group); each group keeps the
    policies' order, and the windowed policies share a group's feed."""
    bins: list[list[Policy]] = [[] for _ in range(max(1, min(workers, len(policies))))]
    weight = [0] * len(bins)
    for p in sorted(policies, key=lambda p: -_weight(p)):  # (a stable sort: ties keep the order asked)
        i = weight.index(min(weight))
        bins[i].append(p)
        weight[i] += _weight(p)
    order = {p.name: i for i, p in enumerate(policies)}
    return [sorted(b, key=lambda p: order[p.name]) for b in bins if b]


def _weight(p: Policy) -> int:
    return WINDOWED_WEIGHT if p.windowed else 1


def simulate_policies(
    scenario: Scenario,
    policies: list[Policy],
    *,
    feed_settings: FeedSettings,
    settings: EngineSettings,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> dict[str, PolicyRun]:
    """`engine.simulate` of every policy, in up to `workers` processes; the runs in the order of `policies`.
    `progress(minutes)` gets the minutes every group has simulated."""
    parts = groups(policies, workers)
    if len(parts) == 1:
        return simulate(scenario, policies, feed=_feed(scenario, policies, feed_settings), settings=settings,
                        progress=progress)
    ctx = mp.get_context("fork")  # the children read the scenario built here, without copying it through a pipe
    done = ctx.Array("q", len(parts), lock=False)
    global _CHILD
    _CHILD = (scenario, feed_settings, settings, done)
    try:
        with ProcessPoolExecutor(max_workers=len(parts), mp_context=ctx) as pool:
            futures = [pool.submit(_run_group, i, part) for i, part in enumerate(parts)]
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
                if progress is not None:
                    progress(min(done))
                for f in finished:
                    f.result()  # a child's error is raised here (once the other groups have ended)
            got: dict[str, PolicyRun] = {}
            for f in futures:
                got.update(f.result())
    finally:
        _CHILD = None
    for r in got.values():
        r.sc = scenario
    return {p.name: got[p.name] for p in policies}


def _run_group(i: int, part: list[Policy]) -> dict[str, PolicyRun]:
    assert _CHILD is not None, "a worker runs in a child forked by simulate_policies"
    scenario, feed_settings, settings, done = _CHILD
    last = [0.0]

    def tick(minutes: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2:  # (a shared write a minute costs little; fewer cost less)
            last[0] = now
            done[i] = minutes
    runs = simulate(scenario, part, feed=_feed(scenario, part, feed_settings), settings=settings, progress=tick)
    done[i] = scenario.end_minute - scenario.start_minute
    return runs


def _feed(scenario: Scenario, policies: list[Policy], settings: FeedSettings) -> WindowFeed | None:
    return WindowFeed(scenario, settings) if any(p.windowed for p in policies) else None
