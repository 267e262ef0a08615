"""Pod-placed online demand: online pods placed on their pool's nodes the way the default kube-scheduler would.

For a trace that gives a pool's online GPU count per minute (a Helios VC, Philly's busy nodes), the per-node
demand is not fixed: online pods are ordinary pods, and the default scheduler puts a new one on any node of its
pool with room. Pure logic, no I/O; the engine asks it where a new pod goes and, when no node has room, runs the
evictor's `plan_for_pending` itself.

Rules (each deterministic per seed):

- A rise of k pods in a pool's count starts k pods of `pod_gpus` GPUs, one after the other. Each goes to a pool
  node with at least `pod_gpus` GPUs unallocated (online and offline pods both allocate), the one with the most
  (kube-scheduler's default LeastAllocated scoring on equal nodes spreads pods); ties are broken uniformly at random,
  as the scheduler's `selectHost` does among equal top scores. Nothing here knows where offline pods are beyond
  the GPUs they allocate.
- A fall of k pods ends k of the pool's online pods chosen uniformly at random (a multivariate hypergeometric draw
  over the pool's nodes): which online pods finish is not up to offpeak.
- Each pool has its own random stream, so the pools do not perturb each other's draws.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class OnlinePools:
    """What the trace gives: per pool, its nodes, its online pod count per minute, and a pod's GPUs."""

    nodes: tuple[np.ndarray, ...]  # node indices of each pool (pools are disjoint)
    pods: np.ndarray  # int [pools, minutes]: online pods the pool runs in each minute
    pod_gpus: np.ndarray  # int [pools]

    def __post_init__(self) -> None:
        if self.pods.shape[0] != len(self.nodes) or self.pod_gpus.shape != (len(self.nodes),):
            raise ValueError("one row of pod counts and one pod size per pool")


@dataclass
class OnlinePlacement:
    """Where each pool's online pods are now (pods per node) and the pools' random streams."""

    pools: OnlinePools
    capacity: np.ndarray  # int [nodes]: GPUs per node
    pods_on: np.ndarray  # int [nodes]: online pods on each node
    rngs: list[np.random.Generator]
    minute: int = -1  # the last minute placed
    pool_of: np.ndarray = field(init=False)
    gpus_per_pod: np.ndarray = field(init=False)  # int [nodes]: pod size of the node's pool (0: no pool)

    def __post_init__(self) -> None:
        self.pool_of = np.full(self.capacity.size, -1, dtype=np.int64)
        self.gpus_per_pod = np.zeros(self.capacity.size, dtype=np.int64)
        for p, nodes in enumerate(self.pools.nodes):
            self.pool_of[nodes] = p
            self.gpus_per_pod[nodes] = self.pools.pod_gpus[p]

    @classmethod
    def empty(cls, pools: OnlinePools, capacity: np.ndarray, *, seed: int) -> OnlinePlacement:
        """No online pods yet; pool p's stream is seeded by (seed, p)."""
        rngs = [np.random.default_rng([seed, p]) for p in range(len(pools.nodes))]
        return cls(pools, capacity.astype(np.int64), np.zeros(capacity.size, dtype=np.int64), rngs)

    def clone(self) -> OnlinePlacement:
        """An independent copy (pods and random streams), for a policy to carry on from."""
        return copy.deepcopy(self)

    @property
    def online_gpus(self) -> np.ndarray:
        """int [nodes]: GPUs online pods hold on each node."""
        return self.pods_on * self.gpus_per_pod

    def count(self, pool: int) -> int:
        return int(self.pods_on[self.pools.nodes[pool]].sum())

    def end(self, pool: int, k: int) -> None:
        """End k of the pool's online pods, uniformly at random."""
        nodes = self.pools.nodes[pool]
        gone = self.rngs[pool].multivariate_hypergeometric(self.pods_on[nodes], k)
        self.pods_on[nodes] -= gone

    def pick(self, pool: int, unallocated: np.ndarray) -> int | None:
        """The node a new pod of the pool goes to (most unallocated GPUs, random among ties), or None: no room."""
        nodes = self.pools.nodes[pool]
        room = unallocated[nodes]
        g = int(self.pools.pod_gpus[pool])
        best = int(room.max()) if room.size else -1
        if best < g:
            return None
        ties = nodes[room == best]
        return int(ties[0]) if ties.size == 1 else int(ties[self.rngs[pool].integers(ties.size)])

    def put(self, node: int) -> None:
        self.pods_on[node] += 1


def place_without_offline(state: OnlinePlacement, minute: int) -> None:
    """Bring `state` to `minute` when no offline pods hold GPUs: ends first, then every new pod (pools in order)."""
    want = state.pools.pods[:, minute]
    for p in range(want.size):
        have = state.count(p)
        if want[p] < have:
            state.end(p, have - int(want[p]))
    for p in range(want.size):
        for _ in range(int(want[p]) - state.count(p)):
            node = state.pick(p, state.capacity - state.online_gpus)
            if node is None:
                raise ValueError(f"pool {p} wants more online pods than its nodes hold (minute {minute})")
            state.put(node)
    state.minute = minute


def reference_demand(
    pools: OnlinePools, capacity: np.ndarray, *, seed: int, minutes: int, start_minute: int
) -> tuple[np.ndarray, OnlinePlacement]:
    """Per-node online demand [nodes, minutes] from the placement with no offline pods, and the placement as it
    stands after minute `start_minute - 1` (where every policy's own placement starts from).

    Before `start_minute` this is the history the forecaster learns from; after it, the demand the cluster would
    see with no offline work (its per-minute sum over nodes is what every policy's placement gives too)."""
    state = OnlinePlacement.empty(pools, capacity, seed=seed)
    demand = np.zeros((capacity.size, minutes), dtype=np.int16)
    at_start = state.clone()
    for m in range(minutes):
        if m == start_minute:
            at_start = state.clone()
        place_without_offline(state, m)
        demand[:, m] = state.online_gpus
    if start_minute >= minutes:
        at_start = state.clone()
    return demand, at_start
