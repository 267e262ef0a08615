"""What `offpeak explain` shows about one piece of offline work (a TrainingJob, or an opted-in batch Job or
PyTorchJob): where it stands, what it was predicted to need, and why it waits, node by node. Pure.

One `Explanation` is built per object; `lines` renders it for people and `record` for `-o json|yaml`, so the two
never say different things.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from offpeak_core.decisions import DEFAULT_MARGIN
from offpeak_core.humanize import duration
from offpeak_core.jobkinds import JobKind

from offpeak_operator import workloads
from offpeak_operator.userview import JobRow, annotated_predictions, job_row, workload_row

# "0/4 nodes are available: 1 gang of 2 ..., 2 node(s) didn't match Pod's node affinity/selector. preemption: ..."
_AVAILABLE = re.compile(r"^\s*(\d+/\d+ nodes are available):\s*(.*)$", re.S)


def scheduler_reasons(message: str) -> list[str]:
    """The scheduler's one-line summary split into its reasons (each `<count> <reason>`), preemption left out."""
    text = message.split(" preemption:", 1)[0].strip().rstrip(".")
    match = _AVAILABLE.match(text)
    if not match:
        return [text] if text else []
    head, rest = match.groups()
    parts = re.split(r",\s+(?=\d+\s)", rest)  # reasons start with their node count
    return [head, *(p.strip() for p in parts if p.strip())]


@dataclass(frozen=True, slots=True)
class GpuPrediction:
    """The prediction on one GPU type (memory and correction only where the predictor said them)."""

    gpu_type: str
    seconds: float | None
    p90_seconds: float | None
    fits_memory: bool | None = None
    peak_memory_gib: float | None = None
    gpu_memory_gib: float | None = None
    correction_samples: int | None = None
    correction_factor: float | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    phase: str
    node: str | None
    reasons: tuple[str, ...]  # the scheduler's, while it cannot place the pod


@dataclass(frozen=True, slots=True)
class Explanation:
    row: JobRow  # phase, reason, GPUs and the window, as `offpeak jobs` shows them
    name: str  # the object's own name (the row's carries a `job/` prefix for workloads)
    message: str
    attempts: int | None = None  # TrainingJob only
    max_attempts: int | None = None
    completed_steps: int | None = None
    total_steps: int | None = None
    prediction_source: str | None = None
    model_version: str | None = None
    predictions: tuple[GpuPrediction, ...] = ()
    checkpointing: bool = False
    measurements: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[PodView, ...] = ()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _pods(pods: Sequence[Mapping[str, Any]]) -> tuple[PodView, ...]:
    views = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        reasons = [r for c in status.get("conditions") or []
                   if c.get("type") == "PodScheduled" and c.get("status") == "False"
                   for r in scheduler_reasons(str(c.get("message") or ""))]  # fmt: skip
        views.append(PodView(name=str(meta.get("name") or ""), phase=str(status.get("phase") or "Pending"),
                             node=(pod.get("spec") or {}).get("nodeName"), reasons=tuple(reasons)))
    return tuple(views)


def explain_trainingjob(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *,
                        now: datetime) -> Explanation:  # fmt: skip
    """A TrainingJob with the training pods of its current attempt."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    prediction = status.get("prediction") or {}
    gpus = tuple(GpuPrediction(
        gpu_type=str(g.get("gpuType")), seconds=_number(g.get("jobSeconds")),
        p90_seconds=_number(g.get("jobSecondsP90")),
        fits_memory=g.get("fitsMemory") if isinstance(g.get("fitsMemory"), bool) else None,
        peak_memory_gib=_number(g.get("peakMemoryGiB")), gpu_memory_gib=_number(g.get("gpuMemoryGiB")),
        correction_samples=int(g["correctionSamples"]) if _number(g.get("correctionSamples")) else None,
        correction_factor=_number(g.get("correctionFactor")),
    ) for g in prediction.get("gpus") or [] if isinstance(g, Mapping))  # fmt: skip
    return Explanation(
        row=job_row(job, now=now), name=str(meta.get("name") or ""), message=str(status.get("message") or ""),
        attempts=int(status.get("attempts") or 0), max_attempts=int(spec.get("maxAttempts") or 3),
        completed_steps=int(status.get("completedSteps") or 0),
        total_steps=int(status["totalSteps"]) if _number(status.get("totalSteps")) is not None else None,
        prediction_source=prediction.get("source") if prediction else None,
        model_version=prediction.get("modelVersion") if prediction else None, predictions=gpus,
        checkpointing=bool(spec.get("checkpoint") or spec.get("checkpointing")),
        measurements=tuple((status.get("measurements") or [])[-3:]), pods=_pods(pods),
    )  # fmt: skip


def explain_workload(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, kind: JobKind, now: datetime,
                     workload: Mapping[str, Any] | None = None) -> Explanation:  # fmt: skip
    """An opted-in batch Job or PyTorchJob, from what offpeak wrote on it, its pods and its Kueue Workload."""
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    _, _, message = str(ann.get(workloads.ANN_STATE, "")).partition(": ")
    predicted = annotated_predictions(str(ann.get(workloads.ANN_PREDICTION, "")))
    source = None
    if predicted:  # then the annotation is a JSON object
        source = str(json.loads(ann[workloads.ANN_PREDICTION]).get("source") or "") or None
    checkpointing = str(workloads.template_annotations(obj, kind).get(workloads.ANN_CHECKPOINTING_OPT, ""))
    return Explanation(
        row=workload_row(obj, now=now, kind=kind, workload=workload), name=str(meta.get("name") or ""),
        message=message, prediction_source=source,
        predictions=tuple(GpuPrediction(gpu_type=g, seconds=p50, p90_seconds=p90)
                          for g, (p50, p90) in sorted(predicted.items(), key=lambda kv: kv[1])),
        checkpointing=checkpointing.lower() == "true", pods=_pods(pods),
    )  # fmt: skip


def _gpu_line(g: GpuPrediction) -> str:
    text = f"  {g.gpu_type}: {duration(g.seconds) if g.seconds is not None else '?'}"
    text += f" (p90 {duration(g.p90_seconds)})" if g.p90_seconds is not None else ""
    if g.fits_memory is False:
        text += f"; needs ~{g.peak_memory_gib} GiB: does not fit ({g.gpu_memory_gib} GiB)"
    if g.correction_samples:
        text += f"; corrected by {g.correction_samples} measured run(s) (x{g.correction_factor})"
    return text


def lines(e: Explanation) -> list[str]:
    """A readable account, one fact a line."""
    row = e.row
    out = [f"{row.kind} {row.namespace}/{e.name}: {row.phase}" + (f" ({row.reason})" if row.reason else ""),
           f"  {e.message or 'no message yet'}"]
    gpus = f"  GPUs: {row.gpus}"
    if e.attempts is not None:
        gpus += (f"; attempts {e.attempts}/{e.max_attempts}; steps {e.completed_steps}/{e.total_steps or '?'} done "
                 "before this attempt")
    out.append(gpus)
    if row.why and row.why != e.message:
        out.append(f"  {row.why}")
    if e.predictions:
        model = f", model {e.model_version or '-'}" if row.kind == "TrainingJob" else ""
        out.append(f"Prediction ({e.prediction_source or '?'}{model}):")
        out += [_gpu_line(g) for g in e.predictions]
    if row.needs_seconds is not None:
        out.append(f"Needs an idle window of {duration(row.needs_seconds)} (p90 of the work left + "
                   f"{DEFAULT_MARGIN:.0%} margin) on an allowed GPU type"
                   + ("; a checkpointing job may use shorter ones" if e.checkpointing else ""))
    for m in e.measurements:
        out.append(f"Measured (attempt {m.get('attempt')}, {m.get('gpuType')}): {m.get('stepSeconds')} s/step "
                   f"({m.get('source')})" + (f", {m['error']:+.0%} against the prediction"
                                             if isinstance(m.get("error"), int | float) else ""))
    for pod in e.pods:
        out.append(f"Pod {pod.name}: {pod.phase}" + (f" on {pod.node}" if pod.node else ""))
        out += [f"  {r}" for r in pod.reasons]
    if not e.pods and row.kind != "TrainingJob" and row.phase not in ("Succeeded", "Failed"):
        out.append("No pods yet")
    return out


def record(e: Explanation) -> dict[str, Any]:
    """The explanation as `offpeak explain -o json|yaml` prints it: every key always present, in this order."""
    return {
        **e.row.record(), "name": e.name, "message": e.message, "attempts": e.attempts,
        "maxAttempts": e.max_attempts, "completedSteps": e.completed_steps, "totalSteps": e.total_steps,
        "prediction": {"source": e.prediction_source, "modelVersion": e.model_version, "gpus": [
            {"gpuType": g.gpu_type, "seconds": g.seconds, "p90Seconds": g.p90_seconds, "fitsMemory": g.fits_memory,
             "peakMemoryGiB": g.peak_memory_gib, "gpuMemoryGiB": g.gpu_memory_gib,
             "correctionSamples": g.correction_samples, "correctionFactor": g.correction_factor}
            for g in e.predictions]},
        "checkpointing": e.checkpointing, "measurements": [dict(m) for m in e.measurements],
        "pods": [{"name": p.name, "phase": p.phase, "node": p.node, "reasons": list(p.reasons)} for p in e.pods],
    }  # fmt: skip
