"""The extender's in-memory picture of the cluster: nodes, GPU pods, demand history and forecasts.

Fed by the informer (watch events, as Kubernetes JSON dicts, parsed by `objects`) and the history refresher; read by
the request path. `ClusterStore` holds one lock over four parts with one job each: the informer's index (`index`),
pools and announcements (`poolstate`), the forecast state (`forecasts`) and the view cache (`viewcache`). Every
method takes the lock briefly and never computes under it: the request path reads prepared `NodeView`s (rebuilt in
the background each refresh, and lazily for the few nodes whose pods changed since); a view is built outside the
lock from a snapshot of its inputs (`views.build_view`, the core's rule the simulator runs too), so the request
path never waits on I/O or on another thread's numpy. The views of a node-name list are also kept as columns
(`node_arrays`), for the few lists kube-scheduler sends over and over: a change to a few nodes rewrites only their
rows, any other change drops them.

Why over ~500 lines: this is the one facade every caller goes through for the one lock; each method only takes the
lock and hands the work to a part (or builds views outside it), so splitting it further would split the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from offpeak_core.announcements import Announcement, object_name
from offpeak_core.forecast import ForecastSettings
from offpeak_core.gangs import GangKey
from offpeak_core.goodput import DEFAULT_STARTUP_SECONDS
from offpeak_core.livepace import LiveProgress
from offpeak_core.model import NodeView, OfflinePod
from offpeak_core.nodearrays import NodeArrays
from offpeak_core.windows import profile_window
from offpeak_extender.forecasts import ForecastState, fit_history
from offpeak_extender.index import ClusterIndex
from offpeak_extender.objects import NodeInfo, PodInfo, announcement_or_none, node_info, node_name, pod_info
from offpeak_extender.pools import PooledViews, PoolFit, PoolSettings, fit_pools, pooled_profile
from offpeak_extender.poolstate import PoolState
from offpeak_extender.viewcache import CachedArrays, ViewCache, rows_to_patch
from offpeak_extender.views import ViewInputs, build_view, own_room, series_is_current
from offpeak_extender.wire import list_key

__all__ = ["KEPT_PATCH_NODES", "ClusterStore", "NodeInfo", "PodInfo", "node_info", "pod_info", "series_is_current"]

log = logging.getLogger(__name__)

KEPT_PATCH_NODES = 8  # `kept_arrays` patches the rows of up to this many changed nodes (a pod event changes one)


class ClusterStore:
    """Thread-safe cluster state plus per-node forecasts, turned into `NodeView`s for the decisions."""

    def __init__(
        self,
        *,
        settings: ForecastSettings,
        clock: Callable[[], float] = time.time,
        stale_after_seconds: float = 300.0,
        pools: PoolSettings | None = None,
    ) -> None:
        self.settings = settings
        self.pools = pools  # pool windows (`offpeak_extender.pools`): off when None
        self.clock = clock
        self.stale_after_seconds = stale_after_seconds
        self._lock = threading.Lock()
        self.index = ClusterIndex()
        self.pool_state = PoolState(pools)
        self.forecasts = ForecastState(settings, stale_after_seconds=stale_after_seconds)
        self.cache = ViewCache()
        self._pooled_views = PooledViews()
        # Set when a pool's nodes or GPUs change (its fit is dropped, its nodes fall back to their own windows): the
        # refresher then refits soon instead of at its next period (`Refresher.run`); cleared by each refresh.
        self.pools_changed = threading.Event()
        self.synced = False
        self._nodes_synced = False
        self._pods_synced = False

    # -- informer side -------------------------------------------------------------------------------------------
    def replace_all(
        self, *, nodes: Iterable[Mapping[str, Any]] | None = None, pods: Iterable[Mapping[str, Any]] | None = None
    ) -> None:
        """Reset nodes and/or pods from a full list (informer (re)list)."""
        infos = None if nodes is None else {n.name: n for n in map(node_info, nodes) if n.name}
        pinfos = None if pods is None else {p.uid: p for p in map(pod_info, pods)}
        with self._lock:
            changed: set[str] = set()
            if infos is not None:
                changed = {n for n, i in infos.items() if self.index.nodes.get(n) != i}
                self.index.nodes = infos
                self._nodes_synced = True
                self.cache.retain(infos)
                changed |= self._reindex_pools_locked()
            if pinfos is not None:
                self.index.set_pods(pinfos)
                self._pods_synced = True
            moved = self.index.recount(changed)
            self.pool_state.recount(self.index)
            for n in self.pool_state.mates(moved) - moved:  # a pooled node's view depends on its pool's usage
                self.index.bump(n)
            self.cache.drop(*self.pool_state.mates(moved))
            self.synced = self._nodes_synced and self._pods_synced
            self.cache.changed()
        self.views(self.node_names())  # rebuild invalidated views here, in the informer's thread, not per request

    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        info = node_info(obj)
        with self._lock:
            if self.index.nodes.get(info.name) == info:
                return  # status heartbeats and unrelated changes: nothing the decisions read
            self.index.nodes[info.name] = info
            touched = {info.name} | self._reindex_pools_locked()
            for name in touched:
                self._bump_locked(name)
            self.cache.changed(tuple(touched))

    def delete_node(self, obj: Mapping[str, Any]) -> None:
        name = node_name(obj)
        with self._lock:
            self.index.nodes.pop(name, None)
            self.cache.forget(name)
            touched = self._reindex_pools_locked()
            for mate in touched - {name}:
                self._bump_locked(mate)
            self.cache.changed((name, *touched))

    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        info = pod_info(obj)
        with self._lock:
            old = self.index.pods.get(info.uid)
            if old == info:
                return  # status heartbeats and unrelated changes: nothing the store reads
            self.index.pods[info.uid] = info
            touched = self._account_locked(old, -1) | self._account_locked(info, +1)
            self.index.index_gang(old, -1)
            self.index.index_gang(info, +1)
            touched = self._usage_changed_locked(touched)
        self.views(sorted(touched))  # rebuilt here, in the informer's thread, not by the next request

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        uid = pod_info(obj).uid
        with self._lock:
            old = self.index.pods.pop(uid, None)
            touched = self._account_locked(old, -1)
            self.index.index_gang(old, -1)
            touched = self._usage_changed_locked(touched)
        self.views(sorted(touched))

    def _account_locked(self, pod: PodInfo | None, sign: int) -> set[str]:
        """Count (+1) or uncount (-1) a pod's GPUs on its node and in its pool; the node whose usage changed."""
        node = self.index.account(pod, sign)
        if node is None or pod is None:
            return set()
        self.pool_state.account(node, pod.workload, sign * pod.gpus)
        return {node}

    def _usage_changed_locked(self, nodes: set[str]) -> set[str]:
        """Views are built from node usage (and a pooled node's from its pool's): drop the views (and cached
        columns) of the nodes whose usage changed and of their pool mates, and nothing when none did (a pod that
        holds no GPUs); the nodes whose views were dropped."""
        mates = self.pool_state.mates(nodes) - nodes
        for node in mates:
            self.index.bump(node)  # so a view built from their old inputs is not kept
        nodes = nodes | mates
        self.cache.drop(*nodes)
        if nodes:
            self.cache.changed(tuple(nodes))
        return nodes

    def _bump_locked(self, node: str) -> None:
        self.index.bump(node)
        self.cache.drop(node)

    def _reindex_pools_locked(self) -> set[str]:
        """`PoolState.reindex`, asking the refresher for an early refit when a pool changed."""
        changed = self.pool_state.reindex(self.index)
        if changed:
            self.pools_changed.set()
        return changed

    def replace_announcements(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Reset the announced online demand from a full list of OnlineDemand objects (informer (re)list)."""
        usable = {a.name: a for a in map(announcement_or_none, objs) if a is not None}
        with self._lock:
            self.pool_state.announcements = usable
            self._reannounce_locked()

    def upsert_announcement(self, obj: Mapping[str, Any]) -> None:
        a = announcement_or_none(obj)
        if a is not None and a.pool_gpus_at_most is not None:
            namespace = a.name.partition("/")[0]
            if self.pools is None or namespace not in self.pools.ceiling_namespaces:
                log.warning("OnlineDemand %s: spec.poolGpusAtMost ignored: namespace %r may not state a pool's "
                            "ceiling (--pool-ceiling-namespaces); it counts as a floor only", a.name, namespace)
                a = replace(a, pool_gpus_at_most=None)
        with self._lock:
            if a is None:  # unusable now: whatever it said before no longer stands
                self.pool_state.announcements.pop(object_name(obj), None)
            else:
                self.pool_state.announcements[a.name] = a
            self._reannounce_locked()

    def delete_announcement(self, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self.pool_state.announcements.pop(object_name(obj), None)
            self._reannounce_locked()

    def announced(self, pool: str) -> tuple[Announcement, ...]:
        """The announcements of `pool` not over when they last changed (earliest start first)."""
        with self._lock:
            return self.pool_state.announced.get(pool, ())

    def _reannounce_locked(self) -> None:
        """Regroup the announcements by pool; the views of the nodes of every pool whose announcements changed go."""
        nodes = self.pool_state.reannounce(self.clock())
        for n in nodes:
            self._bump_locked(n)
        if nodes:
            self.cache.changed(nodes)

    # -- gangs ---------------------------------------------------------------------------------------------------
    def gang_members(self, key: GangKey) -> dict[str, str | None]:
        """The gang's live pods: pod uid -> the node it is bound to (None while pending)."""
        with self._lock:
            return dict(self.index.gangs.get(key, {}))

    def gang_worker_indexes(self, key: GangKey) -> dict[str, int | None]:
        """The gang's live pods: pod uid -> its worker index (None: its pod carries none)."""
        with self._lock:
            return {uid: pod.gang_worker if (pod := self.index.pods.get(uid)) is not None else None
                    for uid in self.index.gangs.get(key, {})}

    def gang_started(self, key: GangKey) -> tuple[float, str] | None:
        """When the gang's first running worker started (its worker 0: it hosts the rendezvous, so it runs first)
        and the GPU type of its node; None while no worker of it has started on a known node."""
        with self._lock:
            started = self.index.gang_starts(key)
            if not started:
                return None
            at, node = min(started)
            info = self.index.nodes.get(node)
            return (at, info.gpu_type) if info is not None else None

    def gang_live(self, key: GangKey) -> LiveProgress | None:
        """The newest live progress any bound worker of the gang carries (None: none has one yet)."""
        with self._lock:
            lives = [pod.live for uid, node in self.index.gangs.get(key, {}).items()
                     if node is not None and (pod := self.index.pods.get(uid)) is not None and pod.live is not None]
            return max(lives, key=lambda lp: lp.at, default=None)

    # -- history / forecasts -------------------------------------------------------------------------------------
    def record_local_sample(self, now: float | None = None) -> None:
        """Append each node's current online GPU requests to the in-memory history (used without Prometheus)."""
        t = self.clock() if now is None else now
        with self._lock:
            self.forecasts.record(((n, self.index.usage_of(n).online) for n in self.index.nodes), t)

    def online_snapshot(self) -> dict[str, tuple[int, int, int]]:
        """(GPUs, online GPUs requested, online GPUs its windows are judged by) per node now, for the goodput window
        ledger. The last two are the same but for a node with pool windows: its window of L GPUs ends when its pool
        has fewer than L GPUs free of online pods (an offline pod of L GPUs there would be evicted then), whatever
        lands on the node itself, so it is judged by its GPUs less its pool's free ones."""
        with self._lock:
            out = {}
            for name, info in self.index.nodes.items():
                online = self.index.usage_of(name).online
                out[name] = (info.gpus_total, online, self.pool_state.judged_online(name, info.gpus_total, online))
            return out

    def local_history(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self._lock:
            snap = self.forecasts.samples()
        return {n: (np.array([a for a, _ in s]), np.array([b for _, b in s])) for n, s in snap.items() if s}

    def set_history(self, history: Mapping[str, tuple[np.ndarray, np.ndarray]], *, now: float | None = None) -> None:
        """Fit the seasonal model per node and build every view (outside the lock), then publish both at once."""
        t = self.clock() if now is None else now
        fitted = fit_history(history, now=t, settings=self.settings, max_age_seconds=self.series_max_age_seconds)
        fits: dict[str, PoolFit] = {}
        pools: dict[str, tuple[str, ...]] = {}
        if self.pools is not None:
            with self._lock:
                pools = dict(self.pool_state.nodes)
                capacity = {n: info.gpus_total for n, info in self.index.nodes.items()}
            fits = fit_pools(history, pools, capacity, now=t, settings=self.settings,
                             look_back_seconds=self.pools.look_back_seconds,
                             is_current=lambda times, online: series_is_current(
                                 times=times, online=online, now=t, max_age_seconds=self.series_max_age_seconds))
        # Build every node's new view before publishing, so requests meanwhile keep using the old ones instead of
        # finding the cache empty and rebuilding views themselves.
        with self._lock:
            self._reannounce_locked()  # announcements over since they last changed go
            version = self.forecasts.version + 1
            fits = self.pool_state.still_current(fits, pools, self.index)
            inputs = [ViewInputs(info=info, online=u.online, offline=u.offline + u.other, used=u.used,
                                 fitted=fitted.forecasts.get(name), stale=False, key=(u.version, version),
                                 pool=self.pool_state.inputs(name, fits), recent=fitted.recent.get(name))
                      for name, info in self.index.nodes.items() for u in (self.index.usage_of(name),)]
        views = [(inp, self._build(inp, t)) for inp in inputs]
        with self._lock:
            self.forecasts.publish(fitted, t)  # its version == version unless a failed refresh bumped it meanwhile
            self.pool_state.fits = self.pool_state.still_current(fits, pools, self.index)  # (a node may have changed)
            stale = self.forecasts.stale(self.clock())
            self.cache.reset({} if stale else {
                inp.info.name: view for inp, view in views
                if inp.info.name in self.index.nodes
                and inp.key == (self.index.usage_of(inp.info.name).version, self.forecasts.version)}, stale=stale)

    @property
    def series_max_age_seconds(self) -> float:
        """A node whose newest demand sample is older than this has stopped reporting (range queries return a
        point per step, so a live series' newest point is at most one step old)."""
        return self.stale_after_seconds + self.settings.step_seconds

    def mark_history_failed(self, error: str) -> None:
        with self._lock:
            self.forecasts.failed(error)
            self.cache.ready.clear()
            self.cache.changed()

    def data_stale(self, now: float | None = None) -> bool:
        """True when forecasts are missing, failed to refresh, or older than `stale_after_seconds`."""
        t = self.clock() if now is None else now
        with self._lock:
            return self.forecasts.stale(t)

    # -- views for the decisions ---------------------------------------------------------------------------------
    def _inputs_locked(self, name: str, now: float) -> ViewInputs | None:
        """What one node's view is built from, copied under the lock (cheap: references and a few ints)."""
        info = self.index.nodes.get(name)
        if info is None:
            return None
        usage = self.index.usage_of(name)
        return ViewInputs(info=info, online=usage.online, offline=usage.offline + usage.other, used=usage.used,
                          fitted=self.forecasts.fitted.forecasts.get(name), stale=self.forecasts.stale(now),
                          key=(usage.version, self.forecasts.version), pool=self.pool_state.inputs(name),
                          recent=self.forecasts.fitted.recent.get(name))

    def _publish(self, name: str, inp: ViewInputs, view: NodeView) -> None:
        """Keep a view built outside the lock, unless newer inputs arrived (or the node went) meanwhile."""
        with self._lock:
            if (name in self.index.nodes and inp.key == (self.index.usage_of(name).version, self.forecasts.version)
                    and inp.stale == self.cache.stale):
                self.cache.ready[name] = view
                self.cache.changed((name,))

    def rebuild_views(self, names: Sequence[str] | None = None, *, now: float | None = None) -> None:
        t = self.clock() if now is None else now
        with self._lock:
            self._check_staleness_locked(t)
            inputs = {n: self._inputs_locked(n, t) for n in (list(self.index.nodes) if names is None else names)}
        for name, inp in inputs.items():
            if inp is not None:
                self._publish(name, inp, self._build(inp, t))

    def _build(self, inp: ViewInputs, now: float) -> NodeView:
        """`build_view` with the store's settings (outside the lock)."""
        return build_view(inp, now=now, settings=self.settings, keep_ahead_seconds=self.stale_after_seconds,
                          pooled=self._pooled_views)

    def _check_staleness_locked(self, now: float) -> bool:
        """Drop the ready views when forecasts went stale (or fresh) since they were built; return staleness."""
        stale = self.forecasts.stale(now)
        if stale != self.cache.stale:
            self.cache.reset({}, stale=stale)
        return stale

    def views(self, names: Sequence[str], *, now: float | None = None) -> tuple[list[NodeView], list[str]]:
        """NodeViews for `names` (rebuilt only where pods changed since), and the names the store does not know.

        Hot path: one dict lookup per name under the lock; views to rebuild are built outside it.
        """
        t = self.clock() if now is None else now
        unknown: list[str] = []
        rebuild: list[tuple[int, str, ViewInputs]] = []
        with self._lock:
            self._check_staleness_locked(t)
            ready = self.cache.ready.get
            out: list[NodeView | None] = [ready(n) for n in names]
            missing = [] if all(out) else [i for i, v in enumerate(out) if v is None]  # all(): a view is truthy
            for i in missing:
                name = names[i]
                inp = self._inputs_locked(name, t)
                if inp is None:
                    unknown.append(name)
                else:
                    rebuild.append((i, name, inp))
        if not unknown and not rebuild:
            return out, unknown  # type: ignore[return-value]  # every entry is a view
        for i, name, inp in rebuild:  # outside the lock
            view = self._build(inp, t)
            self._publish(name, inp, view)
            out[i] = view
        return [v for v in out if v is not None], unknown

    def pooled_among(self, names: Iterable[str]) -> bool:
        """Whether any of `names` is in a pool with a fit (its windows come from its pool's)."""
        with self._lock:
            return self.pool_state.pooled(names)

    def view_with_held(self, name: str, held: Mapping[str, int], *, now: float | None = None) -> NodeView | None:
        """Node `name`'s view were `held` GPUs (per node) more held by offline pods: a pooled node's room shrinks by
        those on the other nodes of its pool (a gang's members judged together, `gangplans.plan_gang`'s `revise`);
        another node's view is as it is. None: the node is not known."""
        t = self.clock() if now is None else now
        with self._lock:
            inp = self._inputs_locked(name, t)
            extra = self.pool_state.held_elsewhere(name, held)
        if inp is None:
            return None
        if inp.pool is not None and extra:
            inp = replace(inp, pool=replace(inp.pool, held=inp.pool.held + extra))
        return self._build(inp, t)

    def node_arrays(self, names: Sequence[str], *, now: float | None = None,
                    key: str | tuple[str, ...] | None = None) -> tuple[NodeArrays, list[str]]:
        """`views` as columns for the decisions' array path, and the names the store does not know.

        Hot path: the columns of a name list are kept until the store next changes (`ViewCache.changed`), so a list
        sent again (kube-scheduler sends the same ones over and over) costs a lookup instead of a pass over its
        names; after a change to a few nodes (a pod started or stopped) only their rows are rewritten (`_patched`).
        Otherwise rows are rewritten only for views rebuilt since. `key`: the names' `list_key`, when the caller
        has it already (the wire makes it while checking a request's names).
        """
        t = self.clock() if now is None else now
        if key is None:
            key = list_key(names)
        hash(key)  # outside the lock (a string keeps its hash)
        with self._lock:
            self._check_staleness_locked(t)
            generation = self.cache.generation
            hit = self.cache.arrays.get(key)
            changed = None if hit is None else self.cache.changed_since(hit.generation)
        if hit is not None and changed is not None:
            patched = self._patched(key, names, hit, changed, generation, t)
            if patched is not None:
                return patched, list(hit.unknown)
        views, unknown = self.views(names, now=t)
        with self._lock:
            arrays = self.cache.rows.gather(views)
            if self.cache.generation == generation:  # nothing changed meanwhile: no view was rebuilt or went stale
                self.cache.remember(key, CachedArrays(arrays, tuple(unknown), generation))
        return arrays, unknown

    def kept_arrays(self, key: str | tuple[str, ...], names: Sequence[str]) -> NodeArrays | None:
        """`node_arrays(names)` when it costs no more than a lookup and a few rows: the columns kept for the list
        (`key`, every name known), patched where up to `KEPT_PATCH_NODES` nodes changed since, each of whose views
        is built already. All of it in one hold of the lock, tried and never waited for; None when the lock is held
        (a view or refit being published), nothing is kept for `key`, it names a node the store does not know, more
        changed, or a changed view must be rebuilt: then `node_arrays`, on a worker thread, does what is needed."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            self._check_staleness_locked(self.clock())
            hit = self.cache.arrays.get(key)
            if hit is None or hit.unknown:
                return None
            changed = self.cache.changed_since(hit.generation)
            ready = self.cache.ready
            if changed is None or len(changed) > KEPT_PATCH_NODES or not all(n in ready for n in changed):
                return None
            if hit.generation == self.cache.generation:
                return hit.arrays
            positions, at = rows_to_patch(hit, names, changed)
            if at and not hit.arrays.distinct:
                return None
            return self.cache.patch(key, hit, positions, at, [ready[names[i]] for i in at], self.cache.generation)
        finally:
            self._lock.release()

    def _patched(self, key: str | tuple[str, ...], names: Sequence[str], hit: CachedArrays, changed: set[str],
                 generation: int, now: float) -> NodeArrays | None:
        """`hit`'s columns as of `generation`, given that only the views of `changed` changed since they were
        gathered: the same columns when none of those nodes is listed, else a copy with their rows rewritten. None
        when the list must be gathered afresh: it names a node the store does not know (then or now) or one node
        twice, or a change to anything came meanwhile."""
        if not changed:
            return hit.arrays
        positions, at = rows_to_patch(hit, names, changed)
        if at and (hit.unknown or not hit.arrays.distinct):
            return None
        views: list[NodeView] = []
        if at:
            views, unknown = self.views([names[i] for i in at], now=now)
            if unknown:
                return None
        with self._lock:
            if at and self.cache.changed_since(generation) is None:  # a refit or staleness flip meanwhile
                return None
            return self.cache.patch(key, hit, positions, at, views, generation)

    def nodes_labelled(self, labels: Mapping[str, str]) -> frozenset[str]:
        """The nodes that carry every one of `labels` (a Kueue ResourceFlavor's node labels)."""
        with self._lock:
            return frozenset(n for n, info in self.index.nodes.items()
                             if all(info.labels.get(k) == v for k, v in labels.items()))

    # -- eviction controller side --------------------------------------------------------------------------------
    def node_names(self) -> list[str]:
        with self._lock:
            return list(self.index.nodes)

    def pods_on(self, node: str) -> list[PodInfo]:
        with self._lock:
            return self.index.pods_on(node)

    def pending_pods(self, workload: str) -> list[PodInfo]:
        with self._lock:
            return self.index.pending(workload)

    def node(self, name: str) -> NodeInfo | None:
        with self._lock:
            return self.index.nodes.get(name)

    def usage(self, name: str) -> tuple[int, int, int]:
        """GPUs requested on `name` by (online, offline, other) pods."""
        with self._lock:
            u = self.index.usage_of(name)
            return u.online, u.offline, u.other

    def free_gpus(self, name: str) -> int:
        with self._lock:
            return self.index.free_gpus(name)

    def offline_pods_on(self, node: str, *, now: float, startup_seconds: float = DEFAULT_STARTUP_SECONDS
                        ) -> list[OfflinePod]:
        """The offline pods running on `node` as eviction sees them; a gang worker carries its gang's GPUs, since
        evicting it stops every worker (an elastic gang's too: those left restart from the last checkpoint). A
        checkpointing pod that says how often it checkpoints puts at risk only its work since its last checkpoint
        (`yielding.since_checkpoint`: at start + `startup_seconds` + k x its interval)."""
        with self._lock:
            return self.index.offline_pods(node, now=now, startup_seconds=startup_seconds)

    def held_window_end(self, node: str, *, held: int | None = None, now: float | None = None) -> float | None:
        """When online demand on `node` is forecast to leave fewer than `held` GPUs (default: all its offline and
        other pods hold now): the end of the window those GPUs run in. A pooled node's pods keep their GPUs while
        its pool has room for them (the pool's forecast, announced online demand included, less what offline pods
        hold on its other nodes), as its windows are judged. None: not within the forecast, no forecast at all, or
        nothing held."""
        return self.held_window(node, held=held, now=now)[0]

    def held_window(self, node: str, *, held: int | None = None, now: float | None = None
                    ) -> tuple[float | None, bool]:
        """`held_window_end`, and whether that end is known rather than forecast (announced demand in the node's
        pool, or its declared busy hours, take the GPUs then)."""
        t = self.clock() if now is None else now
        with self._lock:
            inp = self._inputs_locked(node, t)
        if inp is None:
            return None, False
        held = inp.offline if held is None else held
        info = inp.info
        if inp.pool is not None and not inp.stale:  # a pooled node's pods hold GPUs while its pool has room for them
            pooled = pooled_profile(inp.pool.fit, pool_online_now=float(inp.pool.online),
                                    pool_held=inp.pool.held - inp.offline, node_free=info.gpus_total - inp.online,
                                    now=t, settings=self.settings, schedule=info.schedule,
                                    announced=inp.pool.announced)
            return profile_window(pooled, held=held, now=t)
        room = own_room(inp, now=t, settings=self.settings)  # the GPUs offline pods may hold, theirs included
        if room is None:
            return None, False
        return profile_window(room, held=held, now=t)
