"""Gang plans: where every worker of a multi-worker job goes, in fitting idle windows, or that none goes.

Pure and clock-free, so the extender (a gang's first worker filtered plans the whole gang) and the simulator (a job
no single node takes runs as a gang) run the same rule:

- a gang runs on one GPU type (it steps at its slowest worker's pace, and its prediction is per GPU type): the types
  are tried fastest first by the job's own prediction (runtime-blind: in the order the nodes come);
- it spans as few nodes as it can: with m = 1, 2, ... nodes (at most `max_nodes`), each node takes as many workers
  as a window on it has GPUs for (`decisions.fitting_workers`: the filter asked for one pod of k workers' GPUs), the goodput
  rule judging a gang of m pods (`goodput(m)`: the more pods, the likelier one is evicted);
- the nodes that take most come first, then those `prioritize_nodes` scores best, then by name (`order` "fewest");
  the simulator's runtime-blind baselines take them in the order they come ("first") or with most free GPUs first
  ("spread");
- members in one pool share its room (`revise`): each member is judged again with the members before it held.

An elastic gang (a job that runs on any width from its minimum to all its workers) gets the widest width that fits
now (`plan_elastic`), its runtime scaled to that width (`gangs.at_width`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from offpeak_core.decisions import (
    DEFAULT_MARGIN,
    filter_nodes,
    fitting_workers,
    fitting_workers_arrays,
    least_window,
    prediction_for,
    prioritize_nodes,
    score_arrays,
)
from offpeak_core.gangs import at_width
from offpeak_core.goodput import GoodputAdmission
from offpeak_core.model import NodeView, PodRequest
from offpeak_core.nodearrays import NodeArrays

GANG_MAX_NODES = 8  # most nodes one gang spans, unless it needs more (then as few as can hold it: `most_nodes`)

GangOrder = Literal["fewest", "first", "spread"]
Goodput = Callable[[int], GoodputAdmission | None]  # the goodput rule for a job run as that many pods (None: off)
# a member's view with GPUs taken on other nodes by the plan's members before it (node name -> GPUs)
Revise = Callable[[str, Mapping[str, int]], NodeView]


@dataclass(frozen=True, slots=True)
class GangPlan:
    """Places for a gang's workers (a node appears once per worker it takes), best first; empty when it does not
    fit. `failed` carries a reason for every node that got no place. `width`: the job's width the places were
    judged for, workers already bound included (an elastic gang may get fewer places than it asked; 0: no fit).
    `room`: the most places found in fitting windows on one GPU type, on `room_nodes` nodes."""

    places: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""  # why the gang does not fit ('' when it does)
    width: int = 0
    room: int = 0
    room_nodes: int = 0

    @property
    def fits(self) -> bool:
        return bool(self.places)


def most_nodes(*, gpus: int, largest_node: int) -> int:
    """The most nodes a gang of `gpus` GPUs in all spans: `GANG_MAX_NODES`, or as few as hold it when it needs
    more (its GPUs over the largest node's)."""
    need = math.ceil(gpus / largest_node) if largest_node > 0 and gpus > 0 else 1
    return max(GANG_MAX_NODES, need)


def plan_gang(
    *,
    pod: PodRequest,
    workers: int,
    nodes: Sequence[NodeView],
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    min_workers: int | None = None,
    full_width: int | None = None,
    goodput: Goodput | None = None,
    order: GangOrder = "fewest",
    max_nodes: int | None = None,
    min_nodes: int = 1,
    types: Sequence[str] | None = None,
    revise: Revise | None = None,
    reasons: bool = True,
    arrays: NodeArrays | None = None,
) -> GangPlan:
    """Choose places for `workers` copies of `pod` (the gang's remaining workers), or say why they do not fit (the
    rule: this module's docstring).

    Elastic gang (`min_workers` below `workers`): the widest k in workers..min_workers that fits is placed
    (`plan_elastic`). `full_width`: the job's width its prediction is for (default `workers`: none bound yet);
    the workers already bound are `full_width - workers`. Rigid (`min_workers` None or `workers`): all or none.
    `max_nodes`: most nodes the gang spans (default `most_nodes`); `min_nodes`: fewest (the simulator's jobs run
    as one pod on one node, so their gangs span two at least); `types`: the GPU types it may run on, in order
    (default: every type the nodes have, fastest first by the prediction); `reasons` False: no node's reason is
    worded (the simulator reads none); `arrays`: `nodes` as columns, when the caller keeps them (the same plan,
    the filter asked for all nodes at once).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    width = workers if full_width is None else full_width
    if width < workers:
        raise ValueError(f"full_width must be >= workers ({workers}), got {full_width}")
    if min_workers is not None and not 1 <= min_workers <= workers:
        raise ValueError(f"min_workers must be in 1..{workers}, got {min_workers}")

    def rigid(sized: PodRequest, k: int) -> GangPlan:
        return _plan_rigid(pod=sized, workers=k, nodes=nodes, now=now, margin=margin,
                           checkpoint_intervals=checkpoint_intervals, goodput=goodput, order=order,
                           max_nodes=max_nodes, min_nodes=min_nodes, types=types, revise=revise, reasons=reasons,
                           arrays=arrays)

    if min_workers is not None and min_workers < workers:
        return plan_elastic(pod=pod, workers=workers, min_workers=min_workers, full_width=width, place=rigid,
                            monotone=goodput is None)
    plan = rigid(pod, workers)
    return dataclasses.replace(plan, width=width) if plan.fits else plan


def plan_elastic(*, pod: PodRequest, workers: int, min_workers: int, full_width: int,
                 place: Callable[[PodRequest, int], GangPlan], monotone: bool = False,
                 start: int | None = None) -> GangPlan:
    """The widest k of `workers` down to `min_workers` that `place` fits, each judged with the runtime at width
    `bound + k` (`at_width`; bound = `full_width - workers`, workers already running), or why none fits.
    `start`: the first k tried, when the caller knows no more can fit now (the GPUs free).

    `monotone`: a narrower width never finds more room than a wider one (true of the strict rule: it runs longer,
    so it needs longer windows; not of the goodput rule, whose need is not monotone in the runtime), so after
    width k found room for r < k workers the next width tried is r, which keeps the loop short when little fits.
    """
    bound = full_width - workers
    k = workers if start is None else max(min_workers, min(start, workers))
    while True:
        plan = place(at_width(pod, width=bound + k, full_width=full_width), k)
        if plan.fits:
            return dataclasses.replace(plan, width=bound + k)
        nxt = min(k - 1, plan.room) if monotone else k - 1
        if nxt < min_workers:
            break
        k = nxt
    reason = (f"gang of {workers} worker(s) x {pod.gpus} GPU(s) needs {min_workers} to {workers} place(s) in "
              f"fitting windows (elastic: fewer workers run longer); {plan.room} found on {plan.room_nodes} node(s) "
              f"at the runtime of {bound + k} worker(s)")
    failed = {n: reason if r == plan.reason else r for n, r in plan.failed.items()}
    return GangPlan((), failed, reason, room=plan.room, room_nodes=plan.room_nodes)


def _type_order(pod: PodRequest, seen: list[str]) -> list[str]:
    """The GPU types `seen` (as the nodes come), fastest first by the pod's prediction (stable: runtime-blind, as
    they come)."""
    if not pod.predicted:
        return seen

    def p50(gpu_type: str) -> float:
        pred, _ = prediction_for(pod.predicted or {}, gpu_type)
        return math.inf if pred is None else pred.p50

    return sorted(seen, key=p50)


@dataclass
class _Offered:
    """The nodes a gang is planned over: their views and, when the caller keeps them (`NodeArrays` of the same
    nodes, in order), their columns, over which the filter's answers for all of them come at once."""

    pod: PodRequest
    views: Sequence[NodeView]
    arrays: NodeArrays | None
    now: float
    margin: float
    checkpoint_intervals: int

    def __post_init__(self) -> None:
        # from the columns when there are some: no pass over the views (thousands of nodes, every plan)
        if self.arrays is not None:
            self.free = np.maximum(self.arrays.free_now, 0)
        else:
            self.free = np.fromiter((max(0, v.gpus_free_now) for v in self.views), dtype=np.int64,
                                    count=len(self.views))
        self._certain: dict[str, bool] = {}  # per GPU type: may one of its windows end for certain

    def group(self, gpu_type: str) -> np.ndarray:
        """The positions of the nodes of `gpu_type`, in order."""
        if self.arrays is not None:
            names = self.arrays.type_names
            if gpu_type not in names:
                return np.zeros(0, dtype=np.int64)
            return np.flatnonzero(self.arrays.type_code == names.index(gpu_type))
        return np.array([i for i, v in enumerate(self.views) if v.gpu_type == gpu_type], dtype=np.int64)

    def types(self) -> list[str]:
        """The nodes' GPU types in the order they first come."""
        if self.arrays is not None:
            codes, first = np.unique(self.arrays.type_code, return_index=True)
            return [self.arrays.type_names[int(codes[i])] for i in np.argsort(first).tolist()]
        return list(dict.fromkeys(v.gpu_type for v in self.views))

    def capacity(self, rows: np.ndarray, workers: int, goodput: GoodputAdmission | None,
                 upper: np.ndarray | None) -> np.ndarray:
        """Per node of `rows`, the workers it takes in a window that fits them all (`decisions.fitting_workers`), at
        most `upper`'s and what it has free now."""
        tops = np.minimum(workers, self.free[rows] // max(1, self.pod.gpus))
        if upper is not None:
            tops = np.minimum(tops, upper)
        if self.arrays is not None:
            most = np.zeros(len(self.views), dtype=np.int64)
            most[rows] = tops
            got = fitting_workers_arrays(pod=self.pod, nodes=self.arrays, most=most, now=self.now, margin=self.margin,
                                         checkpoint_intervals=self.checkpoint_intervals, goodput=goodput)
            return np.asarray(got[rows], dtype=np.int64)
        return np.asarray(fitting_workers(pod=self.pod, nodes=[self.views[i] for i in rows.tolist()],
                                          most=tops.tolist(), now=self.now, margin=self.margin,
                                          checkpoint_intervals=self.checkpoint_intervals, goodput=goodput),
                          dtype=np.int64)

    def need_key(self, gpu_type: str, rows: np.ndarray, goodput: GoodputAdmission | None) -> tuple[float, int] | None:
        """What the capacity of `rows` (nodes of `gpu_type`) depends on beyond the nodes: the window the filter asks
        (`decisions.least_window`), and the gang's size where a window there may end for certain (it judges such a
        window by its end); None when that is not known so simply (then it is asked every time)."""
        if self.pod.predicted is None:
            return (0.0, 0)
        pred, _ = prediction_for(self.pod.predicted, gpu_type)
        if pred is None:
            return None
        need = least_window(pod=self.pod, p90=pred.p90, margin=self.margin,
                            checkpoint_intervals=self.checkpoint_intervals, goodput=goodput)
        certain = self._certain.get(gpu_type)
        if certain is None:
            if self.arrays is not None:  # the columns pad with windows that do not end for certain
                certain = bool(self.arrays.win_certain[:, rows].any())
            else:
                certain = any(w.end_certain for i in rows.tolist() for w in (self.views[i].windows or ()))
            self._certain[gpu_type] = certain
        return need, (goodput.members if certain and goodput is not None else 0)

    def scores(self, goodput: GoodputAdmission | None) -> np.ndarray:
        """`prioritize_nodes`' score of one worker on every node."""
        if self.arrays is not None:
            return score_arrays(pod=self.pod, nodes=self.arrays, now=self.now, margin=self.margin,
                                checkpoint_intervals=self.checkpoint_intervals, goodput=goodput)
        got = prioritize_nodes(pod=self.pod, nodes=self.views, now=self.now, margin=self.margin,
                               checkpoint_intervals=self.checkpoint_intervals, goodput=goodput)
        return np.fromiter((got.get(v.name, 0) for v in self.views), dtype=np.int64, count=len(self.views))

    def refused(self, rows: np.ndarray, goodput: GoodputAdmission | None) -> Mapping[str, str]:
        """The filter's reason for each node of `rows` (those that take no worker)."""
        return filter_nodes(pod=self.pod, nodes=[self.views[i] for i in rows.tolist()], now=self.now,
                            margin=self.margin, checkpoint_intervals=self.checkpoint_intervals,
                            goodput=goodput).failed


def _plan_rigid(*, pod: PodRequest, workers: int, nodes: Sequence[NodeView], now: float, margin: float,
                checkpoint_intervals: int, goodput: Goodput | None, order: GangOrder, max_nodes: int | None,
                min_nodes: int, types: Sequence[str] | None, revise: Revise | None, reasons: bool,
                arrays: NodeArrays | None) -> GangPlan:
    """All `workers` of a rigid gang placed on one GPU type, or none (the module's rule)."""
    most = max_nodes if max_nodes is not None else most_nodes(
        gpus=workers * pod.gpus, largest_node=max((n.gpus_total for n in nodes), default=0))
    per = max(1, pod.gpus)
    offered = _Offered(pod, nodes, arrays, now, margin, checkpoint_intervals)
    failed: dict[str, str] = {}
    room = room_nodes = 0  # the most places found on one GPU type (where only GPUs free now were counted: a bound)
    found_on: list[str] = []
    scores: np.ndarray | None = None
    seen_types = offered.types()
    # reasons name a node's GPU type only where the nodes have several
    several = len(seen_types) > 1

    def of(gpu_type: str) -> str:
        return f" of {gpu_type}" if several else ""

    for gpu_type in (types if types is not None else _type_order(pod, seen_types)):
        group = offered.group(gpu_type)
        takes = np.minimum(workers, offered.free[group] // per)
        free_places = int(takes.sum())
        if free_places < workers:  # too few GPUs free now: no window can change that
            if free_places > room:
                room, room_nodes = free_places, int((takes > 0).sum())
            if reasons:
                failed.update(offered.refused(group[takes == 0], None))
            found_on.append(f"{free_places} free now on {int((takes > 0).sum())} node(s){of(gpu_type)}")
            continue
        upper: np.ndarray | None = None
        found = found_nodes = 0
        ranked: np.ndarray | None = None
        seen: dict[tuple[float, int], np.ndarray] = {}  # capacity per window needed (a larger gang often needs the same)
        counted: np.ndarray | None = None  # the last capacity `fewest` was counted for
        fewest = 0
        for m in range(min_nodes, most + 1):
            adm = goodput(m) if goodput is not None else None
            key = offered.need_key(gpu_type, group, adm)
            capacity = seen.get(key) if key is not None else None
            if capacity is None:
                capacity = offered.capacity(group, workers, adm, upper)
                if key is not None:
                    seen[key] = capacity
            if m == min_nodes:
                found, found_nodes = int(capacity.sum()), int((capacity > 0).sum())
                if found > room:
                    room, room_nodes = found, found_nodes
                if reasons:
                    failed.update(offered.refused(group[capacity == 0], adm))
                if found >= workers:  # the order among nodes that take as many: ranked once, for one worker
                    if order == "fewest" and scores is None:
                        scores = offered.scores(adm)
                    ranked = _ranked(group, offered, scores, order)
            if int(capacity.sum()) < workers:
                break  # a larger gang needs longer windows: no more room
            assert ranked is not None
            if capacity is not counted:  # (a larger gang often has the same capacity: counted once)
                counted, fewest = capacity, _fewest_nodes(capacity, workers)
            if fewest > most:
                break  # not even the `most` nodes that take most hold it, and a larger gang gets no more room
            members = m if goodput is not None else most
            chosen = None
            if fewest <= members:  # else no order of these nodes holds it on so few
                # only the nodes that take a worker: `_choose` never takes another (thousands of nodes, few taking)
                takers = capacity > 0
                cap = dict(zip(group[takers].tolist(), capacity[takers].tolist()))
                takes_at = np.zeros(offered.free.size, dtype=np.int64)
                takes_at[group] = capacity
                chosen = _choose(pod=pod, workers=workers, ranked=ranked[takes_at[ranked] > 0].tolist(),
                                 fewest=order == "fewest", capacity=cap, views=nodes, now=now, margin=margin,
                                 checkpoint_intervals=checkpoint_intervals, members=members, min_nodes=min_nodes,
                                 revise=revise, member_goodput=goodput)
            if chosen is not None:
                taken = {nodes[i].name for i, _ in chosen}
                unused = {n.name: failed.get(n.name, "not needed by the gang's plan") for n in nodes
                          if n.name not in taken} if reasons else {}
                return GangPlan(tuple(nodes[i].name for i, k in chosen for _ in range(k)), unused, room=found,
                                room_nodes=found_nodes)
            if goodput is None:
                break  # the same room at every gang size: the plan took up to `most` nodes already
            upper = capacity
        found_on.append(f"{found} found on {found_nodes} node(s){of(gpu_type)}")
    reason = (f"gang of {workers} worker(s) x {pod.gpus} GPU(s) needs {workers} place(s) in fitting windows"
              f"{' on one GPU type' if several else ''}; {', '.join(found_on) or '0 found on 0 node(s)'}")
    if reasons:
        for n in nodes:  # the nodes that would take a worker: the gang's reason
            failed.setdefault(n.name, reason)
    return GangPlan((), failed, reason, room=room, room_nodes=room_nodes)


def _ranked(group: np.ndarray, offered: _Offered, scores: np.ndarray | None, order: GangOrder) -> np.ndarray:
    """The nodes of `group` in the order the gang takes them among those that take as many workers: as they come
    ("first"), most free GPUs first ("spread"), or best scored for one worker, then by name ("fewest")."""
    if order == "first":
        return group
    if order == "spread":
        return group[np.argsort(-offered.free[group], kind="stable")]
    assert scores is not None
    if offered.arrays is not None:  # as below, sorted over the columns (the names' order as Python compares them)
        by_name = np.empty(group.size, dtype=np.int64)
        by_name[np.argsort(offered.arrays.names[group], kind="stable")] = np.arange(group.size)
        return group[np.lexsort((by_name, -scores[group].astype(np.int64)))]
    names = [offered.views[i].name for i in group.tolist()]
    return group[sorted(range(group.size), key=lambda j: (-int(scores[group[j]]), names[j]))]


def _fewest_nodes(capacity: np.ndarray, workers: int) -> int:
    """The fewest nodes whose `capacity` holds `workers` (those that take most), or one more than there are."""
    held = np.cumsum(np.sort(capacity)[::-1])
    return int(np.searchsorted(held, workers)) + 1


def _choose(*, pod: PodRequest, workers: int, ranked: Sequence[int], fewest: bool, capacity: Mapping[int, int],
            views: Sequence[NodeView], now: float, margin: float, checkpoint_intervals: int, members: int,
            min_nodes: int, revise: Revise | None, member_goodput: Goodput | None) -> list[tuple[int, int]] | None:
    """Nodes in `ranked` order (`fewest`: those that take most first) taking as many workers as their capacity
    allows, up to `members` nodes and at least `min_nodes`; with `revise`, each member judged again with the members
    before it held (its capacity lowered and the plan made again where one takes fewer). None when no plan is
    found."""
    cap = dict(capacity)
    for _ in range(members + 1):  # plan again while a member, judged with the others held, takes fewer
        taking = [i for i in ranked if cap.get(i, 0) > 0]
        if fewest:  # the nodes that take most first (a stable sort: then in `ranked` order)
            taking.sort(key=lambda i: -cap[i])
        plan = _greedy([(i, cap[i]) for i in taking], workers, members, min_nodes)
        if plan is None or revise is None:
            return plan
        adm = member_goodput(len(plan)) if member_goodput is not None else None
        held: dict[str, int] = {}
        short = False
        for i, k in plan:
            view = revise(views[i].name, held)
            ok = fitting_workers(pod=pod, nodes=[view], most=[k], now=now, margin=margin,
                                 checkpoint_intervals=checkpoint_intervals, goodput=adm)[0]
            if ok < k:
                cap[i] = ok
                short = True
            held[views[i].name] = ok * pod.gpus
        if not short:
            return plan
    return None


def _greedy(ranked: Sequence[tuple[int, int]], workers: int, members: int, min_nodes: int
            ) -> list[tuple[int, int]] | None:
    """Take nodes in order, as many workers as each takes, until `workers`; None when that needs more than
    `members` nodes or fewer than `min_nodes`."""
    plan: list[tuple[int, int]] = []
    left = workers
    for i, k in ranked:
        if k <= 0:
            continue
        take = min(k, left)
        plan.append((i, take))
        left -= take
        if left == 0:
            return plan if min_nodes <= len(plan) <= members else None
        if len(plan) >= members:
            return None
    return None
