"""Gang placement: all workers of a multi-worker job get places in fitting idle windows, or none does.

Pure and clock-free (callers pass `now`), so the extender and the simulator run the same code. Two parts:
`plan_gang` chooses worker places for a whole gang from the node views (a node takes as many workers as its
window has GPUs for: GPUs are counted, not nodes), and `GangReservations` keeps the places reserved while the
workers arrive one by one (claims, bindings, a timeout), and says how many GPUs each node holds back for gangs
so other pods do not take them. Not thread-safe: the extender guards it with its own lock.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from offpeak_core.decisions import DEFAULT_MARGIN, filter_nodes, prioritize_nodes
from offpeak_core.model import NodeView, PodRequest
from offpeak_core.nodearrays import withhold  # noqa: F401 - part of this module's API (the gang view of a node)

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
    fit. `failed` carries a reason for every node that got no place."""

    places: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""  # why the gang does not fit ('' when it does)

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
) -> GangPlan:
    """Choose places for `workers` copies of `pod` (the gang's remaining workers), or say why they do not fit.

    Nodes are taken in the order the shared prioritize scores a single worker (fastest GPU type, tightest fitting
    window, fullest node), then by how many workers they take (fewer nodes, less network between workers), then
    by name; each takes as many workers as its window has GPUs for.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    capacity, failed = worker_capacity(pod=pod, workers=workers, nodes=nodes, now=now, margin=margin,
                                       checkpoint_intervals=checkpoint_intervals)
    room = sum(capacity.values())
    if room < workers:
        reason = (f"gang of {workers} worker(s) x {pod.gpus} GPU(s) needs {workers} place(s) in fitting windows; "
                  f"{room} found on {len(capacity)} node(s)")
        return GangPlan((), {**failed, **dict.fromkeys(capacity, reason)}, reason)
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
    return GangPlan(tuple(places), {**failed, **unused})


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

    @property
    def size(self) -> int:
        return sum(self.places.values())

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

    def reserve(self, key: GangKey, *, places: Sequence[str], gpus: int, now: float) -> Reservation:
        """Hold `places` (one node name per worker, best first) for `key`, replacing any earlier reservation."""
        if not places:
            raise ValueError("a reservation needs at least one place")
        order = tuple(dict.fromkeys(places))
        res = Reservation(key=key, gpus=gpus, places=Counter(places), created=now, order=order)
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
        bound = {pod: node for pod, node in members.items() if node is not None}
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
