"""The extender's in-memory picture of the cluster: nodes, GPU pods, demand history and forecasts.

Fed by the informer (watch events, as Kubernetes JSON dicts) and the history refresher; read by the request path.
Every method takes the one lock briefly and never computes under it: the request path reads prepared `NodeView`s
(rebuilt in the background each refresh, and lazily for the few nodes whose pods changed since); a view is built
outside the lock from a snapshot of its inputs by the core's `forecast_now` (the same function the simulator
runs), so the request path never waits on I/O or on another thread's numpy. The views of a node-name list are
also kept as columns (`node_arrays`), for the few lists kube-scheduler sends over and over: a change to a few nodes
rewrites only their rows, any other change drops them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from itertools import islice
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from offpeak_core.announcements import (
    Announcement,
    AnnouncementError,
    announcement_from_object,
    by_pool,
    object_name,
)
from offpeak_core.decisions import prediction_for
from offpeak_core.forecast import (
    DemandForecast, ForecastSettings, fit_seasonal, forecast_demand, forecast_now, level_since,
)
from offpeak_core.gangs import GangKey, width_scale
from offpeak_core.gpuproducts import node_gpu_type
from offpeak_core.model import NodeView, OfflinePod, Prediction
from offpeak_core.nodearrays import NodeArrays, NodeRows
from offpeak_core.poolrise import pool_judged_online
from offpeak_core.schedules import BusySchedule, parse_busy_hours
from offpeak_core.timeparse import parse_timestamp
from offpeak_core.windows import free_profile, node_view, profile_window, with_busy_hours
from offpeak_core.yielding import checkpoint_interval, save_on_stop_seconds
from offpeak_extender.pools import PooledViews, PoolFit, PoolSettings, fit_pools, pooled_profile, pools_of
from offpeak_extender.wire import (
    BUSY_HOURS_ANNOTATION,
    CHECKPOINTING_ANNOTATION,
    GPU_RESOURCE,
    PREDICTED_ANNOTATION,
    TRAININGJOB_LABEL,
    WORKLOAD_LABEL,
    WireError,
    list_key,
    parse_gang,
    parse_predictions,
    parse_quantity,
    pod_gpus,
)

log = logging.getLogger(__name__)

ACTIVE_PHASES = frozenset({"Pending", "Running", "Unknown", ""})
# Node-name lists whose columns `node_arrays` keeps. kube-scheduler sends the same lists again and again (every
# feasible node to /filter, those that passed to /prioritize); each entry costs ~250 bytes a node.
ARRAYS_CACHE_ENTRIES = 4
# Per-node changes remembered (a GPU-moving pod event makes two: its node's view dropped, then rebuilt), so kept
# columns can be patched instead of gathered again; columns older than the log are gathered again.
CHANGE_LOG_ENTRIES = 1024
KEPT_PATCH_NODES = 8  # `kept_arrays` patches the rows of up to this many changed nodes (a pod event changes one)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    gpu_type: str
    gpus_total: int
    schedule: BusySchedule | None = None
    schedule_error: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodInfo:
    uid: str
    name: str
    namespace: str
    node: str | None
    gpus: int
    workload: str  # "online", "offline" or "" (other)
    phase: str
    checkpointing: bool = False
    trainingjob: str | None = None
    started_at: float | None = None
    deleting: bool = False
    unschedulable: bool = False  # PodScheduled=False, reason Unschedulable
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_in: Mapping[str, frozenset[str]] = field(default_factory=dict)  # required nodeAffinity `In` terms
    gang: GangKey | None = None  # one worker of a gang (offpeak.io/gang-size > 1)
    gang_worker: int | None = None  # its index in the gang (offpeak.io/worker; None: not given)
    elastic_width: int | None = None  # a worker of an elastic gang: the gang's full width (its prediction's)
    checkpoint_interval: float | None = None  # offpeak.io/checkpoint-interval-seconds (None: none, or unreadable)
    save_on_stop: float | None = None  # offpeak.io/save-on-stop-seconds (None: periodic checkpoints only)
    predicted: Mapping[str, Prediction] | None = None  # an offline pod's remaining job seconds per GPU type

    def may_run_on(self, node: NodeInfo) -> bool:
        """Whether the pod's nodeSelector and required node affinity (`In` expressions) allow `node`."""
        labels = dict(node.labels)
        labels.setdefault("kubernetes.io/hostname", node.name)
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        return all(labels.get(k) in values for k, values in self.affinity_in.items())

    @property
    def holds_gpus(self) -> bool:
        return bool(self.node) and self.gpus > 0 and self.phase in ACTIVE_PHASES


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """Node JSON -> NodeInfo (allocatable GPUs, GPU type from its labels, declared busy hours)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    try:
        gpus = int(parse_quantity(alloc.get(GPU_RESOURCE, 0)))
    except WireError:
        gpus = 0
    schedule = None
    error = None
    text = (meta.get("annotations") or {}).get(BUSY_HOURS_ANNOTATION)
    if text:
        try:
            schedule = parse_busy_hours(str(text))
        except ValueError as e:
            error = str(e)
            log.warning("node %s: ignoring %s: %s", meta.get("name"), BUSY_HOURS_ANNOTATION, e)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    gpu_type = node_gpu_type(labels) or "unknown"  # the override label, else GPU feature discovery's product
    return NodeInfo(str(meta.get("name", "")), gpu_type, gpus, schedule, error, labels)


def _affinity_in(spec: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Required node-affinity `In` expressions of the first term (enough for pinning online pods to nodes)."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    out: dict[str, frozenset[str]] = {}
    if len(terms) == 1:
        for expr in terms[0].get("matchExpressions") or []:
            if expr.get("operator") == "In":
                out[str(expr.get("key"))] = frozenset(str(v) for v in expr.get("values") or [])
    return out


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """Pod JSON -> PodInfo (GPU requests, workload label, node, phase)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    try:
        gpus = pod_gpus(obj)
    except WireError:
        gpus = 0
    try:
        gang = parse_gang(meta)
    except WireError:
        gang = None  # the extender places such a pod alone (and says so when it filters it)
    return PodInfo(
        uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace") or "default"),
        node=spec.get("nodeName") or None,
        gpus=gpus,
        workload=str(labels.get(WORKLOAD_LABEL, "")),
        phase=str(status.get("phase") or ""),
        checkpointing=str(ann.get(CHECKPOINTING_ANNOTATION, "")).lower() == "true",
        trainingjob=labels.get(TRAININGJOB_LABEL),
        started_at=parse_timestamp(status.get("startTime")),
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") == "Unschedulable" for c in status.get("conditions") or []),
        node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
        affinity_in=_affinity_in(spec),
        gang=None if gang is None else gang.key,
        gang_worker=None if gang is None else gang.worker,
        elastic_width=gang.size if gang is not None and gang.elastic else None,
        checkpoint_interval=checkpoint_interval(ann),
        save_on_stop=save_on_stop_seconds(ann),
        predicted=_predicted(ann) if labels.get(WORKLOAD_LABEL) == "offline" else None,
    )


def _predicted(annotations: Mapping[str, Any]) -> Mapping[str, Prediction] | None:
    """The pod's prediction annotation, parsed; None when absent or unreadable (the filter said so already)."""
    text = annotations.get(PREDICTED_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_predictions(str(text))
    except WireError:
        return None


def _finish_by(pod: PodInfo, gpu_type: str, width: int | None = None, gang_start: float | None = None
               ) -> float | None:
    """When the pod is expected to be done: its start plus its predicted p90 on the node's GPU type; for a worker
    of an elastic gang running on `width` of its workers now, the gang's start (`gang_start`, its first worker's:
    a worker that joined later finishes with the others) plus that p90 scaled to the width (as if it had run so
    from its start: late, rather than early, when workers joined since)."""
    if pod.started_at is None or not pod.predicted:
        return None
    pred, exact = prediction_for(pod.predicted, gpu_type)
    if pred is None or not exact:
        return None
    if pod.elastic_width is not None and width is not None and 1 <= width <= pod.elastic_width:
        start = pod.started_at if gang_start is None else min(gang_start, pod.started_at)
        return start + pred.p90 * width_scale(width=width, full_width=pod.elastic_width)
    return pod.started_at + pred.p90


@dataclass
class _Usage:
    online: int = 0
    offline: int = 0
    other: int = 0
    version: int = 0

    @property
    def used(self) -> int:
        return self.online + self.offline + self.other


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
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._usage: dict[str, _Usage] = {}
        self._forecasts: dict[str, DemandForecast] = {}
        self._recent: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # per node, its latest demand samples
        self._forecast_at: float | None = None
        self._history_error: str | None = None
        # Views that are current (inputs unchanged since they were built), for the request path's lookups; an
        # entry goes when its node's pods or the node change, all go on a refit or when staleness flips.
        self._ready: dict[str, NodeView] = {}
        self._ready_stale = True
        self._rows = NodeRows()  # the ready views as columns for the request path (`node_arrays`)
        # Bumped by every change a view or the node set can see (`_changed`): columns gathered at one generation
        # are reused for the same name list until the next, then patched where the change log names their nodes.
        self._generation = 0
        self._arrays_cache: dict[str | tuple[str, ...], _CachedArrays] = {}  # by `list_key`
        self._change_log: deque[tuple[str, ...]] = deque(maxlen=CHANGE_LOG_ENTRIES)  # the nodes of each generation
        self._forecast_version = 0
        max_samples = int(settings.history_seconds / settings.step_seconds) + 1
        self._samples: dict[str, deque[tuple[float, float]]] = {}
        self._max_samples = max_samples
        self._gangs: dict[GangKey, dict[str, str | None]] = {}  # gang -> its live pods (uid -> node or None)
        # Pool windows: each pooled node's pool, each pool's nodes, its online and held (offline and other) GPUs
        # now, and its fit of the last refresh. A pooled node's view depends on its pool's usage, so a change on one
        # node of a pool drops the views of all its nodes (`_with_pool_mates`).
        self._pool_of: dict[str, str] = {}
        self._pool_nodes: dict[str, tuple[str, ...]] = {}
        self._pool_usage: dict[str, list[int]] = {}
        self._pool_fits: dict[str, PoolFit] = {}
        self._pooled_views = PooledViews()
        # Announced online demand (`offpeak_core.announcements`): every usable OnlineDemand object by namespace/name,
        # and those not yet over by pool, a floor under the pool's forecast.
        self._announcements: dict[str, Announcement] = {}
        self._announced: dict[str, tuple[Announcement, ...]] = {}
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
            if infos is not None:
                changed = {n for n, i in infos.items() if self._nodes.get(n) != i}
                self._nodes = infos
                self._nodes_synced = True
                self._rows.retain(infos)
                for gone in set(self._ready) - set(infos):  # a node the re-list no longer has is unknown, not kept
                    del self._ready[gone]
                changed |= self._reindex_pools_locked()
            else:
                changed = set()
            if pinfos is not None:
                self._pods = pinfos
                self._pods_synced = True
                self._gangs = {}
                for pod in pinfos.values():
                    self._index_gang(pod, +1)
            self._recount(changed)
            self.synced = self._nodes_synced and self._pods_synced
            self._changed()
        self.views(self.node_names())  # rebuild invalidated views here, in the informer's thread, not per request

    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        info = node_info(obj)
        with self._lock:
            if self._nodes.get(info.name) == info:
                return  # status heartbeats and unrelated changes: nothing the decisions read
            self._nodes[info.name] = info
            touched = {info.name} | self._reindex_pools_locked()
            for name in touched:
                self._bump(name)
            self._changed(tuple(touched))

    def delete_node(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            self._nodes.pop(name, None)
            self._ready.pop(name, None)
            self._rows.forget(name)
            touched = self._reindex_pools_locked()
            for mate in touched - {name}:
                self._bump(mate)
            self._changed((name, *touched))

    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        info = pod_info(obj)
        with self._lock:
            old = self._pods.get(info.uid)
            if old == info:
                return  # status heartbeats and unrelated changes: nothing the store reads
            self._pods[info.uid] = info
            touched = self._account(old, -1) | self._account(info, +1)
            self._index_gang(old, -1)
            self._index_gang(info, +1)
            touched = self._usage_changed_locked(touched)
        self.views(sorted(touched))  # rebuilt here, in the informer's thread, not by the next request

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        uid = pod_info(obj).uid
        with self._lock:
            old = self._pods.pop(uid, None)
            touched = self._account(old, -1)
            self._index_gang(old, -1)
            touched = self._usage_changed_locked(touched)
        self.views(sorted(touched))

    def _account(self, pod: PodInfo | None, sign: int) -> set[str]:
        """Count (+1) or uncount (-1) a pod's GPUs on its node; the nodes whose usage (so whose view) changed."""
        if pod is None or not pod.holds_gpus or pod.node is None:
            return set()
        u = self._usage.setdefault(pod.node, _Usage())
        if pod.workload == "online":
            u.online += sign * pod.gpus
        elif pod.workload == "offline":
            u.offline += sign * pod.gpus
        else:
            u.other += sign * pod.gpus
        u.version += 1
        pool = self._pool_usage.get(self._pool_of.get(pod.node, ""))
        if pool is not None:
            pool[0 if pod.workload == "online" else 1] += sign * pod.gpus
        return {pod.node}

    def _usage_changed_locked(self, nodes: set[str]) -> set[str]:
        """Views are built from node usage (and a pooled node's from its pool's): drop the views (and cached
        columns) of the nodes whose usage changed and of their pool mates, and nothing when none did (a pod that
        holds no GPUs); the nodes whose views were dropped."""
        mates = self._with_pool_mates(nodes) - nodes
        for node in mates:
            self._usage.setdefault(node, _Usage()).version += 1  # so a view built from their old inputs is not kept
        nodes = nodes | mates
        for node in nodes:
            self._ready.pop(node, None)
        if nodes:
            self._changed(tuple(nodes))
        return nodes

    def _with_pool_mates(self, nodes: Iterable[str]) -> set[str]:
        """`nodes` and every node of their pools."""
        out = set(nodes)
        for pool in {self._pool_of[n] for n in out if n in self._pool_of}:
            out.update(self._pool_nodes[pool])
        return out

    def replace_announcements(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Reset the announced online demand from a full list of OnlineDemand objects (informer (re)list)."""
        usable = {a.name: a for a in map(_announcement_or_none, objs) if a is not None}
        with self._lock:
            self._announcements = usable
            self._reannounce_locked()

    def upsert_announcement(self, obj: Mapping[str, Any]) -> None:
        a = _announcement_or_none(obj)
        if a is not None and a.pool_gpus_at_most is not None:
            namespace = a.name.partition("/")[0]
            if self.pools is None or namespace not in self.pools.ceiling_namespaces:
                log.warning("OnlineDemand %s: spec.poolGpusAtMost ignored: namespace %r may not state a pool's "
                            "ceiling (--pool-ceiling-namespaces); it counts as a floor only", a.name, namespace)
                a = replace(a, pool_gpus_at_most=None)
        with self._lock:
            if a is None:  # unusable now: whatever it said before no longer stands
                self._announcements.pop(object_name(obj), None)
            else:
                self._announcements[a.name] = a
            self._reannounce_locked()

    def delete_announcement(self, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self._announcements.pop(object_name(obj), None)
            self._reannounce_locked()

    def announced(self, pool: str) -> tuple[Announcement, ...]:
        """The announcements of `pool` not over when they last changed (earliest start first)."""
        with self._lock:
            return self._announced.get(pool, ())

    def _reannounce_locked(self) -> None:
        """Regroup the announcements by pool; the views of the nodes of every pool whose announcements changed go."""
        new = by_pool(self._announcements.values(), now=self.clock())
        changed = {p for p in set(new) | set(self._announced) if new.get(p, ()) != self._announced.get(p, ())}
        self._announced = new
        nodes = tuple(n for p in changed for n in self._pool_nodes.get(p, ()))
        for n in nodes:
            self._bump(n)
        if nodes:
            self._changed(nodes)

    def _reindex_pools_locked(self) -> set[str]:
        """Index the nodes by their pool label and recount each pool's usage; the nodes of every pool whose nodes
        or GPUs changed (their views must go; the pool's fit goes until the next refresh, its nodes keep their own
        windows till then, and `pools_changed` asks the refresher for that refresh soon)."""
        if self.pools is None:
            return set()
        label = self.pools.label
        new = pools_of({n: info.labels for n, info in self._nodes.items()}, label)
        old = self._pool_nodes
        changed: set[str] = set()
        for pool in set(old) | set(new):
            before, after = old.get(pool, ()), new.get(pool, ())
            fit = self._pool_fits.get(pool)
            if before != after or (fit is not None and fit.capacity != self._gpus_of(after)):
                changed.update(before, after)
                self._pool_fits.pop(pool, None)
        self._pool_nodes = new
        self._pool_of = {n: pool for pool, nodes in new.items() for n in nodes}
        self._recount_pools_locked()
        if changed:
            self.pools_changed.set()
        return changed

    def _gpus_of(self, nodes: Iterable[str]) -> int:
        return sum(info.gpus_total for n in nodes if (info := self._nodes.get(n)) is not None)

    def _recount_pools_locked(self) -> None:
        """Each pool's online and held GPUs, summed from its nodes' usage."""
        self._pool_usage = {}
        for pool, nodes in self._pool_nodes.items():
            used = [self._usage.get(n, _Usage()) for n in nodes]
            self._pool_usage[pool] = [sum(u.online for u in used), sum(u.offline + u.other for u in used)]

    def _index_gang(self, pod: PodInfo | None, sign: int) -> None:
        """Add (+1) or remove (-1) a gang worker in the gang index; pods being deleted or finished are gone."""
        if pod is None or pod.gang is None:
            return
        members = self._gangs.get(pod.gang)
        if sign < 0:
            if members is not None:
                members.pop(pod.uid, None)
                if not members:
                    del self._gangs[pod.gang]
            return
        if pod.deleting or pod.phase not in ACTIVE_PHASES:
            return
        self._gangs.setdefault(pod.gang, {})[pod.uid] = pod.node

    def gang_members(self, key: GangKey) -> dict[str, str | None]:
        """The gang's live pods: pod uid -> the node it is bound to (None while pending)."""
        with self._lock:
            return dict(self._gangs.get(key, {}))

    def gang_worker_indexes(self, key: GangKey) -> dict[str, int | None]:
        """The gang's live pods: pod uid -> its worker index (None: its pod carries none)."""
        with self._lock:
            return {uid: pod.gang_worker if (pod := self._pods.get(uid)) is not None else None
                    for uid in self._gangs.get(key, {})}

    def gang_started(self, key: GangKey) -> tuple[float, str] | None:
        """When the gang's first running worker started (its worker 0: it hosts the rendezvous, so it runs first)
        and the GPU type of its node; None while no worker of it has started on a known node."""
        with self._lock:
            started = self._gang_starts_locked(key)
            if not started:
                return None
            at, node = min(started)
            info = self._nodes.get(node)
            return (at, info.gpu_type) if info is not None else None

    def _gang_starts_locked(self, key: GangKey) -> list[tuple[float, str]]:
        return [(pod.started_at, node) for uid, node in self._gangs.get(key, {}).items()
                if node is not None and (pod := self._pods.get(uid)) is not None and pod.started_at is not None]

    def _gang_start_locked(self, key: GangKey) -> float | None:
        return min((at for at, _ in self._gang_starts_locked(key)), default=None)

    def _changed(self, nodes: tuple[str, ...] | None = None) -> None:
        """Something views or the node set depend on changed: the views of `nodes` only (their rows of cached
        columns are patched on the next lookup), or anything (None: cached columns are not served again)."""
        self._generation += 1
        if nodes is None:
            self._arrays_cache.clear()
            self._change_log.clear()
        else:
            self._change_log.append(nodes)

    def _changed_since_locked(self, generation: int) -> set[str] | None:
        """The nodes changed after `generation`; None when that is not known (a change to anything since, or more
        changes than the log keeps)."""
        behind = self._generation - generation
        if behind > len(self._change_log):  # the log holds exactly the generations since the last change to anything
            return None
        return {n for nodes in islice(reversed(self._change_log), behind) for n in nodes}

    def _bump(self, node: str) -> None:
        self._usage.setdefault(node, _Usage()).version += 1
        self._ready.pop(node, None)

    def _recount(self, changed_nodes: set[str]) -> None:
        """Recount GPU usage from all pods; bump view versions only where usage or the node itself changed."""
        old = self._usage
        self._usage = {}
        for pod in self._pods.values():
            self._account(pod, +1)
        for n in set(self._nodes) | set(old):
            new = self._usage.setdefault(n, _Usage())
            prev = old.get(n)
            same = prev is not None and (prev.online, prev.offline, prev.other) == (new.online, new.offline, new.other)
            if same and prev is not None and n not in changed_nodes:
                new.version = prev.version
            else:
                new.version = (prev.version if prev else 0) + 1
                self._ready.pop(n, None)
        self._recount_pools_locked()
        moved = {n for n, u in self._usage.items() if (prev := old.get(n)) is None or u.version != prev.version}
        for n in self._with_pool_mates(moved) - moved:
            self._usage[n].version += 1
            self._ready.pop(n, None)

    # -- history / forecasts -------------------------------------------------------------------------------------
    def record_local_sample(self, now: float | None = None) -> None:
        """Append each node's current online GPU requests to the in-memory history (used without Prometheus)."""
        t = self.clock() if now is None else now
        with self._lock:
            for name in self._nodes:
                q = self._samples.setdefault(name, deque(maxlen=self._max_samples))
                q.append((t, float(self._usage.get(name, _Usage()).online)))

    def online_snapshot(self) -> dict[str, tuple[int, int, int]]:
        """(GPUs, online GPUs requested, online GPUs its windows are judged by) per node now, for the goodput window
        ledger. The last two are the same but for a node with pool windows: its window of L GPUs ends when its pool
        has fewer than L GPUs free of online pods (an offline pod of L GPUs there would be evicted then), whatever
        lands on the node itself, so it is judged by its GPUs less its pool's free ones."""
        with self._lock:
            out = {}
            for name, info in self._nodes.items():
                online = self._usage.get(name, _Usage()).online
                judged = online
                pool = self._pool_of.get(name)
                fit = self._pool_fits.get(pool) if pool is not None else None
                if fit is not None and pool is not None:
                    room = fit.capacity - self._pool_usage.get(pool, [0, 0])[0]
                    judged = int(pool_judged_online(info.gpus_total, room))
                out[name] = (info.gpus_total, online, judged)
            return out

    def local_history(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self._lock:
            snap = {n: list(q) for n, q in self._samples.items()}
        return {n: (np.array([a for a, _ in s]), np.array([b for _, b in s])) for n, s in snap.items() if s}

    def set_history(self, history: Mapping[str, tuple[np.ndarray, np.ndarray]], *, now: float | None = None) -> None:
        """Fit the seasonal model per node and build every view (outside the lock), then publish both at once."""
        t = self.clock() if now is None else now
        forecasts: dict[str, DemandForecast] = {}
        recent: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        ended: list[str] = []
        for name, (times, online) in history.items():
            if not series_is_current(times=times, online=online, now=t, max_age_seconds=self.series_max_age_seconds):
                ended.append(name)  # its source stopped reporting: unknown (stale, fits-now), not idle
                continue
            model = fit_seasonal(times=times, online=online, now=t, settings=self.settings)
            if model.n_samples:
                forecasts[name] = forecast_demand(model=model, start=t)
                recent[name] = recent_samples(times, online, since=t - 2 * self.settings.hold_seconds)
        if ended:
            log.info("%d node(s) without recent demand samples, treated as stale: %s", len(ended),
                     ", ".join(sorted(ended)[:10]))
        fits: dict[str, PoolFit] = {}
        pools: dict[str, tuple[str, ...]] = {}
        if self.pools is not None:
            with self._lock:
                pools = dict(self._pool_nodes)
                capacity = {n: info.gpus_total for n, info in self._nodes.items()}
            fits = fit_pools(history, pools, capacity, now=t, settings=self.settings,
                             look_back_seconds=self.pools.look_back_seconds,
                             is_current=lambda times, online: series_is_current(
                                 times=times, online=online, now=t, max_age_seconds=self.series_max_age_seconds))
        # Build every node's new view before publishing, so requests meanwhile keep using the old ones instead of
        # finding the cache empty and rebuilding views themselves.
        with self._lock:
            self._reannounce_locked()  # announcements over since they last changed go
            version = self._forecast_version + 1
            fits = self._still_current_locked(fits, pools)
            inputs = [_ViewInputs(info=info, online=u.online, offline=u.offline + u.other, used=u.used,
                                  fitted=forecasts.get(name), stale=False, key=(u.version, version),
                                  pool=self._pool_inputs_locked(name, fits), recent=recent.get(name))
                      for name, info in self._nodes.items() for u in (self._usage.get(name, _Usage()),)]
        views = [(inp, self._build(inp, t)) for inp in inputs]
        with self._lock:
            self._forecasts = forecasts
            self._recent = recent
            self._pool_fits = self._still_current_locked(fits, pools)  # (a node may have changed since, too)
            self._forecast_at = t
            self._history_error = None
            self._forecast_version += 1  # == version unless a failed refresh bumped it meanwhile: then rebuild lazily
            self._ready_stale = self._stale_locked(self.clock())
            self._ready = {} if self._ready_stale else {
                inp.info.name: view for inp, view in views
                if inp.info.name in self._nodes
                and inp.key == (self._usage.get(inp.info.name, _Usage()).version, self._forecast_version)}
            self._changed()

    @property
    def series_max_age_seconds(self) -> float:
        """A node whose newest demand sample is older than this has stopped reporting (range queries return a
        point per step, so a live series' newest point is at most one step old)."""
        return self.stale_after_seconds + self.settings.step_seconds

    def mark_history_failed(self, error: str) -> None:
        with self._lock:
            self._history_error = error
            self._forecast_version += 1
            self._ready.clear()
            self._changed()

    def data_stale(self, now: float | None = None) -> bool:
        """True when forecasts are missing, failed to refresh, or older than `stale_after_seconds`."""
        t = self.clock() if now is None else now
        with self._lock:
            return self._stale_locked(t)

    def _stale_locked(self, now: float) -> bool:
        return (
            self._history_error is not None
            or self._forecast_at is None
            or now - self._forecast_at > self.stale_after_seconds
        )

    # -- views for the decisions ---------------------------------------------------------------------------------
    def _inputs_locked(self, name: str, now: float) -> _ViewInputs | None:
        """What one node's view is built from, copied under the lock (cheap: references and a few ints)."""
        info = self._nodes.get(name)
        if info is None:
            return None
        usage = self._usage.get(name, _Usage())
        return _ViewInputs(info=info, online=usage.online, offline=usage.offline + usage.other, used=usage.used,
                           fitted=self._forecasts.get(name), stale=self._stale_locked(now),
                           key=(usage.version, self._forecast_version),
                           pool=self._pool_inputs_locked(name, self._pool_fits), recent=self._recent.get(name))

    def _still_current_locked(self, fits: Mapping[str, PoolFit], pools: Mapping[str, tuple[str, ...]]
                              ) -> dict[str, PoolFit]:
        """The fits of pools whose nodes and GPUs are still those they were fitted on (`pools`): a pool that
        changed meanwhile is fitted again at the next refresh, and its nodes keep their own windows till then."""
        return {p: f for p, f in fits.items()
                if self._pool_nodes.get(p) == pools[p] and f.capacity == self._gpus_of(pools[p])}

    def _pool_inputs_locked(self, name: str, fits: Mapping[str, PoolFit]) -> _PoolInputs | None:
        """What a pooled node's view takes from its pool: the pool's fit and its usage now (None: the node is in
        no pool, or its pool has no fit; its own windows then)."""
        pool = self._pool_of.get(name)
        fit = fits.get(pool) if pool is not None else None
        if fit is None or pool is None:
            return None
        online, held = self._pool_usage.get(pool, (0, 0))
        return _PoolInputs(fit=fit, online=online, held=held, announced=self._announced.get(pool, ()))

    def _publish(self, name: str, inp: _ViewInputs, view: NodeView) -> None:
        """Keep a view built outside the lock, unless newer inputs arrived (or the node went) meanwhile."""
        with self._lock:
            usage = self._usage.get(name, _Usage())
            if (name in self._nodes and inp.key == (usage.version, self._forecast_version)
                    and inp.stale == self._ready_stale):
                self._ready[name] = view
                self._changed((name,))

    def rebuild_views(self, names: Sequence[str] | None = None, *, now: float | None = None) -> None:
        t = self.clock() if now is None else now
        with self._lock:
            self._check_staleness_locked(t)
            inputs = {n: self._inputs_locked(n, t) for n in (list(self._nodes) if names is None else names)}
        for name, inp in inputs.items():
            if inp is not None:
                self._publish(name, inp, self._build(inp, t))

    def _build(self, inp: _ViewInputs, now: float) -> NodeView:
        """`build_view` with the store's settings (outside the lock)."""
        return build_view(inp, now=now, settings=self.settings, keep_ahead_seconds=self.stale_after_seconds,
                          pooled=self._pooled_views)

    def _check_staleness_locked(self, now: float) -> bool:
        """Drop the ready views when forecasts went stale (or fresh) since they were built; return staleness."""
        stale = self._stale_locked(now)
        if stale != self._ready_stale:
            self._ready.clear()
            self._ready_stale = stale
            self._changed()
        return stale

    def views(self, names: Sequence[str], *, now: float | None = None) -> tuple[list[NodeView], list[str]]:
        """NodeViews for `names` (rebuilt only where pods changed since), and the names the store does not know.

        Hot path: one dict lookup per name under the lock; views to rebuild are built outside it.
        """
        t = self.clock() if now is None else now
        unknown: list[str] = []
        rebuild: list[tuple[int, str, _ViewInputs]] = []
        with self._lock:
            self._check_staleness_locked(t)
            ready = self._ready.get
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

    def node_arrays(self, names: Sequence[str], *, now: float | None = None,
                    key: str | tuple[str, ...] | None = None) -> tuple[NodeArrays, list[str]]:
        """`views` as columns for the decisions' array path, and the names the store does not know.

        Hot path: the columns of a name list are kept until the store next changes (`_changed`), so a list sent
        again (kube-scheduler sends the same ones over and over) costs a lookup instead of a pass over its names;
        after a change to a few nodes (a pod started or stopped) only their rows are rewritten (`_patched`).
        Otherwise rows are rewritten only for views rebuilt since. `key`: the names' `list_key`, when the caller
        has it already (the wire makes it while checking a request's names).
        """
        t = self.clock() if now is None else now
        if key is None:
            key = list_key(names)
        hash(key)  # outside the lock (a string keeps its hash)
        with self._lock:
            self._check_staleness_locked(t)
            generation = self._generation
            hit = self._arrays_cache.get(key)
            changed = None if hit is None else self._changed_since_locked(hit.generation)
        if hit is not None and changed is not None:
            patched = self._patched(key, names, hit, changed, generation, t)
            if patched is not None:
                return patched, list(hit.unknown)
        views, unknown = self.views(names, now=t)
        with self._lock:
            arrays = self._rows.gather(views)
            if self._generation == generation:  # nothing changed meanwhile: no view was rebuilt, none went stale
                self._remember_locked(key, _CachedArrays(arrays, tuple(unknown), generation))
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
            hit = self._arrays_cache.get(key)
            if hit is None or hit.unknown:
                return None
            changed = self._changed_since_locked(hit.generation)
            if changed is None or len(changed) > KEPT_PATCH_NODES or not all(n in self._ready for n in changed):
                return None
            if hit.generation == self._generation:
                return hit.arrays
            positions, at = _rows_to_patch(hit, names, changed)
            if at and not hit.arrays.distinct:
                return None
            return self._patch_locked(key, hit, positions, at, [self._ready[names[i]] for i in at], self._generation)
        finally:
            self._lock.release()

    def _patched(self, key: str | tuple[str, ...], names: Sequence[str], hit: _CachedArrays, changed: set[str],
                 generation: int, now: float) -> NodeArrays | None:
        """`hit`'s columns as of `generation`, given that only the views of `changed` changed since they were
        gathered: the same columns when none of those nodes is listed, else a copy with their rows rewritten. None
        when the list must be gathered afresh: it names a node the store does not know (then or now) or one node
        twice, or a change to anything came meanwhile."""
        if not changed:
            return hit.arrays
        positions, at = _rows_to_patch(hit, names, changed)
        if at and (hit.unknown or not hit.arrays.distinct):
            return None
        views: list[NodeView] = []
        if at:
            views, unknown = self.views([names[i] for i in at], now=now)
            if unknown:
                return None
        with self._lock:
            if at and self._changed_since_locked(generation) is None:  # a refit or staleness flip meanwhile
                return None
            return self._patch_locked(key, hit, positions, at, views, generation)

    def _patch_locked(self, key: str | tuple[str, ...], hit: _CachedArrays, positions: Mapping[str, int],
                      at: list[int], views: Sequence[NodeView], generation: int) -> NodeArrays | None:
        """`hit`'s columns with the rows `at` rewritten from `views` (the same columns when `at` is empty), kept
        for `key` if nothing changed since `generation`, as in `node_arrays`; None when the rows cannot be patched."""
        arrays = hit.arrays
        if at:
            patched = self._rows.patch(hit.arrays, at, views)
            if patched is None:
                return None
            arrays = patched
        if self._generation == generation:
            self._remember_locked(key, _CachedArrays(arrays, hit.unknown, generation, positions))
        return arrays

    def _remember_locked(self, key: str | tuple[str, ...], entry: _CachedArrays) -> None:
        """Keep `entry` for `key` (in place of an older one), dropping the oldest entry beyond
        `ARRAYS_CACHE_ENTRIES`."""
        self._arrays_cache.pop(key, None)
        while len(self._arrays_cache) >= ARRAYS_CACHE_ENTRIES:
            del self._arrays_cache[next(iter(self._arrays_cache))]
        self._arrays_cache[key] = entry

    def nodes_labelled(self, labels: Mapping[str, str]) -> frozenset[str]:
        """The nodes that carry every one of `labels` (a Kueue ResourceFlavor's node labels)."""
        with self._lock:
            return frozenset(n for n, info in self._nodes.items()
                             if all(info.labels.get(k) == v for k, v in labels.items()))

    # -- eviction controller side --------------------------------------------------------------------------------
    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def pods_on(self, node: str) -> list[PodInfo]:
        with self._lock:
            return self._pods_on_locked(node)

    def _pods_on_locked(self, node: str) -> list[PodInfo]:
        return [p for p in self._pods.values() if p.node == node and p.holds_gpus]

    def pending_pods(self, workload: str) -> list[PodInfo]:
        with self._lock:
            return [p for p in self._pods.values() if p.workload == workload and p.node is None
                    and p.phase == "Pending" and p.gpus > 0 and not p.deleting]

    def node(self, name: str) -> NodeInfo | None:
        with self._lock:
            return self._nodes.get(name)

    def usage(self, name: str) -> tuple[int, int, int]:
        """GPUs requested on `name` by (online, offline, other) pods."""
        with self._lock:
            u = self._usage.get(name, _Usage())
            return u.online, u.offline, u.other

    def free_gpus(self, name: str) -> int:
        with self._lock:
            info = self._nodes.get(name)
            if info is None:
                return 0
            return max(0, info.gpus_total - self._usage.get(name, _Usage()).used)

    def offline_pods_on(self, node: str, *, now: float) -> list[OfflinePod]:
        """The offline pods running on `node` as eviction sees them; a gang worker carries its gang's GPUs, since
        evicting it stops every worker (an elastic gang's too: those left restart from the last checkpoint)."""
        with self._lock:
            pods = [p for p in self._pods_on_locked(node) if p.workload == "offline" and not p.deleting]
            gang_gpus = {p.gang: self._gang_gpus_locked(p.gang) for p in pods if p.gang is not None}
            widths: dict[GangKey | None, int] = {  # an elastic gang runs on its bound workers now
                p.gang: sum(n is not None for n in self._gangs.get(p.gang, {}).values())
                for p in pods if p.gang is not None and p.elastic_width is not None}
            starts = {key: self._gang_start_locked(key) for key in widths if key is not None}
            gpu_type = info.gpu_type if (info := self._nodes.get(node)) is not None else ""
        return [
            OfflinePod(name=p.name, namespace=p.namespace, gpus=p.gpus, checkpointing=p.checkpointing,
                       elapsed_seconds=max(0.0, now - p.started_at) if p.started_at else 0.0,
                       trainingjob=p.trainingjob, uid=p.uid,
                       gang_gpus=gang_gpus[p.gang] if p.gang is not None else 0,
                       checkpoint_interval_seconds=p.checkpoint_interval,
                       save_on_stop_seconds=p.save_on_stop,
                       finish_by=_finish_by(p, gpu_type, widths.get(p.gang),
                                            starts.get(p.gang) if p.gang is not None else None))
            for p in pods
        ]

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
            room = pooled_profile(inp.pool.fit, pool_online_now=float(inp.pool.online),
                                  pool_held=inp.pool.held - inp.offline, node_free=info.gpus_total - inp.online,
                                  now=t, settings=self.settings, schedule=info.schedule,
                                  announced=inp.pool.announced)
            return profile_window(room, held=held, now=t)
        fc = forecast_now(fitted=None if inp.stale else inp.fitted, capacity=info.gpus_total, now=t,
                          settings=self.settings, live_online=float(inp.online), schedule=info.schedule,
                          live_rose_at=inp.online_rose_at(self.settings))
        if fc is None:
            return None, False
        room = free_profile(forecast=fc, capacity=info.gpus_total)  # the GPUs offline pods may hold, theirs included
        room = with_busy_hours(room, schedule=info.schedule, most_free=info.gpus_total,
                               day_seconds=self.settings.season_seconds)
        return profile_window(room, held=held, now=t)

    def _gang_gpus_locked(self, key: GangKey) -> int:
        """GPUs the gang's bound workers hold, together: a worker still waiting for a place (an elastic gang's, or
        one not yet scheduled) has done no work an eviction could throw away."""
        return sum(pod.gpus for uid, node in self._gangs.get(key, {}).items()
                   if node is not None and (pod := self._pods.get(uid)) is not None)


def _rows_to_patch(hit: _CachedArrays, names: Sequence[str], changed: set[str]) -> tuple[Mapping[str, int], list[int]]:
    """Each name's position in `hit`'s list (kept with it once a patch needed it) and, in order, the positions of
    the `changed` nodes it lists: the rows a patch rewrites."""
    positions = hit.positions if hit.positions is not None else dict(zip(names, range(len(names))))
    return positions, sorted(positions[n] for n in changed if n in positions)


@dataclass(frozen=True)
class _CachedArrays:
    """A name list's columns and the names the store did not know, as of `generation`."""

    arrays: NodeArrays
    unknown: tuple[str, ...]
    generation: int
    positions: Mapping[str, int] | None = None  # each name's position in the list, once a patch needed it


@dataclass(frozen=True)
class _ViewInputs:
    """A snapshot of what one node's `NodeView` depends on."""

    info: NodeInfo
    online: int
    offline: int  # offline and other pods' GPUs
    used: int
    fitted: DemandForecast | None
    stale: bool
    key: tuple[int, int]  # (usage version, forecast version) the snapshot was taken at
    pool: _PoolInputs | None = None  # a pooled node's: its windows come from its pool
    recent: tuple[np.ndarray, np.ndarray] | None = None  # its latest demand samples (`recent_samples`)

    def online_rose_at(self, settings: ForecastSettings) -> float | None:
        """When the node's online demand rose to what it is now, as its latest samples tell (None: not yet in
        them, or no samples): a rise the forecast missed closes the node for a while from then, not from every
        rebuild of its view (`forecast.apply_live`)."""
        if self.recent is None:
            return None
        return level_since(times=self.recent[0], online=self.recent[1], level=float(self.online),
                           tolerance=settings.live_tolerance)


@dataclass(frozen=True)
class _PoolInputs:
    """A snapshot of what a pooled node's view takes from its pool."""

    fit: PoolFit
    online: int  # the pool's online GPUs now
    held: int  # its offline and other pods' GPUs now
    announced: tuple[Announcement, ...] = ()  # its online owners' announcements not yet over


def _announcement_or_none(obj: Mapping[str, Any]) -> Announcement | None:
    """An OnlineDemand object's announcement; None (and a warning naming the object and field) when unusable."""
    try:
        return announcement_from_object(obj)
    except AnnouncementError as e:
        log.warning("OnlineDemand %s; ignored", e)
        return None


def recent_samples(times: np.ndarray, online: np.ndarray, *, since: float) -> tuple[np.ndarray, np.ndarray]:
    """A demand series' samples after `since` (copies: the history arrays are not kept)."""
    t = np.asarray(times, dtype=float)
    keep = t > since
    return t[keep].copy(), np.asarray(online, dtype=float)[keep].copy()


def series_is_current(*, times: np.ndarray, online: np.ndarray, now: float, max_age_seconds: float) -> bool:
    """Whether a demand series has a finite sample no older than `max_age_seconds` (pure)."""
    t = np.asarray(times, dtype=float)
    finite = np.isfinite(t) & np.isfinite(np.asarray(online, dtype=float)) & (t <= now)
    return bool(finite.any()) and float(t[finite].max()) >= now - max_age_seconds


def build_view(inp: _ViewInputs, *, now: float, settings: ForecastSettings, keep_ahead_seconds: float,
               pooled: PooledViews | None = None) -> NodeView:
    """One node's view for the decisions (pure; runs outside the store's lock): from its own forecast, or a pooled
    node's from its pool's (`pools.pooled_profile`)."""
    info = inp.info
    free_now = max(0, info.gpus_total - inp.used)
    if inp.pool is not None and not inp.stale:
        return (pooled or PooledViews()).view(
            inp.pool.fit, name=info.name, gpu_type=info.gpu_type, gpus_total=info.gpus_total, node_free=free_now,
            pool_online=inp.pool.online, pool_held=inp.pool.held, schedule=info.schedule, now=now, settings=settings,
            keep_ahead_seconds=keep_ahead_seconds, announced=inp.pool.announced)
    fc = forecast_now(fitted=None if inp.stale else inp.fitted, capacity=info.gpus_total, now=now,
                      settings=settings, live_online=float(inp.online), schedule=info.schedule,
                      live_rose_at=inp.online_rose_at(settings))
    if fc is None:
        return NodeView(info.name, info.gpu_type, info.gpus_total, free_now, None, None, True, None, 0.0)
    prof = with_busy_hours(free_profile(forecast=fc, capacity=info.gpus_total, offline_now=inp.offline),
                           schedule=info.schedule, most_free=max(0, info.gpus_total - inp.offline),
                           day_seconds=settings.season_seconds)
    # A forecast here is fresh, or stands on declared busy hours alone: either way not stale.
    return node_view(name=info.name, gpu_type=info.gpu_type, gpus_total=info.gpus_total, gpus_free_now=free_now,
                     profile=prof, now=now, data_stale=False, keep_ahead_seconds=keep_ahead_seconds)
