"""Pools and announcements in the store: which pool each node is in, each pool's usage and fit, and what its online
owners announced (`offpeak_extender.pools`, `offpeak_core.announcements`).

A pooled node's view depends on its pool's usage and announcements, so a change on one node of a pool is a change
to all its nodes (`mates`). Not thread-safe: the store holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from offpeak_core.announcements import Announcement, by_pool
from offpeak_core.poolrise import pool_judged_online
from offpeak_extender.index import ClusterIndex
from offpeak_extender.pools import PoolFit, PoolSettings, pools_of
from offpeak_extender.views import PoolInputs


class PoolState:
    """Each pooled node's pool, each pool's nodes, its online and held (offline and other) GPUs now and its fit of
    the last refresh; every usable OnlineDemand object by namespace/name, and those not yet over by pool."""

    def __init__(self, settings: PoolSettings | None) -> None:
        self.settings = settings  # pool windows: off when None
        self.pool_of: dict[str, str] = {}
        self.nodes: dict[str, tuple[str, ...]] = {}
        self.usage: dict[str, list[int]] = {}  # pool -> [online, held]
        self.fits: dict[str, PoolFit] = {}
        self.announcements: dict[str, Announcement] = {}
        self.announced: dict[str, tuple[Announcement, ...]] = {}

    def mates(self, nodes: Iterable[str]) -> set[str]:
        """`nodes` and every node of their pools."""
        out = set(nodes)
        for pool in {self.pool_of[n] for n in out if n in self.pool_of}:
            out.update(self.nodes[pool])
        return out

    def account(self, node: str, workload: str, gpus: int) -> None:
        """A pod of `workload` on `node` took `gpus` (< 0: let them go): its pool's usage follows."""
        pool = self.usage.get(self.pool_of.get(node, ""))
        if pool is not None:
            pool[0 if workload == "online" else 1] += gpus

    def reindex(self, index: ClusterIndex) -> set[str]:
        """Index the nodes by their pool label and recount each pool's usage; the nodes of every pool whose nodes
        or GPUs changed (their views must go; the pool's fit goes until the next refresh, its nodes keep their own
        windows till then)."""
        if self.settings is None:
            return set()
        new = pools_of({n: info.labels for n, info in index.nodes.items()}, self.settings.label)
        changed: set[str] = set()
        for pool in set(self.nodes) | set(new):
            before, after = self.nodes.get(pool, ()), new.get(pool, ())
            fit = self.fits.get(pool)
            if before != after or (fit is not None and fit.capacity != gpus_of(index, after)):
                changed.update(before, after)
                self.fits.pop(pool, None)
        self.nodes = new
        self.pool_of = {n: pool for pool, nodes in new.items() for n in nodes}
        self.recount(index)
        return changed

    def recount(self, index: ClusterIndex) -> None:
        """Each pool's online and held GPUs, summed from its nodes' usage."""
        self.usage = {}
        for pool, nodes in self.nodes.items():
            used = [index.usage_of(n) for n in nodes]
            self.usage[pool] = [sum(u.online for u in used), sum(u.offline + u.other for u in used)]

    def reannounce(self, now: float) -> tuple[str, ...]:
        """Regroup the announcements by pool; the nodes of every pool whose announcements changed."""
        new = by_pool(self.announcements.values(), now=now)
        changed = {p for p in set(new) | set(self.announced) if new.get(p, ()) != self.announced.get(p, ())}
        self.announced = new
        return tuple(n for p in changed for n in self.nodes.get(p, ()))

    def still_current(self, fits: Mapping[str, PoolFit], pools: Mapping[str, tuple[str, ...]], index: ClusterIndex
                      ) -> dict[str, PoolFit]:
        """The fits of pools whose nodes and GPUs are still those they were fitted on (`pools`): a pool that
        changed meanwhile is fitted again at the next refresh, and its nodes keep their own windows till then."""
        return {p: f for p, f in fits.items()
                if self.nodes.get(p) == pools[p] and f.capacity == gpus_of(index, pools[p])}

    def inputs(self, name: str, fits: Mapping[str, PoolFit] | None = None) -> PoolInputs | None:
        """What a pooled node's view takes from its pool: the pool's fit (of `fits`, default the current ones) and
        its usage now (None: the node is in no pool, or its pool has no fit; its own windows then)."""
        pool = self.pool_of.get(name)
        fit = (self.fits if fits is None else fits).get(pool) if pool is not None else None
        if fit is None or pool is None:
            return None
        online, held = self.usage.get(pool, (0, 0))
        return PoolInputs(fit=fit, online=online, held=held, announced=self.announced.get(pool, ()))

    def judged_online(self, name: str, gpus_total: int, online: int) -> int:
        """Online GPUs a node's windows are judged by: its own, or a pooled node's GPUs less its pool's free ones
        (`poolrise.pool_judged_online`)."""
        pool = self.pool_of.get(name)
        fit = self.fits.get(pool) if pool is not None else None
        if fit is None or pool is None:
            return online
        room = fit.capacity - self.usage.get(pool, [0, 0])[0]
        return int(pool_judged_online(gpus_total, room))

    def held_elsewhere(self, name: str, held: Mapping[str, int]) -> int:
        """Of `held` (GPUs per node), those on the other nodes of `name`'s pool."""
        pool = self.pool_of.get(name)
        return 0 if pool is None else sum(g for n, g in held.items() if n != name and self.pool_of.get(n) == pool)

    def pooled(self, names: Iterable[str]) -> bool:
        """Whether any of `names` is in a pool with a fit (its windows come from its pool's)."""
        return any((pool := self.pool_of.get(n)) is not None and pool in self.fits for n in names)


def gpus_of(index: ClusterIndex, nodes: Iterable[str]) -> int:
    return sum(info.gpus_total for n in nodes if (info := index.nodes.get(n)) is not None)
