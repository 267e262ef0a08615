"""Elastic width (a TrainingJob's minWorkers): which width a job starts at, and when its waiting workers join.

A checkpointing job of N GPUs may start on the widest k >= ceil(fraction × N) that fits now (a node, else a gang),
its work taking N / k as long; with joins, its waiting workers join later when GPUs of its type pass the filter,
the job restarting from its last checkpoint. `ElasticWidth` only decides (through the run's `Placer`, so every pod
still passes `filter_nodes`); the engine starts and stops the attempts and does the accounting. Off, every width is
the job's own and the engine's decisions are the rigid ones.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from offpeak_core.decisions import filter_nodes
from offpeak_core.model import Prediction

from offpeak_sim.attempts import Run
from offpeak_sim.jobs import elastic_min_gpus
from offpeak_sim.placement import Placer, Plan
from offpeak_sim.policies import Policy, believed_p50_p90, predictions
from offpeak_sim.scenario import Scenario
from offpeak_sim.settings import EngineSettings


class ElasticWidth:
    """One policy run's elastic-width decisions: start widths for queued jobs and joins for running ones."""

    def __init__(self, policy: Policy, scenario: Scenario, settings: EngineSettings, placer: Placer,
                 node_type: np.ndarray) -> None:
        self.p = policy
        self.sc = scenario
        self.s = settings
        self.placer = placer
        self.node_type = node_type
        self.on = bool(settings.elastic_min_fraction)
        self.joins = settings.elastic_join and self.on  # waiting workers join running jobs
        # fewest GPUs each job may run on (all of them for a rigid job)
        self.min_gpus = elastic_min_gpus(scenario.jobs.gpus, fraction=settings.elastic_min_fraction,
                                         checkpointing=settings.checkpoint_seconds > 0,
                                         from_gpus=settings.elastic_from_gpus)

    # ---- start widths ------------------------------------------------------------------------------------------

    def widths(self, j: int, gj: int, free: np.ndarray) -> range:
        """Widths to try for job j of gj GPUs, widest first: gj alone for a rigid job; for an elastic one gj down to
        its least width, from the widest the free GPUs allow (on one node, or on the `gang_max_nodes` nodes of one
        type with most free). Windows are not used to skip widths: the GPU-time a narrower width needs is not
        monotone in the runtime under the goodput rule, so only the placer's own bounds apply, per width."""
        lo = int(self.min_gpus[j])
        if lo >= gj:
            return range(gj, gj - 1, -1)
        cap = np.minimum(np.clip(free, 0, None), gj)
        ub = int(cap.max()) if cap.size else 0
        if self.s.gangs:
            for ti in range(len(self.sc.fleet.types)):
                on = np.sort(cap[self.node_type == ti])[::-1][: self.s.gang_max_nodes]
                ub = max(ub, int(on.sum()))
        return range(min(gj, ub), lo - 1, -1)

    def at_width(self, k: int, gj: int, w: int, p50: np.ndarray | None, p90: np.ndarray | None,
                 need: np.ndarray | None) -> tuple[dict[str, Prediction] | None, np.ndarray | None, np.ndarray | None]:
        """The policy's beliefs about queued job k (of gj GPUs) run on w GPUs: predictions, p90 and window needed per
        GPU type (all None for runtime-blind policies). At w < gj its runtimes are scaled by gj / w: the same work
        on fewer GPUs."""
        if not self.p.windowed:
            return None, None, None
        assert p50 is not None and p90 is not None and need is not None
        if w == gj:
            return predictions(self.sc.fleet.types, p50[k], p90[k]), p90[k], need[k]
        p90_row = p90[k] * (gj / w)
        need_row = self.placer.needs(p90_row[None, :], 1)[0]
        return predictions(self.sc.fleet.types, p50[k] * (gj / w), p90_row), p90_row, need_row

    def place(self, k: int, j: int, gj: int, free: np.ndarray, now: float, p50: np.ndarray | None,
              p90: np.ndarray | None, need: np.ndarray | None, levels: np.ndarray | None
              ) -> tuple[int, str | None, Plan | None]:
        """Queued job k (job j of gj GPUs) at the widest width that places now: (width, node, None) or
        (width, None, gang); (the last width tried, None, None) when none does."""
        chosen = plan = None
        width = gj
        for width in self.widths(j, gj, free):
            predicted, p90_row, need_row = self.at_width(k, gj, width, p50, p90, need)
            chosen, plan = self.placer.place(j, width, free, now, predicted, p90_row, need_row, levels)
            if chosen is not None or plan is not None:
                break
        return width, chosen, plan

    # ---- joins -------------------------------------------------------------------------------------------------

    def narrow(self, runs: Iterable[Run]) -> list[Run]:
        """Running attempts narrower than their jobs, the oldest waiting workers first."""
        gpus = self.sc.jobs.gpus
        return sorted((r for r in runs if r.gpus < int(gpus[r.job])), key=lambda x: (x.start, x.job))

    def room_on_type(self, r: Run, free: np.ndarray) -> bool:
        """Is any GPU of run r's type free (else no worker of it can join: skip planning)?"""
        return bool(((self.node_type == self.node_type[r.node]) & (free > 0)).any())

    def plan_join(self, r: Run, free: np.ndarray, now: float, levels: np.ndarray | None, remaining_ref: np.ndarray,
                  saved: float, measured: np.ndarray | None = None) -> tuple[Plan, float | None] | None:
        """GPUs on run r's GPU type for as many of its waiting workers as can join now (widest first, at least 1),
        each pod passing `filter_nodes` for the job's remaining run (after the restart: `remaining_ref` less the
        `saved` seconds of its last checkpoint) at the new width; with the policy's p90 of that run (`measured`:
        the engine's paces measured so far, run r's own type included). None when none can join."""
        pl = self.placer
        j = r.job
        full = int(self.sc.jobs.gpus[j])
        missing = full - r.gpus
        ti = int(self.node_type[r.node])
        have = {n for n, _ in r.members}
        p50 = p90 = None
        if self.p.windowed:
            rem = remaining_ref.copy()
            rem[j] = max(0.0, rem[j] - saved / r.slowdown)
            if measured is not None and now - r.start > r.startup:  # run r is timing its steps on its type now
                measured = measured.copy()
                measured[j, ti] = True
            p50, p90 = believed_p50_p90(self.p, scenario=self.sc, jobs=np.array([j]), remaining_ref_s=rem,
                                        measured=measured)
        on_type = np.flatnonzero((self.node_type == ti) & (free > 0))
        for x in range(min(missing, int(free[on_type].sum())), 0, -1):
            scale = full / (r.gpus + x)
            predicted = p90_row = None
            if p50 is not None and p90 is not None:
                p90_row = p90[0] * scale
                predicted = predictions(self.sc.fleet.types, p50[0] * scale, p90_row)
            plan: Plan | None = None
            if not self.p.windowed:
                order = on_type if self.p.pick == "first" else on_type[np.argsort(-free[on_type], kind="stable")]
                taken, left = [], x
                for n in order:
                    w = int(min(free[n], left))
                    taken.append((int(n), w))
                    left -= w
                    if left == 0:
                        break
                plan = tuple(taken)
                if not all(pl.passes(j, n, w, free, now, None, len(plan)) for n, w in plan):
                    plan = None
            else:
                one = on_type[free[on_type] >= x]
                if one.size:
                    views = [pl.view(int(n), int(free[n]), now) for n in one]
                    pod = pl.pod(j, x, predicted)
                    res = filter_nodes(pod=pod, nodes=views, now=now, margin=self.s.margin,
                                       checkpoint_intervals=self.p.checkpoint_intervals, goodput=pl.admission(1))
                    if res.passed:
                        plan = ((self.sc.fleet.names.index(pl.pick(pod, views, res.passed, now)), x),)
                if plan is None and x > 1:
                    plan = pl.plan_gang(j, x, free, now, p90_row, levels, predicted, types=(ti,))
            if plan is not None and len(have | {n for n, _ in plan}) <= self.s.gang_max_nodes:
                believed = None if p90_row is None else float(p90_row[ti])
                return plan, believed
        return None

    @staticmethod
    def joined(r: Run, plan: Plan) -> tuple[Plan, int]:
        """Run r's members with `plan`'s workers added (GPUs summed per node), and the new width."""
        width: dict[int, int] = {}
        for n, w in (*r.members, *plan):
            width[n] = width.get(n, 0) + w
        return tuple(width.items()), r.gpus + sum(w for _, w in plan)
