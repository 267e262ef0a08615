"""Where one offline pod, or a gang of them, may go now, decided as the extender decides it.

`Placer` holds one policy's node decisions for its run: the views of the nodes (their forecast windows, kept while
what they are built from stays), the policy's pick among the nodes that pass, the goodput rule per gang size, the
window a job needs (the pruning bound only) and gang plans. It keeps no offline state of its own: it reads the run's
offline GPUs per node (`used`, the run's array, updated in place by the engine) and the run's window feed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import numpy as np

from offpeak_core.decisions import filter_nodes, least_window, prediction_for, prioritize_nodes, score_arrays
from offpeak_core.gangplans import GangOrder, most_nodes, plan_gang
from offpeak_core.goodput import GoodputAdmission
from offpeak_core.model import NodeView, PodRequest, Prediction
from offpeak_core.nodearrays import NodeArrays, NodeRows

from offpeak_sim.forecasting import WindowFeed
from offpeak_sim.policies import Policy
from offpeak_sim.scenario import Scenario
from offpeak_sim.settings import EngineSettings

Plan = tuple[tuple[int, int], ...]  # (node, GPUs) per gang member


# From this many nodes on, the filter and prioritize run over columns (the extender's hot path); below, node by node
# (`filter_nodes`, `prioritize_nodes`: the same answers, a test holds them equal, with less overhead per call).
COLUMNS_FROM_NODES = 48


class Placer:
    """One policy's placement decisions: a node for a pod, else a gang (all or nothing) of one GPU type.

    Every node's view is kept, and on larger fleets as columns too (`NodeRows`/`NodeArrays`, as the extender's store
    keeps them): a view is built again only when what it is built from changes (the node's offline and free GPUs,
    its pool's offline GPUs, its forecast), and only its row rewritten."""

    def __init__(self, policy: Policy, scenario: Scenario, feed: WindowFeed | None, settings: EngineSettings,
                 used: np.ndarray, node_type: np.ndarray) -> None:
        self.p = policy
        self.sc = scenario
        self.feed = feed
        self.s = settings
        self.used = used  # the run's offline GPUs per node: the same array, the engine updates it in place
        self.node_type = node_type
        n = scenario.fleet.size
        self.columns = n >= COLUMNS_FROM_NODES
        self._views: list[NodeView | None] = [None] * n
        self._keys = np.full((n, 4), -2, dtype=np.int64)  # what each kept view was built from
        self._stale_rows: set[int] = set()  # kept views not yet written into the columns
        self._rows = NodeRows()
        self._arrays: NodeArrays | None = None
        self._admissions: dict[int, GoodputAdmission] = {}
        self._admissions_version = -1
        self._needs: dict[tuple[bytes, int, bool], np.ndarray] = {}  # `needs` per p90 row
        self._needs_version = -1
        self._index = {name: i for i, name in enumerate(scenario.fleet.names)}
        self._everyone = np.arange(n)
        self._type_rows = [np.flatnonzero(node_type == t) for t in np.unique(node_type).tolist()]  # nodes per type
        self._most_nodes: dict[int, int] = {}  # `max_nodes` per gang size
        self._largest = int(scenario.fleet.gpus.max())  # the most GPUs a node has: a gang's fewest pods
        # runtime-blind policies: widths no node nor gang takes with the free GPUs `_blind_free` (their answer
        # depends on these alone, so a queue of jobs of a few widths is answered once per width until GPUs move)
        self._blind_free = b""
        self._blind_failed: set[int] = set()

    def views(self, nodes: np.ndarray, free: np.ndarray, now: float) -> list[NodeView]:
        """The views of `nodes` with `free` GPUs free (per node of the fleet), built again where their inputs
        changed."""
        self._rebuild(nodes, free, now)
        views = self._views
        return [views[n] for n in nodes.tolist()]  # type: ignore[misc]  # every one is built now

    def _rebuild(self, nodes: np.ndarray, free: np.ndarray, now: float) -> None:
        """Build again the views of `nodes` whose inputs changed."""
        key = self._key_now(nodes, free[nodes])
        changed = (key != self._keys[nodes]).any(axis=1)
        for i in np.flatnonzero(changed).tolist():
            n = int(nodes[i])
            self._views[n] = self._build(n, int(key[i, 1]), now)
            self._keys[n] = key[i]
            self._stale_rows.add(n)

    def _build(self, n: int, free_now: int, now: float) -> NodeView:
        fl = self.sc.fleet
        if not self.p.windowed:
            return NodeView(fl.names[n], fl.gpu_types[n], int(fl.gpus[n]), free_now)
        assert self.feed is not None
        return self.feed.view(n, offline_gpus=int(self.used[n]), free_now=free_now, now=now)

    def _key_now(self, nodes: np.ndarray, free: np.ndarray) -> np.ndarray:
        """What the views of `nodes` are built from now: offline GPUs, free GPUs, their pool's offline GPUs, and the
        version of their forecast."""
        key = np.zeros((nodes.size, 4), dtype=np.int64)
        key[:, 0] = self.used[nodes]
        key[:, 1] = np.maximum(free, 0)
        if self.p.windowed and self.feed is not None:
            key[:, 2] = self.feed.pool_keys()[nodes]
            key[:, 3] = self.feed.version[nodes]
        return key

    def arrays(self, free: np.ndarray, now: float) -> NodeArrays:
        """Every node's view as columns, with `free` GPUs free: the views whose inputs changed are built again and
        only their rows rewritten."""
        everyone = self._everyone
        self._rebuild(everyone, free, now)
        if self._arrays is not None and not self._stale_rows:
            return self._arrays  # no view changed since (a pass asks once per job)
        views: list[NodeView] = self._views  # type: ignore[assignment]  # every one is built now
        at = sorted(self._stale_rows)
        self._stale_rows.clear()
        if self._arrays is None or len(at) > len(everyone) // 4:
            self._arrays = self._rows.gather(views)
        elif at:
            patched = self._rows.patch(self._arrays, at, [views[n] for n in at])
            self._arrays = patched if patched is not None else self._rows.gather(views)
        return self._arrays

    def best(self, scores: np.ndarray, free: np.ndarray, among: np.ndarray | None = None) -> int | None:
        """The policy's choice among the nodes scored above 0 (those the filter passes; `among`: of these only):
        the first, the most free, or the best scored (the first of those in node order)."""
        ok = scores > 0
        if among is not None:
            ok &= among
        if not ok.any():
            return None
        if self.p.pick == "first":
            return int(np.argmax(ok))
        if self.p.pick == "spread":
            return int(np.argmax(np.where(ok, free, -1)))
        return int(np.argmax(np.where(ok, scores, 0)))

    def pick(self, pod: PodRequest, views: list[NodeView], passed: tuple[str, ...], now: float) -> str:
        """The policy's choice among the nodes that passed (views of a few nodes, not the kept columns): the first,
        the most free, or the best scored."""
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

    def needs(self, p90: np.ndarray, members: int, certain: bool = False) -> np.ndarray:
        """Window each (job, type) needs at least (`decisions.least_window`) as one of `members` pods: a bound for
        pruning only; the decision is `filter_nodes`'s. `certain`: a window may end for certain (else only where
        announced ends may come). Kept per row while the goodput rule stays (a queued job's beliefs rarely move)."""
        adm = self.admission(members)
        certain = certain or (self.feed is not None and self.feed.pool_bound is not None)
        if self._needs_version != self._admissions_version:
            self._needs.clear()
            self._needs_version = self._admissions_version
        rows = p90.reshape(-1, p90.shape[-1]) if p90.ndim else p90.reshape(1, 1)
        out = np.empty(rows.shape)
        for i, row in enumerate(rows):
            key = (row.tobytes(), members, certain)
            got = self._needs.get(key)
            if got is None:
                probe = self.pod(-1, 1, None)
                got = self._needs[key] = np.array([
                    least_window(pod=probe, p90=float(x), margin=self.s.margin,
                                 checkpoint_intervals=self.p.checkpoint_intervals, goodput=adm, certain_ends=certain)
                    for x in row.tolist()])
            out[i] = got
        return out.reshape(p90.shape)

    def gang_room(self, p90: np.ndarray, gpus: np.ndarray, free: np.ndarray, now: float,
                  among: np.ndarray | None = None, arrays: NodeArrays | None = None) -> np.ndarray:
        """For each job (a row of `p90`: the policy's p90 per GPU type; `gpus` each), whether a gang plan may find it
        room now (False: `plan_gang` would find none, so the job need not be asked). A bound on `plan_gang`'s own
        count, for every job of a pass at once: per node, the GPU counts k whose window (as the node's view has it
        now) lasts the least one pod needs in a gang of the fewest pods that may hold the job, at most its free GPUs;
        some GPU type must have two nodes that take one and, on the most nodes a gang spans, room for all (`among`:
        of these nodes only).
        Placements in the pass only take room. On fleets without columns every job may fit. `arrays`: the columns
        for `free` at `now`, when the caller has them."""
        jobs = gpus.size
        if not self.columns or not jobs:
            return np.ones(jobs, dtype=bool)
        arrays = arrays if arrays is not None else self.arrays(free, now)
        free_now = np.maximum(free, 0) if among is None else np.where(among, np.maximum(free, 0), 0)
        top = min(int(gpus.max()), int(free_now.max(initial=0)))
        if top <= 0:
            return np.zeros(jobs, dtype=bool)
        # the window one pod needs in a gang of the fewest pods the job can run as: the planner judges every smaller
        # gang size too, but a gang that size cannot hold the job (a node gives at most its GPUs), and it stops at
        # the first size with too little room, so room counted at this size bounds any plan it makes
        least = np.maximum(2, -(-gpus // self._largest))
        certain = bool(arrays.win_certain.any())
        if (least == least[0]).all():
            need = self.needs(p90, int(least[0]), certain=certain)[:, self.node_type]  # (jobs, nodes)
        else:
            need = np.empty((jobs, self.node_type.size))
            for members in np.unique(least).tolist():
                sel = least == members
                need[sel] = self.needs(p90[sel], members, certain=certain)[:, self.node_type]
        need[:, arrays.stale] = -math.inf  # a stale forecast is judged on free GPUs alone
        room = np.zeros(need.shape, dtype=np.int64)
        for k in range(1, top + 1):  # a window for k GPUs is one for fewer: count k = 1, 2, ...
            ok = arrays.window_left(gpus=k, now=now)[None, :] >= need
            if not ok.any():
                break
            room += ok
        room = np.minimum(room, np.minimum(free_now[None, :], gpus[:, None]))
        return self._holds(room, gpus)

    def _holds(self, room: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """Per job (a row of `room`: the workers of one GPU each node may take), whether the nodes of one GPU type
        may hold all its `gpus`: two of them take one (a job one node takes runs as one pod), and the `max_nodes`
        that take most have room for all."""
        jobs = gpus.size
        if jobs == 1:  # (most calls: one job's gang asked alone)
            return np.array([self._holds_one(room[0], int(gpus[0]))])
        most = np.array([self.max_nodes(int(g)) for g in gpus.tolist()], dtype=np.int64)
        holds = np.zeros(jobs, dtype=bool)
        for rows in self._type_rows:
            r = room[:, rows]
            held = np.cumsum(-np.sort(-r, axis=1), axis=1)[np.arange(jobs), np.minimum(most, r.shape[1]) - 1]
            holds |= (held >= gpus) & ((r > 0).sum(axis=1) >= 2)
        return holds

    def _holds_one(self, room: np.ndarray, gpus: int) -> bool:
        """`_holds` of one job: `room` per node of the fleet."""
        most = self.max_nodes(gpus)
        for rows in self._type_rows:
            r = room[rows]
            if np.count_nonzero(r) < 2:
                continue
            top = r if r.size <= most else np.partition(r, r.size - most)[r.size - most:]  # the `most` that take most
            if int(top.sum()) >= gpus:
                return True
        return False

    def pod(self, j: int, gpus: int, predicted: dict[str, Prediction] | None) -> PodRequest:
        """Job j's pod of `gpus` GPUs as the extender gets it (the policy's predictions, the checkpointing)."""
        return PodRequest(
            name=str(j),
            gpus=gpus,
            predicted=predicted,
            checkpointing=self.s.checkpoint_seconds > 0,
            checkpoint_interval_seconds=self.s.checkpoint_seconds or None,
        )

    def place(self, j: int, w: int, free: np.ndarray, now: float, predicted: dict[str, Prediction] | None,
              need_row: np.ndarray | None, levels: np.ndarray | None) -> tuple[str | None, Plan | None]:
        """Job j on w GPUs: the node the extender's filter and the policy's pick give, else a gang (`plan_gang`),
        else (None, None). `predicted`, `need_row`: the policy's beliefs about its run at this width per GPU type
        (None: runtime-blind); `levels`: the feed's window bounds, for pruning nodes that cannot pass."""
        if self.p.windowed or not self.s.prune:
            return self._place(j, w, free, now, predicted, need_row, levels)
        # runtime-blind: the answer is the free GPUs' and the width's alone (the job's name decides nothing), so a
        # width that found nothing is not asked again while they stay (same decisions, faster: `prune`)
        key = free.tobytes()
        if key != self._blind_free:
            self._blind_free = key
            self._blind_failed.clear()
        elif w in self._blind_failed:
            return None, None
        chosen, plan = self._place(j, w, free, now, predicted, need_row, levels)
        if chosen is None and plan is None:
            self._blind_failed.add(w)
        return chosen, plan

    def _place(self, j: int, w: int, free: np.ndarray, now: float, predicted: dict[str, Prediction] | None,
               need_row: np.ndarray | None, levels: np.ndarray | None) -> tuple[str | None, Plan | None]:
        cand = free >= w
        if self.p.windowed and self.s.prune and need_row is not None and levels is not None and w < len(levels):
            cand &= levels[w] >= need_row[self.node_type]  # a bound: no other node can pass (same decisions, faster)
        n = self.node_for(j, w, free, now, predicted, among=cand, columns=self.columns)  # (no other node passes)
        if n is not None:
            return self.sc.fleet.names[n], None
        plan = None
        if self.s.gangs and w > 1:
            plan = self.plan_gang(j, w, free, now, predicted, need_row, levels)
        return None, plan

    def node_for(self, j: int, w: int, free: np.ndarray, now: float, predicted: dict[str, Prediction] | None,
                 among: np.ndarray, *, columns: bool) -> int | None:
        """The node of `among` (a mask over the fleet) that the extender's filter passes for job j's pod of w GPUs and
        the policy picks, or None. `columns`: scored over every node's kept columns, the same answer only where no
        node outside `among` passes (a score's speed is relative to the fastest node that passes); else node by node
        over `among`, as the extender scores the nodes the scheduler sends."""
        if not among.any():
            return None
        pod = self.pod(j, w, predicted)
        if columns:
            scores = score_arrays(pod=pod, nodes=self.arrays(free, now), now=now, margin=self.s.margin,
                                  checkpoint_intervals=self.p.checkpoint_intervals, goodput=self.admission(1))
            return self.best(scores, free, among)
        views = self.views(np.flatnonzero(among), free, now)
        res = filter_nodes(pod=pod, nodes=views, now=now, margin=self.s.margin,
                           checkpoint_intervals=self.p.checkpoint_intervals, goodput=self.admission(1))
        return self._index[self.pick(pod, views, res.passed, now)] if res.passed else None

    def plan_gang(self, j: int, gj: int, free: np.ndarray, now: float, predicted: dict[str, Prediction] | None,
                  need_row: np.ndarray | None, levels: np.ndarray | None, types: tuple[int, ...] | None = None
                  ) -> Plan | None:
        """Nodes of one GPU type that take job j's gj GPUs together (all or nothing), or None: the core's
        `plan_gang` for gj workers of one GPU (a node takes as many as a window on it has GPUs for), on two nodes
        at least (a job one node takes runs as one pod), with the goodput rule per gang size for windowed policies
        and, for the runtime-blind baselines, the nodes in order ("first") or most free first ("spread").
        `types`: the GPU types it may run on (None: any). Members in one pool are judged with the others held."""
        cand = free > 0
        if types is not None:
            cand &= np.isin(self.node_type, types)
        room = np.minimum(np.maximum(free, 0), gj)  # GPUs each node may give: a bound (same decisions, faster)
        if (np.bincount(self.node_type[cand], weights=room[cand], minlength=len(self.sc.fleet.types)) < gj).all():
            return None  # too few GPUs free now on every GPU type
        arrays = None
        if self.p.windowed and self.s.prune and self.columns and predicted is not None:
            arrays = self.arrays(free, now)
            p90 = np.array([[0.0 if (pr := prediction_for(predicted, t)[0]) is None else pr.p90
                             for t in self.sc.fleet.types]])
            if not self.gang_room(p90, np.array([gj]), free, now, among=cand, arrays=arrays)[0]:
                return None  # the nodes' windows, as their views have them now, hold no such gang
        else:
            if self.p.windowed and self.s.prune and need_row is not None and levels is not None:
                # the GPUs whose forecast bound outlasts what one pod of the job needs (a larger gang needs more)
                top = min(int(room.max()), levels.shape[0] - 1)
                room = np.minimum(room, (levels[1 : top + 1] >= need_row[self.node_type]).sum(axis=0))
            if not self._holds_one(np.where(cand, room, 0), gj):
                return None  # no GPU type whose nodes can give gj together on few enough nodes: the plan finds none
        everyone = np.arange(self.sc.fleet.size)  # every node, as the extender offers the nodes the scheduler sends
        if arrays is None and self.columns:
            arrays = self.arrays(free, now)
        views = arrays.views if arrays is not None else self.views(everyone, free, now)
        order: GangOrder = "fewest" if self.p.windowed else ("first" if self.p.pick == "first" else "spread")
        revise = None
        if self.feed is not None and self.feed.pools is not None:  # members in one pool share its room
            def revise(name: str, held: Mapping[str, int]) -> NodeView:
                return self._view_with(self._index[name], held, free, now)
        plan = plan_gang(
            pod=self.pod(j, 1, predicted), workers=gj, nodes=views, arrays=arrays, now=now, margin=self.s.margin,
            checkpoint_intervals=self.p.checkpoint_intervals, goodput=self.admission if self.p.windowed else None,
            order=order, max_nodes=self.max_nodes(gj), min_nodes=2,
            types=None if types is None else tuple(self.sc.fleet.types[t] for t in types), revise=revise,
            reasons=False)
        if not plan.fits:
            return None
        return tuple((self._index[name], k) for name, k in Counter(plan.places).items())

    def max_nodes(self, gpus: int) -> int:
        """The most nodes a gang of `gpus` GPUs spans (`EngineSettings.gang_max_nodes`, else the extender's rule over
        the whole fleet)."""
        got = self._most_nodes.get(gpus)
        if got is None:
            got = self._most_nodes[gpus] = self.s.gang_max_nodes or most_nodes(
                gpus=gpus, largest_node=int(self.sc.fleet.gpus.max()))
        return got

    def _view_with(self, n: int, held: Mapping[str, int], free: np.ndarray, now: float) -> NodeView:
        """Node n's view with `held` GPUs more taken by offline pods on other nodes (a gang's members before it)."""
        taken = [(self._index[name], g) for name, g in held.items()]
        for m, g in taken:
            self.used[m] += g
        try:
            return self._build(n, int(free[n]), now)
        finally:
            for m, g in taken:
                self.used[m] -= g
