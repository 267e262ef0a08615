"""What `offpeak jobs` shows a user, from TrainingJob and opted-in workload objects. Pure.

A user asks two questions: how long will my job take and when does it run (the table), and why is it not running
(the explanation, `explainview`). Everything here turns plain dicts into rows; the CLI fetches and prints them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from offpeak_core.decisions import DEFAULT_MARGIN
from offpeak_core.humanize import duration
from offpeak_core.jobkinds import BATCH_JOB, JobKind

from offpeak_operator import workloads
from offpeak_operator.predictions import remaining_fraction
from offpeak_operator.jobstate import parse_time


@dataclass(frozen=True, slots=True)
class JobRow:
    """One line of `offpeak jobs`."""

    namespace: str
    name: str
    phase: str
    reason: str
    gpus: str  # "2x8 on H100, A100"
    predicted: str  # "1h12m (p90 1h31m)"
    actual: str
    error: str  # actual vs predicted, "+12%"
    needs: str  # the window it waits for: "a 1h45m window of 8 GPUs"
    age: str
    why: str  # why it waits (the scheduler's words), else ""
    # the same facts as numbers, for `-o json|yaml` (None where the text is empty)
    kind: str = "TrainingJob"
    predicted_seconds: float | None = None
    predicted_p90_seconds: float | None = None
    actual_seconds: float | None = None
    error_ratio: float | None = None  # actual / predicted - 1
    needs_seconds: float | None = None
    created: str | None = None  # metadata.creationTimestamp

    def record(self) -> dict[str, Any]:
        """The row as `offpeak jobs -o json|yaml` prints it: every key always present, in this order."""
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "phase": self.phase,
                "reason": self.reason, "gpus": self.gpus, "predictedSeconds": self.predicted_seconds,
                "predictedP90Seconds": self.predicted_p90_seconds, "actualSeconds": self.actual_seconds,
                "error": self.error_ratio, "needsWindowSeconds": self.needs_seconds, "created": self.created,
                "why": self.why}  # fmt: skip


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _remaining_gpu(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The prediction entry the job is timed by: its GPU type once placed, else the fastest allowed."""
    gpus = [g for g in (status.get("prediction") or {}).get("gpus") or [] if isinstance(g, Mapping)]
    chosen = status.get("gpuType")
    for g in gpus:
        if chosen and g.get("gpuType") == chosen:
            return g
    timed = [g for g in gpus if _seconds(g.get("jobSeconds")) is not None]
    return min(timed, key=lambda g: float(g["jobSeconds"])) if timed else None


def window_needed(status: Mapping[str, Any], *, margin: float = DEFAULT_MARGIN) -> float | None:
    """Seconds of idle window the extender asks for the remaining work: its p90 on the fastest allowed GPU type,
    with the margin (a checkpointing job may also use shorter windows)."""
    gpu = _remaining_gpu(status)
    if gpu is None:
        return None
    p50, p90 = _seconds(gpu.get("jobSeconds")), _seconds(gpu.get("jobSecondsP90"))
    share = remaining_fraction(
        total_steps=int((status.get("prediction") or {}).get("steps") or status.get("totalSteps") or 0),
        completed_steps=int(status.get("completedSteps") or 0))
    base = p90 if p90 is not None else p50
    return base * share * (1.0 + margin) if base is not None else None


def _gpu_summary(spec: Mapping[str, Any]) -> str:
    workers, per = int(spec.get("workers") or 1), int(spec.get("gpusPerWorker") or 1)
    types = ", ".join(str(t) for t in spec.get("gpuTypes") or [])
    shape = f"{workers}x{per}" if workers > 1 else str(per)
    return f"{shape} on {types}" if types else shape


def job_row(job: Mapping[str, Any], *, now: datetime) -> JobRow:
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    predicted_s = _seconds(status.get("predictedSeconds"))
    actual_s = _seconds(status.get("actualSeconds"))
    gpu = _remaining_gpu(status)
    p90 = _seconds(gpu.get("jobSecondsP90")) if gpu else None
    predicted = duration(predicted_s) if predicted_s is not None else ""
    if not predicted or status.get("phase") in ("Succeeded", "Failed"):
        p90 = None  # no p90 once it is over
    if p90 is not None:
        predicted += f" (p90 {duration(p90)})"
    ratio = actual_s / predicted_s - 1 if predicted_s and actual_s is not None else None
    needs_s = None
    needs = ""
    phase = str(status.get("phase") or "Pending")
    if phase in ("Predicted", "Waiting", "Requeued"):
        needs_s = window_needed(status)
        per = int(spec.get("gpusPerWorker") or 1)
        workers = int(spec.get("workers") or 1)
        if needs_s is not None:
            needs = f"{duration(needs_s)} x {per} GPU(s)" + (f" on {workers} node(s)" if workers > 1 else "")
    created = parse_time(meta.get("creationTimestamp"))
    why = str(status.get("message") or "") if status.get("reason") == "Unschedulable" else ""
    return JobRow(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), phase=phase,
        reason=str(status.get("reason") or ""), gpus=_gpu_summary(spec), predicted=predicted,
        actual=duration(actual_s) if actual_s is not None else "", error=f"{ratio:+.0%}" if ratio is not None else "",
        needs=needs, age=duration((now - created).total_seconds()) if created else "", why=why,
        predicted_seconds=predicted_s, predicted_p90_seconds=p90, actual_seconds=actual_s, error_ratio=ratio,
        needs_seconds=needs_s, created=meta.get("creationTimestamp"),
    )  # fmt: skip


def annotated_predictions(prediction: str) -> dict[str, tuple[float, float]]:
    """(p50, p90) seconds per GPU type of a workload's `offpeak.io/prediction` annotation ({} when unreadable)."""
    try:
        summary = json.loads(prediction) if prediction else {}
        return {str(k): (float(v["p50"]), float(v["p90"])) for k, v in summary.items() if k != "source"}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def _fastest(prediction: str) -> tuple[float, float] | None:
    """(p50, p90) seconds on the fastest GPU type of a workload's `offpeak.io/prediction` annotation."""
    pairs = annotated_predictions(prediction).values()
    return min(pairs) if pairs else None


def _active_pods(status: Mapping[str, Any], kind: JobKind) -> int:
    """Pods of the workload running now: a Job's `status.active`, a PyTorchJob's replicas' `active` summed."""
    if kind.replica_specs is None:
        return int(status.get("active") or 0)
    return sum(int((r or {}).get("active") or 0) for r in (status.get("replicaStatuses") or {}).values())


def _pending_check(workload: Mapping[str, Any] | None) -> str:
    """The first Kueue admission check not passed yet on the Job's workload, in words ("" when none)."""
    for check in ((workload or {}).get("status") or {}).get("admissionChecks") or ():
        if check.get("state") != "Ready":
            return f"Kueue check {check.get('name')} {check.get('state')}: {check.get('message') or ''}".rstrip(": ")
    return ""


def workload_row(job: Mapping[str, Any], *, now: datetime, kind: JobKind = BATCH_JOB,
                 workload: Mapping[str, Any] | None = None, margin: float = DEFAULT_MARGIN) -> JobRow:
    """One line of `offpeak jobs` for an opted-in workload (named `job/<name>`, `pytorchjob/<name>`), from what
    offpeak wrote on it (`offpeak.io/state`, `offpeak.io/prediction`), its own status and, when Kueue queues it,
    its Workload."""
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    ann = meta.get("annotations") or {}
    word, _, message = str(ann.get(workloads.ANN_STATE, "")).partition(": ")
    end = workloads.ending(job, kind)
    queued = workloads.kueue_queue(job)
    check = _pending_check(workload)
    if end is not None:
        phase = "Succeeded" if end.succeeded else "Failed"
    elif word in ("Invalid", "Analyzing"):  # Analyzing: its entry point's analysis pod runs
        phase = word
    elif kind.suspended(job):
        phase = "Queued" if queued else ("Predicted" if word == "Predicted" else "Pending")
    else:
        phase = "Running" if _active_pods(status, kind) else "Waiting"
    fastest = _fastest(str(ann.get(workloads.ANN_PREDICTION, "")))
    predicted = duration(fastest[0]) if fastest else ""
    p90 = fastest[1] if fastest and end is None else None
    if p90 is not None:
        predicted += f" (p90 {duration(p90)})"
    actual_s = end.seconds if end is not None else None
    ratio = actual_s / fastest[0] - 1 if fastest and fastest[0] and actual_s is not None else None
    # a Job's parallel pods, a PyTorchJob's replicas (all of its templates' GPUs counted as the Master's)
    pods = int((job.get("spec") or {}).get("parallelism") or 1) if kind.replica_specs is None else kind.replicas(job)
    per = workloads.pod_gpus(kind.primary_template(job).get("spec") or {})
    types = str(workloads.template_annotations(job, kind).get(workloads.ANN_GPU_TYPES, ""))
    gpus = (f"{pods}x{per}" if pods > 1 else str(per)) + (f" on {types}" if types else "")
    needs = ""
    needs_s = fastest[1] * (1 + margin) if fastest and phase in ("Queued", "Predicted", "Waiting") else None
    if needs_s is not None:
        needs = f"{duration(needs_s)} x {per} GPU(s)" + (f" for {pods} pods" if pods > 1 else "")
    created = parse_time(meta.get("creationTimestamp"))
    why = check if phase == "Queued" else (message if phase in ("Invalid", "Analyzing") else "")
    return JobRow(
        namespace=str(meta.get("namespace") or ""), name=f"{kind.kind.lower()}/{meta.get('name') or ''}",
        phase=phase, reason=f"Kueue {queued}" if queued and phase == "Queued" else word, gpus=gpus,
        predicted=predicted, actual=duration(actual_s) if actual_s is not None else "",
        error=f"{ratio:+.0%}" if ratio is not None else "", needs=needs,
        age=duration((now - created).total_seconds()) if created else "", why=why, kind=kind.kind,
        predicted_seconds=fastest[0] if fastest else None, predicted_p90_seconds=p90, actual_seconds=actual_s,
        error_ratio=ratio, needs_seconds=needs_s, created=meta.get("creationTimestamp"),
    )  # fmt: skip
