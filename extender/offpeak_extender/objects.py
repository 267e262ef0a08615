"""Kubernetes objects as the store keeps them: a node's GPUs, type, labels and busy hours, a pod's GPUs, workload,
node, phase, gang and prediction, an OnlineDemand's announcement. Pure parsing (no I/O, no lock), beside `wire.py`
(the scheduler's requests): the informer's events go through here and nowhere else."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from offpeak_core.announcements import Announcement, AnnouncementError, announcement_from_object
from offpeak_core.gangs import GangKey
from offpeak_core.gpuproducts import node_gpu_type
from offpeak_core.livepace import LIVE_PROGRESS_ANNOTATION, LiveProgress
from offpeak_core.model import Prediction
from offpeak_core.schedules import BusySchedule, parse_busy_hours
from offpeak_core.timeparse import parse_timestamp
from offpeak_core.yielding import checkpoint_interval, save_on_stop_seconds
from offpeak_extender.wire import (
    BUSY_HOURS_ANNOTATION,
    CHECKPOINTING_ANNOTATION,
    GPU_RESOURCE,
    PREDICTED_ANNOTATION,
    TRAININGJOB_LABEL,
    WORKLOAD_LABEL,
    WireError,
    parse_gang,
    parse_predictions,
    parse_quantity,
    pod_gpus,
)

log = logging.getLogger(__name__)

ACTIVE_PHASES = frozenset({"Pending", "Running", "Unknown", ""})


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
    live: LiveProgress | None = None  # an offline pod's measured pace, once its attempt reported a steady one

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


def node_name(obj: Mapping[str, Any]) -> str:
    """A Node object's name (what a delete event is known by)."""
    return str((obj.get("metadata") or {}).get("name", ""))


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
        live=_live(ann) if labels.get(WORKLOAD_LABEL) == "offline" else None,
    )


def _live(annotations: Mapping[str, Any]) -> LiveProgress | None:
    """The pod's live-progress annotation, parsed; None when absent or unreadable (then its prediction times it,
    as before it reported: the operator writes this annotation, so an unreadable one is logged, not refused)."""
    text = annotations.get(LIVE_PROGRESS_ANNOTATION)
    if text is None:
        return None
    try:
        return LiveProgress.decode(str(text))
    except ValueError as e:
        log.warning("ignoring a pod's %s", e)
        return None


def _predicted(annotations: Mapping[str, Any]) -> Mapping[str, Prediction] | None:
    """The pod's prediction annotation, parsed; None when absent or unreadable (the filter said so already)."""
    text = annotations.get(PREDICTED_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_predictions(str(text))
    except WireError:
        return None


def announcement_or_none(obj: Mapping[str, Any]) -> Announcement | None:
    """An OnlineDemand object's announcement; None (and a warning naming the object and field) when unusable."""
    try:
        return announcement_from_object(obj)
    except AnnouncementError as e:
        log.warning("OnlineDemand %s; ignored", e)
        return None
