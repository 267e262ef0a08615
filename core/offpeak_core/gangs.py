"""Gang placement: all workers of a multi-worker job get places in fitting idle windows, or none does.

Pure and clock-free (callers pass `now`), so the extender and the simulator run the same code. Two parts:
`plan_gang` chooses worker places for a whole gang from the node views (a node takes as many workers as its
window has GPUs for: GPUs are counted, not nodes), and `GangReservations` keeps the places reserved while the
workers arrive one by one (claims, bindings, a timeout), and says how many GPUs each node holds back for gangs
so other pods do not take them. Not thread-safe: the extender guards it with its own lock.

An elastic gang (a job that runs on any width from its minimum to all its workers) gets the widest width that fits
now, its runtime scaled to that width (`at_width`), and only its lowest-indexed waiting workers are admitted
(`admitted_workers`); the rest join later, when a plan for them fits, judged by the work the job has left
(`work_left`), not by its whole run.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from offpeak_core.decisions import DEFAULT_MARGIN, filter_nodes, prioritize_nodes
from offpeak_core.model import NodeView, PodRequest, Prediction
from offpeak_core.nodearrays import withhold as withhold  # part of this module's API (the gang view of a node)

DEFAULT_GANG_TIMEOUT_SECONDS = 60.0
MAX_GANG_SIZE = 1024  # far above any real data-parallel job; keeps the per-level loop bounded


class GangKey(NamedTuple):
    """One attempt of one multi-worker job: its workers are placed together."""

    namespace: str
    job: str
    attempt: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.job}#{self.attempt}"


@dataclass(frozen=True, slots=True)
class GangPlan:
    """Places for a gang's workers (a node appears once per worker it takes), best first; empty when it does not
    fit. `failed` carries a reason for every node that got no place. `width`: the job's width the places were
    judged for, workers already bound included (an elastic gang may get fewer places than it asked; 0: no fit)."""

    places: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""  # why the gang does not fit ('' when it does)
    width: int = 0

    @property
    def fits(self) -> bool:
        return bool(self.places)


def worker_capacity(
    *,
    pod: PodRequest,
    workers: int,
    nodes: Sequence[NodeView],
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
) -> tuple[dict[str, int], Mapping[str, str]]:
    """How many of `workers` identical pods each node can take in a window that fits them all, and the filter's
    reason for every node that cannot take even one.

    Level m asks the shared filter whether the node fits one pod of m x `pod.gpus` GPUs (free now and a window
    that outlasts the runtime); only nodes that passed level m - 1 are asked again (more GPUs never fit better).
    """
    first = filter_nodes(pod=pod, nodes=nodes, now=now, margin=margin, checkpoint_intervals=checkpoint_intervals)
    capacity = dict.fromkeys(first.passed, 1)
    if pod.gpus <= 0:  # no GPUs asked: GPUs cannot run out
        return dict.fromkeys(first.passed, workers), first.failed
    by_name = {n.name: n for n in nodes}
    level_nodes = [by_name[name] for name in first.passed]
    for m in range(2, workers + 1):
        if not level_nodes:
            break
        wide = dataclasses.replace(pod, gpus=m * pod.gpus)
        passed = filter_nodes(pod=wide, nodes=level_nodes, now=now, margin=margin,
                              checkpoint_intervals=checkpoint_intervals).passed
        for name in passed:
            capacity[name] = m
        keep = set(passed)
        level_nodes = [n for n in level_nodes if n.name in keep]
    return capacity, first.failed


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
) -> GangPlan:
    """Choose places for `workers` copies of `pod` (the gang's remaining workers), or say why they do not fit.

    Nodes are taken in the order the shared prioritize scores a single worker (fastest GPU type, tightest fitting
    window, fullest node), then by how many workers they take (fewer nodes, less network between workers), then
    by name; each takes as many workers as its window has GPUs for.

    Elastic gang (`min_workers` below `workers`): the widest k in workers..min_workers that fits is placed
    (`_plan_elastic`). `full_width`: the job's width its prediction is for (default `workers`: none bound yet);
    the workers already bound are `full_width - workers`. Rigid (`min_workers` None or `workers`): all or none.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    width = workers if full_width is None else full_width
    if width < workers:
        raise ValueError(f"full_width must be >= workers ({workers}), got {full_width}")
    if min_workers is not None and not 1 <= min_workers <= workers:
        raise ValueError(f"min_workers must be in 1..{workers}, got {min_workers}")
    if min_workers is not None and min_workers < workers:
        return _plan_elastic(pod=pod, workers=workers, min_workers=min_workers, full_width=width, nodes=nodes,
                             now=now, margin=margin, checkpoint_intervals=checkpoint_intervals)
    capacity, failed = worker_capacity(pod=pod, workers=workers, nodes=nodes, now=now, margin=margin,
                                       checkpoint_intervals=checkpoint_intervals)
    room = sum(capacity.values())
    if room < workers:
        reason = (f"gang of {workers} worker(s) x {pod.gpus} GPU(s) needs {workers} place(s) in fitting windows; "
                  f"{room} found on {len(capacity)} node(s)")
        return GangPlan((), {**failed, **dict.fromkeys(capacity, reason)}, reason)
    places, unused = _take_places(pod=pod, workers=workers, capacity=capacity, nodes=nodes, now=now, margin=margin,
                                  checkpoint_intervals=checkpoint_intervals)
    return GangPlan(places, {**failed, **unused}, width=width)


def _take_places(
    *,
    pod: PodRequest,
    workers: int,
    capacity: Mapping[str, int],
    nodes: Sequence[NodeView],
    now: float,
    margin: float,
    checkpoint_intervals: int,
) -> tuple[tuple[str, ...], dict[str, str]]:
    """`workers` places from `capacity` (enough room), best node first, and a reason for each node left out."""
    fitting = [n for n in nodes if n.name in capacity]
    scores = prioritize_nodes(pod=pod, nodes=fitting, now=now, margin=margin,
                              checkpoint_intervals=checkpoint_intervals)
    order = sorted(capacity, key=lambda name: (-scores.get(name, 0), -capacity[name], name))
    places: list[str] = []
    for name in order:
        take = min(capacity[name], workers - len(places))
        places.extend([name] * take)
        if len(places) == workers:
            break
    unused = {name: "not needed by the gang's plan" for name in capacity if name not in places}
    return tuple(places), unused


def width_scale(*, width: int, full_width: int) -> float:
    """How much longer a data-parallel job runs on `width` workers than on the `full_width` its prediction is for.

    Assumption: the job processes the same samples whatever its width, and a worker's step time does not depend on
    how many workers there are, so k workers take full_width / k times as long (fewer workers also all-reduce among
    fewer peers, so this rather errs long).
    """
    if not 1 <= width <= full_width:
        raise ValueError(f"width must be in 1..{full_width}, got {width}")
    return full_width / width


def at_width(pod: PodRequest, *, width: int, full_width: int) -> PodRequest:
    """`pod` with its predicted runtimes (p50 and p90 of every GPU type, for `full_width` workers) scaled to
    `width` workers (`width_scale`)."""
    if pod.predicted is None or width == full_width:
        return pod
    scale = width_scale(width=width, full_width=full_width)
    predicted: dict[str, Prediction] = {
        gpu: dataclasses.replace(p, p50=p.p50 * scale, p90=p.p90 * scale) for gpu, p in pod.predicted.items()
    }
    return dataclasses.replace(pod, predicted=predicted)


# A share of the work a joining worker is always assumed to find, however far the gang seems to be: past this, the
# prediction is off, and a joiner should not be let into windows too short to do anything after its restart.
MIN_WORK_LEFT = 0.1


def work_left(*, elapsed_seconds: float, p90_seconds: float, min_workers: int, full_width: int,
              checkpoint_interval_seconds: float | None) -> float:
    """The share of an elastic job's work (at most) that a worker joining it now still finds, in MIN_WORK_LEFT..1.

    The job's prediction is for its whole run at `full_width` (as at the attempt's start); its workers have run
    for `elapsed_seconds` since worker 0 started. The estimate errs towards more work left: the job is taken to have
    run at its p90 pace and only `min_workers` wide all along (it never runs narrower), and a join restarts every
    worker from its last checkpoint, up to one `checkpoint_interval_seconds` back. No checkpoint interval known: no
    progress is claimed (1.0), as a job that cannot say where it would resume from keeps its whole prediction.
    """
    if checkpoint_interval_seconds is None or p90_seconds <= 0 or elapsed_seconds <= 0:
        return 1.0
    saved = max(0.0, elapsed_seconds - checkpoint_interval_seconds)
    done = saved / (p90_seconds * width_scale(width=min_workers, full_width=full_width))
    return max(MIN_WORK_LEFT, 1.0 - done)


def with_work_left(pod: PodRequest, share: float) -> PodRequest:
    """`pod` with its predicted runtimes (p50 and p90 of every GPU type) scaled to `share` of the work."""
    if pod.predicted is None or share >= 1.0:
        return pod
    if share <= 0.0:
        raise ValueError(f"share must be > 0, got {share}")
    predicted: dict[str, Prediction] = {
        gpu: dataclasses.replace(p, p50=p.p50 * share, p90=p.p90 * share) for gpu, p in pod.predicted.items()
    }
    return dataclasses.replace(pod, predicted=predicted)


def _plan_elastic(
    *,
    pod: PodRequest,
    workers: int,
    min_workers: int,
    full_width: int,
    nodes: Sequence[NodeView],
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
) -> GangPlan:
    """Places for the widest k of `workers` down to `min_workers` that fit, each judged with the runtime at width
    `bound + k` (`at_width`; bound = `full_width - workers`, workers already running), or say why none fits.

    A narrower width runs longer, so it never finds more room than a wider one: after width k found room for r < k
    workers, the next width tried is r (at most), which keeps the loop short when little fits.
    """
    bound = full_width - workers
    k = workers
    while True:
        sized = at_width(pod, width=bound + k, full_width=full_width)
        capacity, failed = worker_capacity(pod=sized, workers=k, nodes=nodes, now=now, margin=margin,
                                           checkpoint_intervals=checkpoint_intervals)
        room = sum(capacity.values())
        if room >= k:
            places, unused = _take_places(pod=sized, workers=k, capacity=capacity, nodes=nodes, now=now,
                                          margin=margin, checkpoint_intervals=checkpoint_intervals)
            return GangPlan(places, {**failed, **unused}, width=bound + k)
        if min(k - 1, room) < min_workers:
            break
        k = min(k - 1, room)
    reason = (f"gang of {workers} worker(s) x {pod.gpus} GPU(s) needs {min_workers} to {workers} place(s) in "
              f"fitting windows (elastic: fewer workers run longer); {room} found on {len(capacity)} node(s) at the "
              f"runtime of {bound + k} worker(s)")
    return GangPlan((), {**failed, **dict.fromkeys(capacity, reason)}, reason)


def admitted_workers(*, size: int, joining: int, bound: Collection[int]) -> frozenset[int]:
    """The worker indexes of an elastic gang of `size` that get its `joining` new places, beside the workers in
    `bound`: the lowest indexes not bound. Worker 0 hosts the rendezvous (torchrun's c10d store), so it is always
    among the first to run; lowest-first keeps the choice the same whichever worker the scheduler asks about."""
    waiting = [i for i in range(size) if i not in bound]
    return frozenset(waiting[:joining])


@dataclass
class Reservation:
    """Places held for one gang: `places` counts worker places per node; `claims` maps a worker (pod id) to the
    node it was admitted to, `bound` to the node it was seen bound on."""

    key: GangKey
    gpus: int  # per worker
    places: Counter[str]
    created: float
    order: tuple[str, ...] = ()  # nodes best first
    claims: dict[str, str] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)
    seen_members: bool = False  # the gang's pods were seen at least once (so "none left" means they are gone)
    # Elastic gangs: the worker indexes the places are for (None: any worker of the gang), and the gang's pods
    # already bound when the places were planned: they hold none of these places (the cluster counts their GPUs).
    workers: frozenset[int] | None = None
    earlier: frozenset[str] = frozenset()

    @property
    def size(self) -> int:
        return sum(self.places.values())

    @property
    def width(self) -> int:
        """How many workers the gang runs on once every place is bound (those bound before included)."""
        return len(self.earlier) + self.size

    def admits(self, worker: int | None) -> bool:
        """Whether worker index `worker` is one the places are for (always, for a gang that names none)."""
        return self.workers is None or worker in self.workers

    def unbound_on(self, node: str) -> int:
        """Reserved worker places on `node` not yet taken by a bound worker (the store counts bound ones)."""
        taken = sum(1 for n in self.bound.values() if n == node)
        return max(0, self.places.get(node, 0) - taken)


# Why a reservation ended: every worker bound, the gang's pods went away, the timeout passed.
COMPLETE, GONE, EXPIRED = "complete", "gone", "expired"
END_OUTCOMES = (COMPLETE, GONE, EXPIRED)


class GangReservations:
    """The reservation table: at most one reservation per gang; places outlive no gang and no timeout."""

    def __init__(self, *, timeout_seconds: float = DEFAULT_GANG_TIMEOUT_SECONDS) -> None:
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0, got {timeout_seconds}")
        self.timeout_seconds = timeout_seconds
        self._table: dict[GangKey, Reservation] = {}
        self.version = 0  # bumped on every change of the places held back, so callers can detect a race

    def __len__(self) -> int:
        return len(self._table)

    def get(self, key: GangKey) -> Reservation | None:
        return self._table.get(key)

    def keys(self) -> list[GangKey]:
        return list(self._table)

    def reserve(self, key: GangKey, *, places: Sequence[str], gpus: int, now: float,
                workers: Collection[int] | None = None, earlier: Collection[str] = ()) -> Reservation:
        """Hold `places` (one node name per worker, best first) for `key`, replacing any earlier reservation.

        `workers`: the only worker indexes admitted (an elastic gang's lowest waiting ones; None: any).
        `earlier`: the gang's pods bound before this plan; a binding of theirs never takes one of these places.
        """
        if not places:
            raise ValueError("a reservation needs at least one place")
        if workers is not None and len(workers) != len(places):
            raise ValueError(f"{len(places)} place(s) for {len(workers)} named worker(s)")
        order = tuple(dict.fromkeys(places))
        res = Reservation(key=key, gpus=gpus, places=Counter(places), created=now, order=order,
                          workers=None if workers is None else frozenset(workers), earlier=frozenset(earlier))
        self._table[key] = res
        self.version += 1
        return res

    def release(self, key: GangKey) -> bool:
        """Drop `key`'s reservation; False when it had none."""
        if self._table.pop(key, None) is None:
            return False
        self.version += 1
        return True

    def admit(self, key: GangKey, pod: str, *, candidates: Collection[str]) -> str | None:
        """The node worker `pod` may go to: its own claim, else the best reserved node with a place no sibling
        claimed or took, among `candidates` (the nodes the scheduler offers); None when no place is left."""
        res = self._table.get(key)
        if res is None:
            return None
        mine = res.claims.get(pod) or res.bound.get(pod)
        if mine is not None and mine in candidates and mine in res.places:
            res.claims[pod] = mine
            return mine
        taken: Counter[str] = Counter()
        for other in set(res.claims) | set(res.bound):
            if other != pod:
                taken[res.bound.get(other) or res.claims[other]] += 1
        for node in res.order:
            if node in candidates and taken[node] < res.places[node]:
                res.claims[pod] = node
                return node
        return None

    def observe(self, key: GangKey, members: Mapping[str, str | None]) -> str | None:
        """Update `key`'s reservation from the gang's pods (pod id -> node it is bound to, or None) and end it when
        every place is taken by a bound worker, or when its pods went away; returns the end outcome or None."""
        res = self._table.get(key)
        if res is None:
            return None
        if members:
            res.seen_members = True
        elif res.seen_members:
            self.release(key)
            return GONE
        bound = {pod: node for pod, node in members.items() if node is not None and pod not in res.earlier}
        if bound != res.bound:
            res.bound = bound
            self.version += 1
        # Claims stay until the reservation ends: a worker admitted a moment ago may not be in `members` yet.
        if all(res.unbound_on(node) == 0 for node in res.places):
            self.release(key)
            return COMPLETE
        return None

    def expire(self, *, now: float) -> list[GangKey]:
        """End the reservations older than the timeout (not every worker arrived and bound in time)."""
        old = [key for key, res in self._table.items() if now - res.created > self.timeout_seconds]
        for key in old:
            self.release(key)
        return old

    def withheld(self, *, exclude: GangKey | None = None) -> dict[str, int]:
        """GPUs per node held back for gangs (other than `exclude`): reserved places not yet taken by a bound
        worker. Bound workers are no longer held back here: the cluster state counts them."""
        out: Counter[str] = Counter()
        for key, res in self._table.items():
            if key == exclude:
                continue
            for node in res.places:
                n = res.unbound_on(node) * res.gpus
                if n:
                    out[node] += n
        return dict(out)
