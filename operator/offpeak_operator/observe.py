"""Turn pod objects (Kubernetes JSON dicts) into the state machine's PodViews. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from offpeak.progress import Progress, parse
from offpeak_core.evictions import PLANNED_STOP_ANNOTATION

from offpeak_operator import names
from offpeak_operator.jobstate import Observed, PodView, parse_time

MAX_MESSAGE = 500  # characters of the extractor's message kept for a condition


def _container_times(pod: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    started: list[datetime] = []
    finished: list[datetime] = []
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        running = state.get("running") or {}
        terminated = state.get("terminated") or {}
        for value, bucket in ((running.get("startedAt"), started), (terminated.get("startedAt"), started),
                              (terminated.get("finishedAt"), finished)):
            t = parse_time(value)
            if t is not None:
                bucket.append(t)
    return (min(started) if started else None), (max(finished) if finished else None)


def _condition_time(pod: Mapping[str, Any], type_: str) -> datetime | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:MAX_MESSAGE] if lines else ""


def _extract_result(pod: Mapping[str, Any]) -> tuple[int | None, str]:
    """Exit status and last log line of the analysis pod's `extract` init container, once it has ended."""
    for cs in pod.get("status", {}).get("initContainerStatuses") or []:
        if cs.get("name") != names.EXTRACT_CONTAINER:
            continue
        terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"]), _last_line(terminated.get("message") or "")
    return None, ""


def _train_container(pod: Mapping[str, Any]) -> str:
    """The training container's name: `train`, or what the pod's template called it (annotated by the operator)."""
    return str((pod.get("metadata", {}).get("annotations") or {}).get(names.ANN_TRAIN_CONTAINER)
               or names.TRAIN_CONTAINER)


def _train_ended(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The training container's `terminated` state once it has ended (None while it runs or waits)."""
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        if cs.get("name") == _train_container(pod):
            return (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
    return None


def _unschedulable(pod: Mapping[str, Any]) -> str:
    """The scheduler's message on a pod it could not place (PodScheduled=False, reason Unschedulable)."""
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")[:MAX_MESSAGE]
    return ""


def pod_view(pod: Mapping[str, Any], *, node_gpu_types: Mapping[str, str]) -> PodView:
    """The PodView of one pod; `node_gpu_types` maps node name -> offpeak.io/gpu-type label."""
    meta = pod.get("metadata", {})
    status = pod.get("status", {}) or {}
    spec = pod.get("spec", {}) or {}
    phase = status.get("phase") or "Pending"
    started, finished = _container_times(pod)
    if started is None and phase in ("Running", "Succeeded", "Failed"):
        started = _condition_time(pod, "Ready") or parse_time(status.get("startTime"))
    node = spec.get("nodeName") or ""
    exit_code, exit_message = _extract_result(pod)
    ended = _train_ended(pod)  # its termination message carries the offpeak.progress report
    return PodView(
        name=meta.get("name", ""),
        phase=phase,
        node=node,
        gpu_type=node_gpu_types.get(node, "") if node else "",
        reason=status.get("reason") or "",
        message=status.get("message") or "",
        eviction_reason=(meta.get("annotations") or {}).get(names.ANN_EVICTION_REASON, ""),
        planned_stop=(meta.get("annotations") or {}).get(PLANNED_STOP_ANNOTATION) == "true",
        deleting=bool(meta.get("deletionTimestamp")),
        started_at=started,
        finished_at=finished,
        extract_exit_code=exit_code,
        extract_message=exit_message,
        progress=parse(ended.get("message")) if ended else None,
        unschedulable=_unschedulable(pod),
        deletion_deadline=parse_time(meta.get("deletionTimestamp")),
        terminated=ended is not None,
    )


def observe(pods: Iterable[Mapping[str, Any]], *, node_gpu_types: Mapping[str, str]) -> Observed:
    """Split a job's pods (listed by the offpeak.io/trainingjob label) into training pods and the analysis pod."""
    training: dict[str, PodView] = {}
    analysis: PodView | None = None
    for pod in pods:
        role = (pod.get("metadata", {}).get("labels") or {}).get(names.LABEL_ROLE)
        view = pod_view(pod, node_gpu_types=node_gpu_types)
        if role == "analysis":
            analysis = view
        elif role == "training":
            training[view.name] = view
    return Observed(training_pods=training, analysis_pod=analysis)
