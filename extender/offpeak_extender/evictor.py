"""Eviction controller: turns online demand into evictions of offline pods (plan is pure, actions are adapters).

Each tick reads the shared `ClusterStore` (kept current by the informer) and, optionally, measured online GPUs
per node from Prometheus; plans with `evictions.plan_*`; then for each victim annotates the pod with the reason,
posts an Event on its TrainingJob and evicts it through the Eviction API with the configured grace period.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from offpeak_core.evictions import (PLANNED_STOP_ANNOTATION, REASON_YIELD, EvictionPlan, NodeState,
                                   plan_for_pending, plan_for_pressure, plan_yields)
from offpeak_extender.metrics import EvictorMetrics
from offpeak_core.goodput import DEFAULT_STARTUP_SECONDS
from offpeak_core.model import NodeView, OfflinePod
from offpeak_core.yielding import DEFAULT_MARGIN_SECONDS, YieldSettings
from offpeak_extender.store import ClusterStore

log = logging.getLogger(__name__)

EVICTION_REASON_ANNOTATION = "offpeak.io/eviction-reason"
TRAININGJOB_API_VERSION = "offpeak.io/v1alpha1"


@dataclass(frozen=True)
class EvictorSettings:
    grace_seconds: int = 30  # termination grace period given to evicted training pods (time to checkpoint)
    interval_seconds: float = 2.0  # how often demand is checked
    forget_seconds: float = 120.0  # how long an evicted pod counts as "releasing" if the watch has not caught up
    prometheus_url: str | None = None  # measured online GPUs per node (node agent); None: pods only
    # Planned stops (opt-in, `offpeak evictor --yield-at-checkpoints`): a checkpointing pod whose next checkpoint
    # would come after its window's forecast end stops at its checkpoint instead of being evicted later
    # (`offpeak_core.yielding`). Checkpoints are taken to fall at start + `startup_seconds` + k x its
    # `offpeak.io/checkpoint-interval-seconds`. Such a pod is annotated `offpeak.io/planned-stop`, and the operator
    # does not count its attempt against `maxAttempts`.
    yield_at_checkpoints: bool = False
    # Measured online use lags the pods (agent sampling, scrape interval): an offline pod younger than this is not
    # evicted by a measurement, which may predate it (online pods that need GPUs still evict at once).
    pressure_settle_seconds: float = 60.0
    startup_seconds: float = DEFAULT_STARTUP_SECONDS  # as the goodput rule's default start-up
    yield_margin_seconds: float = DEFAULT_MARGIN_SECONDS


class EvictionActions(Protocol):
    def annotate(self, pod: OfflinePod, reason: str, planned: bool = False) -> None: ...
    def event(self, pod: OfflinePod, plan: EvictionPlan) -> None: ...
    def evict(self, pod: OfflinePod, grace_seconds: int) -> None: ...


class Evictor:
    def __init__(self, *, store: ClusterStore, actions: EvictionActions, metrics: EvictorMetrics,
                 settings: EvictorSettings, clock: Callable[[], float] = time.time,
                 measured_online: Callable[[], Mapping[str, float]] | None = None) -> None:
        self.store = store
        self.actions = actions
        self.metrics = metrics
        self.settings = settings
        self.clock = clock
        self.measured_online = measured_online
        self._evicted: dict[str, tuple[str, int, float]] = {}  # uid -> (node, gpus, when)
        self.stop_event = threading.Event()

    def _states(self, now: float) -> dict[str, NodeState]:
        self._evicted = {u: e for u, e in self._evicted.items() if now - e[2] < self.settings.forget_seconds}
        states: dict[str, NodeState] = {}
        for name in self.store.node_names():
            info = self.store.node(name)
            if info is None or info.gpus_total <= 0:
                continue
            pods = self.store.pods_on(name)
            live_uids = {p.uid for p in pods}
            releasing = sum(p.gpus for p in pods if p.deleting)
            releasing += sum(g for u, (n, g, _) in self._evicted.items()
                             if n == name and u in live_uids and not any(p.uid == u and p.deleting for p in pods))
            offline = tuple(p for p in self.store.offline_pods_on(name, now=now,
                                                                  startup_seconds=self.settings.startup_seconds)
                            if p.uid not in self._evicted)
            view = NodeView(name, info.gpu_type, info.gpus_total, self.store.free_gpus(name))
            states[name] = NodeState(view=view, offline_pods=offline, releasing_gpus=releasing)
        return states

    def plan(self, now: float) -> list[EvictionPlan]:
        """Plans for this tick; node states are updated as plans are made so two demands do not share victims."""
        states = self._states(now)
        plans: list[EvictionPlan] = []
        for pod in self.store.pending_pods("online"):
            if not pod.unschedulable:
                continue
            candidates = [n for n in states if (info := self.store.node(n)) is not None and pod.may_run_on(info)]
            plan = plan_for_pending(pod_key=f"{pod.namespace}/{pod.name}", gpus=pod.gpus, candidates=candidates,
                                    nodes=states)
            if plan is not None:
                plans.append(plan)
                states[plan.node] = _after(states[plan.node], plan)
        if self.settings.yield_at_checkpoints:
            plans.extend(self._yields(states, now))
        measured = self._measured()
        for name, value in measured.items():
            state = states.get(name)
            if state is None:
                continue
            online, _, other = self.store.usage(name)
            plan = plan_for_pressure(state=state, measured_online=value, requested_online=online, other_gpus=other,
                                     settle_seconds=self.settings.pressure_settle_seconds)
            if plan is not None:
                plans.append(plan)
                states[name] = _after(state, plan)
        return plans

    def _yields(self, states: dict[str, NodeState], now: float) -> list[EvictionPlan]:
        """Planned stops on every node whose offline pods' window is forecast to end (`plan_yields`); checked every
        tick, so a pod counts as at its checkpoint for a tick and a half after it."""
        settings = YieldSettings(margin_seconds=self.settings.yield_margin_seconds,
                                 at_checkpoint_seconds=1.5 * self.settings.interval_seconds)
        plans = []
        for name, state in states.items():
            if not any(p.checkpointing and p.checkpoint_interval_seconds for p in state.offline_pods):
                continue
            stops: list[EvictionPlan] = []  # one a pod: each is judged against its own window
            for pod, held in _layered(state.offline_pods):
                if not (pod.checkpointing and pod.checkpoint_interval_seconds):
                    continue
                end, known = self.store.held_window(name, held=held, now=now)
                stop = plan_yields(node=name, offline_pods=[pod], now=now, window_end=end, end_known=known,
                                   startup_seconds=self.settings.startup_seconds, settings=settings)
                if stop is not None:
                    stops.append(stop)
            if stops:
                plan = EvictionPlan(node=name, victims=tuple(v for s in stops for v in s.victims), reason=REASON_YIELD,
                                    message=stops[0].message)
                plans.append(plan)
                states[name] = _after(state, plan)
        return plans

    def _measured(self) -> Mapping[str, float]:
        if self.measured_online is None:
            return {}
        try:
            return self.measured_online()
        except Exception as e:  # noqa: BLE001 - metrics outage must not stop pod-driven evictions
            log.warning("measured online demand unavailable: %s", e)
            return {}

    def execute(self, plan: EvictionPlan, now: float) -> None:
        for pod in plan.victims:
            planned = plan.reason == REASON_YIELD
            for step, call in (("annotate", lambda p=pod: self.actions.annotate(p, plan.message, planned)),
                               ("event", lambda p=pod: self.actions.event(p, plan))):
                try:  # best effort: telling people why must not stop online work from getting its GPUs
                    call()
                except Exception as e:  # noqa: BLE001
                    log.warning("%s for %s failed: %s", step, pod.key, e)
            try:
                self.actions.evict(pod, _grace(plan, pod, self.settings.grace_seconds))
            except Exception as e:  # noqa: BLE001 - one failed eviction must not stop the others
                log.warning("evicting %s failed: %s", pod.key, e)
                self.metrics.failures.labels(plan.reason).inc()
                continue
            self._evicted[pod.uid] = (plan.node, pod.gpus, now)
            self.metrics.evictions.labels(plan.reason).inc()
            self.metrics.gpu_seconds_lost.inc(pod.work_at_risk_seconds)
            log.info("evicted %s: %s", pod.key, plan.message)

    def tick(self) -> list[EvictionPlan]:
        now = self.clock()
        plans = self.plan(now)
        for plan in plans:
            self.execute(plan, now)
        return plans

    def run(self) -> None:
        while not self.stop_event.is_set():
            if self.store.synced:
                try:
                    self.tick()
                except Exception:  # noqa: BLE001 - keep the controller alive; the next tick retries
                    log.exception("eviction tick failed")
            self.stop_event.wait(self.settings.interval_seconds)


def _grace(plan: EvictionPlan, pod: OfflinePod, grace_seconds: int) -> int:
    """The grace period a victim gets: the evictor's, or for a planned stop of a pod that saves as it stops, at least
    its save time (the stop was planned that long before online work needs the GPUs, so nothing waits for it)."""
    if plan.reason == REASON_YIELD and pod.save_on_stop_seconds is not None:
        return max(grace_seconds, math.ceil(pod.save_on_stop_seconds))
    return grace_seconds


def _layered(pods: tuple[OfflinePod, ...]) -> list[tuple[OfflinePod, int]]:
    """Each offline pod with the GPUs it and the pods started before it hold: the window a pod runs in is the one
    for those GPUs (a pod started later was admitted into what was left, so it must not make an earlier one stop)."""
    out, held = [], 0
    for pod in sorted(pods, key=lambda p: (-p.elapsed_seconds, p.key)):  # earliest start first
        held += pod.gpus
        out.append((pod, held))
    return out


def _after(state: NodeState, plan: EvictionPlan) -> NodeState:
    gone = {p.uid for p in plan.victims}
    freed = sum(p.gpus for p in plan.victims)
    return NodeState(view=state.view, offline_pods=tuple(p for p in state.offline_pods if p.uid not in gone),
                     releasing_gpus=state.releasing_gpus + freed)


class KubeEvictionActions:
    """Kubernetes side of an eviction: annotation, Event on the TrainingJob, policy/v1 Eviction."""

    def __init__(self, api_client: Any, component: str = "offpeak-evictor") -> None:
        from kubernetes import client

        self.client = client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.component = component

    def annotate(self, pod: OfflinePod, reason: str, planned: bool = False) -> None:
        annotations = {EVICTION_REASON_ANNOTATION: reason}
        if planned:
            annotations[PLANNED_STOP_ANNOTATION] = "true"
        body = {"metadata": {"annotations": annotations}}
        self.core.patch_namespaced_pod(pod.name, pod.namespace, body)

    def event(self, pod: OfflinePod, plan: EvictionPlan) -> None:
        if not pod.trainingjob:
            return
        c = self.client
        uid = None
        try:
            tj: Any = self.custom.get_namespaced_custom_object(
                "offpeak.io", "v1alpha1", pod.namespace, "trainingjobs", pod.trainingjob)
            uid = (tj.get("metadata") or {}).get("uid")
        except c.exceptions.ApiException as e:
            log.info("TrainingJob %s/%s not readable (%s); event without uid", pod.namespace, pod.trainingjob,
                     e.status)
        now = c.CoreV1Event(
            metadata=c.V1ObjectMeta(generate_name=f"{pod.trainingjob}.evicted.", namespace=pod.namespace),
            involved_object=c.V1ObjectReference(api_version=TRAININGJOB_API_VERSION, kind="TrainingJob",
                                                name=pod.trainingjob, namespace=pod.namespace, uid=uid),
            reason="OfflinePodYielded" if plan.reason == REASON_YIELD else "OfflinePodEvicted",
            message=f"pod {pod.name}: {plan.message}",
            type="Normal" if plan.reason == REASON_YIELD else "Warning",
            source=c.V1EventSource(component=self.component),
            first_timestamp=_utcnow(),
            last_timestamp=_utcnow(),
            count=1,
        )
        self.core.create_namespaced_event(pod.namespace, now)

    def evict(self, pod: OfflinePod, grace_seconds: int) -> None:
        c = self.client
        body = c.V1Eviction(metadata=c.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
                            delete_options=c.V1DeleteOptions(grace_period_seconds=grace_seconds))
        self.core.create_namespaced_pod_eviction(pod.name, pod.namespace, body)


def _utcnow() -> Any:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def prometheus_measured_online(url: str, timeout_seconds: float = 5.0) -> Callable[[], dict[str, float]]:
    """Instant query of measured online GPUs per node (exported by the node agent)."""

    def fetch() -> dict[str, float]:
        q = urllib.parse.urlencode({"query": "max by (node) (offpeak_node_online_gpus)"})
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query?{q}", timeout=timeout_seconds) as r:  # noqa: S310
                payload = json.load(r)
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as e:
            raise RuntimeError(f"Prometheus at {url}: {e}") from e
        out: dict[str, float] = {}
        for series in (payload.get("data") or {}).get("result") or []:
            node = (series.get("metric") or {}).get("node")
            if node:
                out[node] = float(series["value"][1])
        return out

    return fetch
