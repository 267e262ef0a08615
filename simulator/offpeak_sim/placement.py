"""Where one offline pod, or a gang of them, may go now, decided as the extender decides it.

`Placer` holds one policy's node decisions for its run: the `filter_nodes` views of the nodes (their forecast
windows, cached for the minute), the policy's pick among the nodes that pass, the goodput rule per gang size, the
window a job needs (the pruning bound only) and gang plans. It keeps no offline state of its own: it reads the run's
offline GPUs per node (`used`, the run's array, updated in place by the engine) and the run's window feed.
"""

from __future__ import annotations

import numpy as np

from offpeak_core.decisions import filter_nodes, prioritize_nodes
from offpeak_core.goodput import GoodputAdmission, min_window
from offpeak_core.model import NodeView, PodRequest, Prediction

from offpeak_sim.forecasting import WindowFeed
from offpeak_sim.policies import Policy
from offpeak_sim.scenario import Scenario
from offpeak_sim.settings import EngineSettings

Plan = tuple[tuple[int, int], ...]  # (node, GPUs) per gang member


class Placer:
    """One policy's placement decisions: a node for a pod, else a gang (all or nothing) of one GPU type."""

    def __init__(self, policy: Policy, scenario: Scenario, feed: WindowFeed | None, settings: EngineSettings,
                 used: np.ndarray, node_type: np.ndarray) -> None:
        self.p = policy
        self.sc = scenario
        self.feed = feed
        self.s = settings
        self.used = used  # the run's offline GPUs per node: the same array, the engine updates it in place
        self.node_type = node_type
        self._views: dict[tuple[int, ...], NodeView] = {}
        self._admissions: dict[int, GoodputAdmission] = {}
        self._admissions_version = -1
        self._type_order = np.argsort(scenario.slowdowns(), kind="stable")  # fastest GPU type first

    def new_minute(self) -> None:
        """Forget the views: they hold the windows open now, valid for this minute only."""
        self._views.clear()

    def view(self, n: int, free_now: int, now: float) -> NodeView:
        """Node n as `filter_nodes` sees it with `free_now` GPUs free: with its forecast windows for windowed
        policies (cached per node, offline GPUs and free GPUs, since the same view is asked for many times)."""
        fl = self.sc.fleet
        if not self.p.windowed:
            return NodeView(fl.names[n], fl.gpu_types[n], int(fl.gpus[n]), free_now)
        assert self.feed is not None
        key = (n, int(self.used[n]), free_now, self.feed.pool_key(n))  # a pooled node's windows: its pool's too
        v = self._views.get(key)
        if v is None:
            v = NodeView(
                fl.names[n],
                fl.gpu_types[n],
                int(fl.gpus[n]),
                free_now,
                windows=self.feed.windows_for(n, offline_gpus=int(self.used[n]), now=now),
                data_stale=bool(self.feed.stale[n]),
            )
            self._views[key] = v
        return v

    def pick(self, pod: PodRequest, views: list[NodeView], passed: tuple[str, ...], now: float) -> str:
        """The policy's choice among the nodes that passed: the first, the most free, or the best scored."""
        if self.p.pick == "first":
            return passed[0]
        keep = set(passed)
        ok = [v for v in views if v.name in keep]
        if self.p.pick == "spread":
            return max(ok, key=lambda v: v.gpus_free_now).name
        scores = prioritize_nodes(
            pod=pod, nodes=ok, now=now, margin=self.s.margin, checkpoint_intervals=self.p.checkpoint_intervals,
            goodput=self.admission(1),
        )
        return max(ok, key=lambda v: scores.get(v.name, 0)).name

    def admission(self, members: int) -> GoodputAdmission | None:
        """The goodput rule for one pod of a job run as `members` pods (None: off, or nothing learnt yet)."""
        if not self.p.goodput or self.feed is None or self.feed.survival is None or self.s.checkpoint_seconds <= 0:
            return None
        if self._admissions_version != self.feed.survival_version:
            self._admissions = {}
            self._admissions_version = self.feed.survival_version
        a = self._admissions.get(members)
        if a is None:
            a = self._admissions[members] = GoodputAdmission(self.feed.survival, self.s.goodput, members)
        return a

    def needs(self, p90: np.ndarray, members: int) -> np.ndarray:
        """Window each (job, type) needs, as `filter_nodes` computes it: p90 × (1 + margin), or less by the
        checkpoint cap or the goodput rule (for the pruning bound only; the decision is `filter_nodes`'s)."""
        need = p90 * (1.0 + self.s.margin)
        if self.p.checkpoint_intervals > 0 and self.s.checkpoint_seconds > 0:
            need = np.minimum(need, self.p.checkpoint_intervals * self.s.checkpoint_seconds)
        adm = self.admission(members)
        if adm is not None:
            c = self.s.checkpoint_seconds
            short = np.array([
                max(1.0, min_window(survival=adm.survival, runtime=float(x), checkpoint_interval=c,
                                    settings=adm.settings, members=members))
                for x in p90.ravel()
            ]).reshape(p90.shape)
            need = np.minimum(need, short)
        return need

    def pod(self, j: int, gpus: int, predicted: dict[str, Prediction] | None) -> PodRequest:
        """Job j's pod of `gpus` GPUs as the extender gets it (the policy's predictions, the checkpointing)."""
        return PodRequest(
            name=str(j),
            gpus=gpus,
            predicted=predicted,
            checkpointing=self.s.checkpoint_seconds > 0,
            checkpoint_interval_seconds=self.s.checkpoint_seconds or None,
        )

    def passes(self, j: int, n: int, w: int, free: np.ndarray, now: float, predicted: dict[str, Prediction] | None,
               members: int) -> bool:
        """Does node n pass `filter_nodes` for one gang member of w GPUs (of a gang of `members` pods)?"""
        view = self.view(n, int(free[n]), now)
        res = filter_nodes(pod=self.pod(j, w, predicted), nodes=[view], now=now, margin=self.s.margin,
                           checkpoint_intervals=self.p.checkpoint_intervals, goodput=self.admission(members))
        return bool(res.passed)

    def place(self, j: int, w: int, free: np.ndarray, now: float, predicted: dict[str, Prediction] | None,
              p90_row: np.ndarray | None, need_row: np.ndarray | None, levels: np.ndarray | None
              ) -> tuple[str | None, Plan | None]:
        """Job j on w GPUs: the node `filter_nodes` and the policy's pick give, else a gang (`plan_gang`), else
        (None, None). `predicted`, `p90_row`, `need_row`: the policy's beliefs about its run at this width per GPU
        type (None: runtime-blind); `levels`: the feed's window bounds, for pruning nodes that cannot pass."""
        nodes = np.flatnonzero(free >= w)
        if self.p.windowed and self.s.prune and nodes.size:
            assert need_row is not None and levels is not None
            nodes = nodes[levels[w][nodes] >= need_row[self.node_type[nodes]]]
        chosen = None
        if nodes.size:
            views = [self.view(int(n), int(free[n]), now) for n in nodes]
            pod = self.pod(j, w, predicted)
            res = filter_nodes(pod=pod, nodes=views, now=now, margin=self.s.margin,
                               checkpoint_intervals=self.p.checkpoint_intervals, goodput=self.admission(1))
            chosen = self.pick(pod, views, res.passed, now) if res.passed else None
        plan = None
        if chosen is None and self.s.gangs and w > 1:
            plan = self.plan_gang(j, w, free, now, p90_row, levels, predicted)
        return chosen, plan

    @staticmethod
    def greedy(nodes: np.ndarray, width: np.ndarray, gj: int, maxn: int) -> Plan | None:
        """Take nodes in order, as many GPUs as each allows, until gj; None if that needs more than maxn nodes."""
        plan: list[tuple[int, int]] = []
        left = gj
        for n, w in zip(nodes, width):
            if w <= 0:
                continue
            take = int(min(w, left))
            plan.append((int(n), take))
            left -= take
            if left == 0:
                return tuple(plan) if len(plan) <= maxn and len(plan) > 1 else None
            if len(plan) >= maxn:
                return None
        return None

    def plan_gang(self, j: int, gj: int, free: np.ndarray, now: float, p90: np.ndarray | None,
                  levels: np.ndarray | None, predicted: dict[str, Prediction] | None,
                  types: tuple[int, ...] | None = None) -> Plan | None:
        """Nodes of one GPU type that take job j's gj GPUs together (all or nothing), or None. `p90`: the policy's
        p90 of the job's remaining run on each GPU type at this width (None: runtime-blind).

        Runtime-blind policies take free GPUs node by node (first fit in node order, or most free first);
        windowed ones take, fastest GPU type first, the nodes with the widest admissible member first, with as
        few members as the goodput rule for that gang size allows; every member is checked by `filter_nodes`.
        """
        maxn = self.s.gang_max_nodes
        order = self._type_order if self.p.windowed else range(len(self.sc.fleet.types))
        for ti in order if types is None else types:
            on_type = np.flatnonzero((self.node_type == ti) & (free > 0))
            if on_type.size < 2 or int(free[on_type].sum()) < gj:
                continue
            if not self.p.windowed:
                order = on_type if self.p.pick == "first" else on_type[np.argsort(-free[on_type], kind="stable")]
                plan = self.greedy(order, np.minimum(free[order], gj), gj, maxn)
                if plan is not None and all(self.passes(j, n, w, free, now, None, len(plan)) for n, w in plan):
                    return plan
                continue
            assert p90 is not None and levels is not None
            cap_w = np.minimum(free[on_type], gj)
            exact: dict[int, int] = {}  # node -> largest member width filter_nodes passed (checked this pass)
            for m in range(2, maxn + 1):
                need_m = float(self.needs(p90[None, ti : ti + 1], m)[0, 0])
                wmax = np.minimum((levels[1:, on_type] >= need_m).sum(axis=0), cap_w)
                for _ in range(maxn + 1):  # re-plan while filter_nodes narrows a bound
                    for i, n in enumerate(on_type):
                        if int(n) in exact:
                            wmax[i] = min(wmax[i], exact[int(n)])
                    order = np.argsort(-wmax, kind="stable")
                    plan = self.greedy(on_type[order], wmax[order], gj, m)
                    if plan is None:
                        break
                    bad = False
                    # members checked so far count as held while the next are checked (pool windows: members in
                    # one pool share its room); the run's offline GPUs are as before once the plan is checked
                    counted: list[tuple[int, int]] = []
                    try:
                        for member, width in plan:
                            ok_w = width
                            while ok_w > 0 and not self.passes(j, member, ok_w, free, now, predicted, len(plan)):
                                ok_w -= 1
                            if ok_w < width:
                                exact[member] = ok_w
                                bad = True
                            self.used[member] += ok_w
                            counted.append((member, ok_w))
                    finally:
                        for member, w in counted:
                            self.used[member] -= w
                    if not bad:
                        return plan
                if plan is None and int(np.sum(wmax)) < gj:
                    break  # even the widest members do not add up; larger gangs need longer windows
        return None
