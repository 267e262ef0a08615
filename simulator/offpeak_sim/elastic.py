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

from offpeak_core.gangplans import GangPlan, plan_elastic
from offpeak_core.gangs import width_scale
from offpeak_core.model import PodRequest, Prediction

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

    def widest(self, gj: int, free: np.ndarray, types: tuple[int, ...] | None = None) -> int:
        """The most of gj GPUs the free GPUs can give one job now: on one node, or on the nodes of one GPU type
        (`types`: of these only) together. A bound that spares planning widths that cannot fit."""
        cap = np.minimum(np.maximum(free, 0), gj)
        on = cap if types is None else cap[np.isin(self.node_type, types)]
        ub = int(on.max()) if on.size else 0
        if self.s.gangs:
            for ti in (range(len(self.sc.fleet.types)) if types is None else types):
                ub = max(ub, int(cap[self.node_type == ti].sum()))
        return min(gj, ub)

    def predictions(self, k: int, p50: np.ndarray | None, p90: np.ndarray | None) -> dict[str, Prediction] | None:
        """Queued job k's predictions per GPU type at its full width (None: runtime-blind)."""
        if not self.p.windowed:
            return None
        assert p50 is not None and p90 is not None
        return predictions(self.sc.fleet.types, p50[k], p90[k])

    def place(self, k: int, j: int, gj: int, free: np.ndarray, now: float, p50: np.ndarray | None,
              p90: np.ndarray | None, need: np.ndarray | None, levels: np.ndarray | None
              ) -> tuple[int, str | None, Plan | None]:
        """Queued job k (job j of gj GPUs) at the widest width that places now (`gangplans.plan_elastic`, its
        runtime scaled to the width by `gangs.at_width`; a rigid job at gj alone): (width, node, None) or
        (width, None, gang); (gj, None, None) when none does."""
        lo = int(self.min_gpus[j])
        top = self.widest(gj, free) if lo < gj else gj
        if top < lo:
            return gj, None, None
        full = self.placer.pod(j, gj, self.predictions(k, p50, p90))
        got: dict[int, tuple[str | None, Plan | None]] = {}

        def place_at(sized: PodRequest, width: int) -> GangPlan:
            need_row = None
            if p90 is not None and need is not None:
                p90_row = p90[k] * width_scale(width=width, full_width=gj)
                need_row = need[k] if width == gj else self.placer.needs(p90_row[None, :], 1)[0]
            predicted = None if sized.predicted is None else dict(sized.predicted)
            chosen, plan = self.placer.place(j, width, free, now, predicted, need_row, levels)
            got[width] = (chosen, plan)
            return _as_gang_plan(chosen, plan, self.sc.fleet.names, width)

        plan = plan_elastic(pod=full, workers=gj, min_workers=lo, full_width=gj, place=place_at, start=top)
        if not plan.fits:
            return gj, None, None
        chosen, gang = got[plan.width]
        return plan.width, chosen, gang

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
        """GPUs on run r's GPU type for as many of its waiting workers as can join now (widest first, at least 1:
        `gangplans.plan_elastic` over the job's workers not running), each pod passing `filter_nodes` for the job's
        remaining run (after the restart: `remaining_ref` less the `saved` seconds of its last checkpoint) at the
        new width; with the policy's p90 of that run (`measured`: the engine's paces measured so far, run r's own
        type included). None when none can join."""
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
        top = min(missing, self.widest(missing, free, types=(ti,)))
        if top < 1:
            return None
        most = pl.max_nodes(full)
        got: dict[int, tuple[Plan, float | None]] = {}

        def join_at(sized: PodRequest, x: int) -> GangPlan:
            scale = width_scale(width=r.gpus + x, full_width=full)
            p90_row = None if p90 is None else p90[0] * scale
            need_row = None if p90_row is None else pl.needs(p90_row[None, :], 1)[0]
            predicted = None if sized.predicted is None else dict(sized.predicted)
            plan = self._on_type(j, x, ti, free, now, predicted, need_row, levels)
            if plan is None or len(have | {n for n, _ in plan}) > most:
                return GangPlan(())
            got[x] = (plan, None if p90_row is None else float(p90_row[ti]))
            return _as_gang_plan(None, plan, self.sc.fleet.names, x)

        pod = pl.pod(j, full, None if p50 is None or p90 is None else predictions(self.sc.fleet.types, p50[0], p90[0]))
        plan = plan_elastic(pod=pod, workers=missing, min_workers=1, full_width=full, place=join_at, start=top)
        return got[plan.width - r.gpus] if plan.fits else None

    def _on_type(self, j: int, x: int, ti: int, free: np.ndarray, now: float,
                 predicted: dict[str, Prediction] | None, need_row: np.ndarray | None, levels: np.ndarray | None
                 ) -> Plan | None:
        """x GPUs for job j on GPU type ti: one node (the filter and the policy's pick), else a gang there."""
        pl = self.placer
        n = pl.node_for(j, x, free, now, predicted, among=(self.node_type == ti) & (free >= x), columns=False)
        if n is not None:
            return ((n, x),)
        if x > 1 and self.s.gangs:
            return pl.plan_gang(j, x, free, now, predicted, need_row, levels, types=(ti,))
        return None

    @staticmethod
    def joined(r: Run, plan: Plan) -> tuple[Plan, int]:
        """Run r's members with `plan`'s workers added (GPUs summed per node), and the new width."""
        width: dict[int, int] = {}
        for n, w in (*r.members, *plan):
            width[n] = width.get(n, 0) + w
        return tuple(width.items()), r.gpus + sum(w for _, w in plan)


def _as_gang_plan(chosen: str | None, plan: Plan | None, names: tuple[str, ...], width: int) -> GangPlan:
    """The engine's answer for `width` GPUs as a `GangPlan` of one-GPU places (empty when nothing was found)."""
    if chosen is not None:
        return GangPlan((chosen,) * width)
    if plan is not None:
        return GangPlan(tuple(names[n] for n, k in plan for _ in range(k)))
    return GangPlan(())
