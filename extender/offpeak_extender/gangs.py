"""The extender's gang placement: the core's plan and reservation table behind a lock, fed by the store.

The first worker of a gang filtered plans places for every worker not yet bound (`offpeak_core.gangplans.plan_gang`)
and reserves them; each worker is then admitted on one reserved place only; every other managed pod sees the
reserved GPUs as taken. An elastic gang (`offpeak.io/gang-min-size`) is planned at the widest width that fits now,
and only its lowest-indexed waiting workers get the places; the others wait, and join by the same path later.
Reservations end when all workers are bound, when the gang's pods are gone, or after
`GangSettings.timeout_seconds`. No network call: gang membership comes from the store's informer-fed index.
Planning runs outside the lock; a reservation is committed only if the table did not change meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from offpeak_core.decisions import (
    DEFAULT_MARGIN,
    FilterColumns,
    filter_arrays,
    filter_columns,
    filter_nodes,
    prediction_for,
)
from offpeak_core.gangplans import Goodput, Revise, plan_gang
from offpeak_core.gangs import (
    DEFAULT_GANG_TIMEOUT_SECONDS,
    EXPIRED,
    MIN_WORK_LEFT,
    GangKey,
    GangReservations,
    admitted_workers,
    with_work_left,
    withhold,
    work_left,
)
from offpeak_core.goodput import GoodputAdmission
from offpeak_core.model import FilterResult, NodeView, PodRequest
from offpeak_core.nodearrays import NodeArrays
from offpeak_extender.metrics import GANG_CREATED, ExtenderMetrics
from offpeak_extender.store import ClusterStore
from offpeak_extender.wire import Gang

log = logging.getLogger(__name__)

_PLAN_TRIES = 3  # plans raced by another reservation are redone this often, then the worker waits for a retry


@dataclass(frozen=True)
class GangSettings:
    """Gang placement. `timeout_seconds`: a reservation not completed (every worker bound) this long after it was
    made is released, so a gang whose workers do not all arrive cannot hold GPUs for ever."""

    timeout_seconds: float = DEFAULT_GANG_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ValueError(f"gang timeout must be > 0 seconds, got {self.timeout_seconds}")


def _withheld_views(views: Sequence[NodeView], withheld: dict[str, int]) -> list[NodeView]:
    return [withhold(v, withheld[v.name]) if v.name in withheld else v for v in views]


def _noting_withheld(failed: Mapping[str, str], withheld: Mapping[str, int]) -> dict[str, str]:
    """Reasons that say when a node's GPUs are held for a gang (else "0 of 8 free now" on an idle node puzzles)."""
    if not withheld:
        return dict(failed)
    return {n: f"{r}; {withheld[n]} GPU(s) reserved for a gang" if n in withheld else r for n, r in failed.items()}


class GangPlacer:
    """Lock-protected reservation table plus the two filter paths that read it (gang worker, any other pod)."""

    def __init__(self, *, store: ClusterStore, metrics: ExtenderMetrics, settings: GangSettings) -> None:
        self.store = store
        self.metrics = metrics
        self.settings = settings
        self.table = GangReservations(timeout_seconds=settings.timeout_seconds)
        self._lock = threading.Lock()

    def _sweep_locked(self, now: float) -> None:
        """End reservations that completed, lost their pods or timed out; publish the gauges."""
        for key in self.table.keys():
            outcome = self.table.observe(key, self.store.gang_members(key))
            if outcome is not None:
                self.metrics.gang_events.labels(outcome).inc()
                log.info("gang %s: reservation ended (%s)", key, outcome)
        for key in self.table.expire(now=now):
            self.metrics.gang_events.labels(EXPIRED).inc()
            log.info("gang %s: reservation expired after %gs without every worker bound", key,
                     self.settings.timeout_seconds)
        self.metrics.gang_reservations.set(len(self.table))
        self.metrics.gang_reserved_gpus.set(sum(self.table.withheld().values()))

    def sweep(self, now: float) -> None:
        """End finished or timed-out reservations now (the metrics endpoint calls this, so the gauges stay true
        while no pod is being filtered)."""
        if len(self.table):
            with self._lock:
                self._sweep_locked(now)

    def filter_other(self, *, pod: PodRequest, views: Sequence[NodeView], now: float, margin: float = DEFAULT_MARGIN,
                     arrays: NodeArrays | None = None, goodput: GoodputAdmission | None = None) -> FilterResult:
        """The usual filter for a pod outside any gang, with GPUs reserved for gangs counted as taken.

        `arrays`, the same nodes as columns, takes the array path (the reserved GPUs taken out of the few rows that
        hold them); without it, the per-node path. `goodput` lets a checkpointing pod into a shorter window with
        enough expected goodput.
        """
        withheld = self.withheld(now)
        if arrays is not None:
            result = filter_arrays(pod=pod, nodes=arrays.withhold(withheld), now=now, margin=margin, goodput=goodput)
        else:
            result = filter_nodes(pod=pod, nodes=_withheld_views(views, withheld), now=now, margin=margin,
                                  goodput=goodput)
        return FilterResult(result.passed, _noting_withheld(result.failed, withheld)) if withheld else result

    def filter_other_columns(self, *, pod: PodRequest, arrays: NodeArrays, now: float, margin: float = DEFAULT_MARGIN,
                             goodput: GoodputAdmission | None = None) -> FilterColumns | None:
        """`filter_other` over `arrays` as columns (`decisions.filter_columns`), or None while GPUs are reserved for
        gangs: then reasons are noted node by node, which `filter_other` does."""
        if self.withheld(now):
            return None
        return filter_columns(pod=pod, nodes=arrays, now=now, margin=margin, goodput=goodput)

    def withheld(self, now: float) -> dict[str, int]:
        """GPUs reserved for gangs per node, after ending finished or timed-out reservations (empty: none)."""
        if not len(self.table):  # unlocked peek: an empty table (the usual case) costs nothing
            return {}
        with self._lock:
            self._sweep_locked(now)
            return self.table.withheld()

    def filter_worker(self, *, pod: PodRequest, gang: Gang, views: Sequence[NodeView], now: float,
                      margin: float = DEFAULT_MARGIN, goodput: Goodput | None = None) -> FilterResult:
        """One node (the worker's reserved place) or none: reserve places for the whole gang first if needed (for
        an elastic gang, at the widest width that fits, for its lowest-indexed waiting workers). `goodput`: the
        goodput rule for a job run as that many pods (None: off), as for a pod alone."""
        key = gang.key
        worker = pod.uid or pod.key
        names = [v.name for v in views]
        for _ in range(_PLAN_TRIES):
            with self._lock:
                self._sweep_locked(now)
                if self.table.get(key) is not None:
                    return self._admit_locked(key, gang, worker, names)
                withheld = self.table.withheld(exclude=key)
                version = self.table.version
            members = self.store.gang_members(key)
            earlier = frozenset(uid for uid, node in members.items() if node is not None and uid != worker)
            want = self._wanted(gang, earlier)
            if want is None:
                reason = f"gang {key}: all {gang.size} workers are bound already; this pod has no place in it"
                return FilterResult((), dict.fromkeys(names, reason))
            remaining, min_workers, bound = want
            joiner = self._joining(pod, gang, now) if bound else pod
            plan = plan_gang(pod=joiner, workers=remaining, nodes=_withheld_views(views, withheld), now=now,
                             margin=margin, min_workers=min_workers,
                             full_width=gang.size if gang.elastic else None, goodput=goodput,
                             revise=self._reviser(views, withheld, now))  # outside the lock
            if not plan.fits:
                return FilterResult((), _noting_withheld(plan.failed, withheld))
            joining = None if bound is None else admitted_workers(size=gang.size, joining=len(plan.places),
                                                                  bound=bound)
            with self._lock:
                if self.table.version != version or self.table.get(key) is not None:
                    continue  # another request changed the reservations meanwhile: plan again
                self.table.reserve(key, places=plan.places, gpus=pod.gpus, now=now, workers=joining, earlier=earlier)
                self.metrics.gang_events.labels(GANG_CREATED).inc()
                if joining is None:
                    log.info("gang %s: reserved %d place(s) for %d worker(s) (%d bound): %s", key,
                             len(plan.places), remaining, len(earlier), ", ".join(plan.places))
                else:
                    log.info("gang %s: reserved %d of %d workers (elastic, min %d; %d bound, runs at %d of %d): "
                             "workers %s on %s", key, len(plan.places), remaining, min_workers, len(earlier),
                             plan.width, gang.size, ", ".join(map(str, sorted(joining))), ", ".join(plan.places))
                self._sweep_locked(now)  # publish the gauges
                return self._admit_locked(key, gang, worker, names)
        reason = f"gang {key}: reservations kept changing while placing it; the scheduler will retry"
        return FilterResult((), dict.fromkeys(names, reason))

    def _reviser(self, views: Sequence[NodeView], withheld: Mapping[str, int], now: float) -> Revise | None:
        """How a gang's member is judged with the members before it held: in a pool, its room shrinks by theirs
        (`ClusterStore.view_with_held`); None when no node offered is pooled (members then do not meet)."""
        if not self.store.pooled_among(v.name for v in views):
            return None
        by_name = {v.name: v for v in views}

        def revise(name: str, held: Mapping[str, int]) -> NodeView:
            view = self.store.view_with_held(name, held, now=now) if held else None
            view = by_name[name] if view is None else view
            return withhold(view, withheld[name]) if name in withheld else view

        return revise

    def _joining(self, pod: PodRequest, gang: Gang, now: float) -> PodRequest:
        """A worker joining a running elastic gang, its prediction cut to the work the job has left: the annotation's
        is the whole run from the attempt's start. What is left is the job's own word once a worker carries its
        live progress (`LiveProgress.work_left`: from its last checkpoint), else a pessimistic guess from the time
        it has run (`work_left`)."""
        run = self.store.gang_started(gang.key)
        if run is None or pod.predicted is None:
            return pod
        live = self.store.gang_live(gang.key)
        if live is not None:
            return with_work_left(pod, max(MIN_WORK_LEFT, live.work_left()))
        started, gpu_type = run
        pred, exact = prediction_for(pod.predicted, gpu_type)
        if pred is None or not exact:
            return pod
        share = work_left(elapsed_seconds=now - started, p90_seconds=pred.p90, min_workers=gang.min_size,
                          full_width=gang.size, checkpoint_interval_seconds=pod.checkpoint_interval_seconds)
        if share < 1.0:
            log.debug("gang %s: worker %s joins with ~%.0f%% of the job's work left", gang.key, gang.worker,
                      100 * share)
        return with_work_left(pod, share)

    def _wanted(self, gang: Gang, earlier: frozenset[str]) -> tuple[int, int | None, frozenset[int] | None] | None:
        """What to plan for `gang` beside its bound workers `earlier`: how many workers, the fewest that may start
        (None: all, a rigid gang) and, for an elastic gang, the worker indexes bound; None when an elastic gang has
        no index left waiting."""
        if not gang.elastic:
            return max(1, gang.size - len(earlier)), None, None
        indexes = self.store.gang_worker_indexes(gang.key)
        bound = frozenset(i for uid in earlier if (i := indexes.get(uid)) is not None and 0 <= i < gang.size)
        if len(bound) >= gang.size:
            return None
        # Below its minimum the job does not run yet: enough must join to reach it. At or above it, one may join.
        return gang.size - len(bound), max(1, gang.min_size - len(bound)), bound

    def _admit_locked(self, key: GangKey, gang: Gang, worker: str, names: Sequence[str]) -> FilterResult:
        res = self.table.get(key)
        if res is not None and not res.admits(gang.worker):
            reason = (f"elastic gang {key} runs at {res.width} of {gang.size} workers now; worker {gang.worker} "
                      f"waits for a window to join at a checkpoint")
            return FilterResult((), dict.fromkeys(names, reason))
        node = self.table.admit(key, worker, candidates=set(names))
        if node is None:
            held = ", ".join(f"{n} x{c}" for n, c in res.places.items()) if res is not None else "none"
            reason = f"gang {key}: no reserved place left for this worker among the nodes offered (reserved: {held})"
            return FilterResult((), dict.fromkeys(names, reason))
        reason = f"gang {key}: this worker's reserved place is on {node}"
        return FilterResult((node,), {n: reason for n in names if n != node})
