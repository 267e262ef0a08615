"""Benchmark: one simulated week of the five default policies on the ITP jobs, with a profile per phase.

Targets (issue 46): a 200-node week (1,600 GPUs) in at most 2 minutes, a 2,000-node week in at most 10. The machine
is shared, so both wall-clock and CPU seconds (this process and its workers) are printed; run it niced:
`nice -n 19 .venv/bin/python bench/sim_week.py [--scenario FILE] [--days D] [--nodes N] [--online-trace NAME]
[--workers N] [--cprofile N]`. What runs is what `offpeak simulate` runs with the same scenario and flags (built and
checked by `offpeak_sim.scenariofile`), in as many worker processes (`offpeak_sim.workers`; by default one per core
this may use): by default the five default policies on the ITP jobs.

Phases are timed by wrapping the simulator's entry points (the code under test is unchanged):
load (traces, jobs, fleet), forecast (the window feed's refreshes and live re-forecasts, shared and per policy),
schedule (placement decisions: filter, prioritize, gang plans), online (evictions for online demand, online pods),
yields, joins, metrics; with workers, each phase is summed over them. `--cprofile N` also prints the N functions
with the most time of their own (in one process: it sets `--workers 1`).

The figures measured so far, before and after, are in reports/sim/README.md, "Speed" (neither target is met yet).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from offpeak.errors import UserError
from offpeak_sim import metrics, paths, runner, scenariofile, workers
from offpeak_sim.engine import PolicyRun
from offpeak_sim.forecasting import WindowFeed
from offpeak_sim.scenariofile import Override

TARGETS_S = {200: 120.0, 2000: 600.0}  # nodes -> most wall-clock seconds for a week

# phase -> (owner, method names): each call's wall and CPU time is added to the phase (a phase nested in another,
# as a policy's own feed refresh inside its step, is counted in the inner phase only: see `_Timer`)
PHASES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "load": (runner, ("build_scenario",)),
    "forecast": (WindowFeed, ("maybe_refresh",)),
    "schedule": (PolicyRun, ("schedule",)),
    "online": (PolicyRun, ("_evict_for_online", "_place_online")),
    "yields": (PolicyRun, ("_plan_yields",)),
    "joins": (PolicyRun, ("_join_pass",)),
    "metrics": (metrics, ("summarise",)),
}


class _Timer:
    """Wall and CPU seconds per phase; time spent in an inner phase is taken out of the outer one."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.cpu: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.calls: dict[str, int] = dict.fromkeys(PHASES, 0)
        self._stack: list[list[float]] = []  # per open phase: inner wall, inner CPU

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([0.0, 0.0])
            w0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                dw, dc = time.perf_counter() - w0, time.process_time() - c0
                inner = self._stack.pop()
                self.wall[phase] += dw - inner[0]
                self.cpu[phase] += dc - inner[1]
                self.calls[phase] += 1
                if self._stack:
                    self._stack[-1][0] += dw
                    self._stack[-1][1] += dc
        return timed

    def add(self, other: dict[str, dict[str, float]]) -> None:
        """Add a worker's figures (`_Timer.figures` of the timer it forked with)."""
        for part in ("wall", "cpu", "calls"):
            mine = getattr(self, part)
            for phase, x in other[part].items():
                mine[phase] += x

    def figures(self) -> dict[str, dict[str, float]]:
        return {"wall": self.wall, "cpu": self.cpu, "calls": self.calls}

    @contextmanager
    def installed(self) -> Iterator[None]:
        saved = []
        for phase, (owner, names) in PHASES.items():
            for name in names:
                fn = getattr(owner, name)
                saved.append((owner, name, fn))
                setattr(owner, name, self.wrap(phase, fn))
        try:
            yield
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (the workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def _workers_report(timer: _Timer, folder: str) -> Iterator[None]:
    """Workers fork with `timer` installed: each writes its phases to `folder` as it ends, and they are added to
    `timer` here (the parent's own figures stay: the load and the metrics)."""
    run_group = workers._run_group

    @functools.wraps(run_group)
    def reported(i: int, part: list[Any]) -> Any:
        own = _Timer()  # this worker's phases only: the copy of the parent's timer holds what the parent did first
        for phase in PHASES:
            own.wall[phase], own.cpu[phase], own.calls[phase] = -timer.wall[phase], -timer.cpu[phase], \
                -timer.calls[phase]
        try:
            return run_group(i, part)
        finally:
            own.add(timer.figures())
            with open(f"{folder}/{i}.json", "w") as f:
                json.dump(own.figures(), f)

    workers._run_group = reported  # type: ignore[assignment]
    try:
        yield
    finally:
        workers._run_group = run_group  # type: ignore[assignment]
        for path in sorted(Path(folder).glob("*.json")):
            timer.add(json.loads(path.read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", metavar="FILE", action="append", default=[],
                    help="scenario file(s), layered as `offpeak simulate --scenario` layers them (default: defaults)")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--online-trace", default=None, help=f"default: the scenario's ({paths.DEFAULT_ONLINE_TRACE})")
    ap.add_argument("--forecast", default=None, choices=("seasonal", "exact"), help="default: the scenario's")
    ap.add_argument("--workers", type=int, default=None,
                    help="processes, as `offpeak simulate --workers` (default: its default, the cores this may use)")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N", help="also print the N costliest functions")
    a = ap.parse_args()
    asked = [("workload.days", a.days, "--days"), ("cluster.nodes", a.nodes, "--nodes"),
             ("online_trace", a.online_trace, "--online-trace"), ("forecast.mode", a.forecast, "--forecast")]
    try:
        run = scenariofile.load(a.scenario, [Override(path, v, flag) for path, v, flag in asked if v is not None])
    except UserError as e:
        ap.error(str(e))
    settings = run.settings
    n_workers = 1 if a.cprofile else (a.workers or workers.default_workers())
    timer = _Timer()
    prof = cProfile.Profile() if a.cprofile else None
    w0, c0 = time.perf_counter(), _cpu_s()
    with timer.installed(), tempfile.TemporaryDirectory() as tmp, _workers_report(timer, tmp):
        if prof is not None:
            prof.enable()
        out = runner.run(scenario_settings=settings.scenario, policies=list(settings.policies),
                         feed_settings=settings.feed, engine_settings=settings.engine, workers=n_workers)
        if prof is not None:
            prof.disable()
    wall, cpu = time.perf_counter() - w0, _cpu_s() - c0
    sc = settings.scenario
    target = TARGETS_S.get(sc.nodes) if sc.days == 7 and not run.files else None
    verdict = "" if target is None else f"; target {target:.0f} s wall: {'ok' if wall <= target else 'OVER'}"
    print(f"sim_week: {' + '.join(run.files) or 'default scenario'}: {sc.nodes} nodes, {sc.days:g} days, "
          f"{len(out.scenario.jobs)} jobs, {sc.online_trace.name}, forecast {settings.feed.mode}, policies "
          f"{','.join(p.name for p in settings.policies)}{' (under cProfile: slower)' if prof else ''}")
    print(f"  total {wall:.1f} s wall, {cpu:.1f} s CPU in {len(workers.groups(list(settings.policies), n_workers))} "
          f"process(es) (load {wall and cpu / wall:.0%} of one core){verdict}")
    print(f"  {'phase':10s} {'wall s':>8s} {'CPU s':>8s} {'calls':>8s}  (summed over the processes)")
    for phase in PHASES:
        print(f"  {phase:10s} {timer.wall[phase]:8.1f} {timer.cpu[phase]:8.1f} {timer.calls[phase]:8d}")
    rest_w = f"{wall - sum(timer.wall.values()):8.1f}" if n_workers == 1 else f"{'-':>8s}"  # (walls overlap)
    print(f"  {'other':10s} {rest_w} {cpu - sum(timer.cpu.values()):8.1f}")
    for name, m in out.metrics.items():
        print(f"  {name:14s} decisions {m['decisions']:6d}  latency mean {m['decision_latency_mean_us'] or 0:8.0f} us"
              f"  p99 {m['decision_latency_p99_us'] or 0:8.0f} us")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(a.cprofile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
