"""batch/v1 Jobs that opt in to offpeak by a label on their pod template. Pure.

A team keeps its Job and adds, to the pod template, the label `offpeak.io/offline: "true"`,
`schedulerName: offpeak-scheduler`, and annotations saying what it trains:

    offpeak.io/model-source: torchvision:resnet50 | hf:gpt2 | graph-configmap:<name>   (optional)
    offpeak.io/batch-size: "64"        offpeak.io/steps: "10000"   (or offpeak.io/estimated-seconds)
    offpeak.io/gpu-types: "A100,H100"  offpeak.io/precision, offpeak.io/optimizer, offpeak.io/seq-len (optional)

and creates the Job with `spec.suspend: true`, so no pod starts before its runtime is predicted. The operator
predicts, writes what the extender places by (the prediction annotation, GPU-type node affinity) into the pod
template, which a suspended Job that never ran may change, and unsuspends it (a Job queued in Kueue, by the label
`kueue.x-k8s.io/queue-name`, Kueue unsuspends once offpeak's admission check finds a window). The Job's status
stays the Job controller's: what offpeak decided goes to annotations on the Job (`offpeak.io/state`,
`offpeak.io/prediction`) and to Events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from offpeak_core.jobkinds import BATCH_JOB, JobKind, template_opted_in
from offpeak_operator import names, podtemplate
from offpeak_operator.jobspec import GpuResolver, JobSpec, Problem, SpecError, parse_spec, validate
from offpeak_operator.podspecs import gpu_type_terms, predicted_annotation
from offpeak_operator.statemachine import parse_time

ANN_MODEL_SOURCE = "offpeak.io/model-source"
ANN_BATCH_SIZE = "offpeak.io/batch-size"
ANN_STEPS = "offpeak.io/steps"
ANN_ESTIMATED_SECONDS = "offpeak.io/estimated-seconds"
ANN_GPU_TYPES = "offpeak.io/gpu-types"
ANN_PRECISION = "offpeak.io/precision"
ANN_OPTIMIZER = "offpeak.io/optimizer"
ANN_SEQ_LEN = "offpeak.io/seq-len"
ANN_CHECKPOINTING_OPT = "offpeak.io/checkpointing"  # "true": the code resumes from its own checkpoints
# written by the operator on the Job itself
ANN_SAMPLE = "offpeak.io/sample"  # what became of the measured run as a predictor sample
ANN_STATE = "offpeak.io/state"  # Invalid | Predicted | Unpredicted | Finished, with a reason after ": "
ANN_PREDICTION = "offpeak.io/prediction"  # the prediction in human words
# The start-up the predictor adds when a job names none (offpeak_predictor.jobtime.DEFAULT_STARTUP_SECONDS; the
# operator talks to the predictor over HTTP only, so the figure is repeated here).
PREDICTOR_STARTUP_SECONDS = 60.0
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SOURCE_PREFIXES = {"torchvision": "torchvision", "hf": "hfConfig", "graph-configmap": "graphConfigMap"}


def _template(job: Mapping[str, Any], kind: JobKind = BATCH_JOB) -> Mapping[str, Any]:
    return kind.primary_template(job)


def opted_in(job: Mapping[str, Any], kind: JobKind = BATCH_JOB) -> bool:
    """Whether a workload asks for offpeak: its (a PyTorchJob's Master's) pod template carries
    `offpeak.io/offline: "true"`."""
    return template_opted_in(_template(job, kind))


def kueue_queue(job: Mapping[str, Any]) -> str | None:
    """The Kueue LocalQueue the Job is queued in (label `kueue.x-k8s.io/queue-name`), None when Kueue does not manage
    it. Kueue, not offpeak, unsuspends such a Job: once its admission checks (offpeak's window fit) are Ready."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    queue = labels.get(KUEUE_QUEUE_LABEL)
    return str(queue) if queue else None


def template_annotations(job: Mapping[str, Any], kind: JobKind = BATCH_JOB) -> Mapping[str, str]:
    return (_template(job, kind).get("metadata") or {}).get("annotations") or {}


def state(job: Mapping[str, Any]) -> str:
    """The operator's state word on the Job (`Predicted`, `Invalid`, ...), "" before it acted."""
    return str(((job.get("metadata") or {}).get("annotations") or {}).get(ANN_STATE, "")).split(":", 1)[0]


def _int_annotation(ann: Mapping[str, str], key: str) -> int | None:
    if key not in ann:
        return None
    try:
        return int(str(ann[key]).strip())
    except ValueError as e:
        raise SpecError(f"annotation {key} must be an integer, got {ann[key]!r}") from e


def pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    """GPUs the training container of a pod spec asks for (1 when it names none)."""
    containers = pod_spec.get("containers") or []
    index = podtemplate.train_container_index(containers) if containers else None
    if index is None:
        return 1
    resources = containers[index].get("resources") or {}
    raw = (resources.get("limits") or {}).get(names.GPU_RESOURCE) or (resources.get("requests") or {}).get(
        names.GPU_RESOURCE)
    try:
        return max(1, int(str(raw))) if raw is not None else 1
    except ValueError:
        return 1


def workload_spec(job: Mapping[str, Any], *, resolve_gpu: GpuResolver | None,
                  kind: JobKind = BATCH_JOB) -> tuple[JobSpec | None, list[Problem]]:
    """The TrainingJob-equivalent spec of an opted-in workload (for prediction), or why it cannot be predicted."""
    template = _template(job, kind)
    pod_spec = template.get("spec") or {}
    ann = template_annotations(job, kind)
    problems: list[Problem] = []
    for replica, each in kind.templates(job).items():
        if (each.get("spec") or {}).get("schedulerName") != names.SCHEDULER_NAME:
            where = f"spec.{kind.replica_specs}.{replica}.template" if replica else "spec.template"
            problems.append(Problem("InvalidSpec", f"set {where}.spec.schedulerName: {names.SCHEDULER_NAME} (a "
                                                   f"{kind.kind}'s scheduler cannot be changed after it is created)"))
    containers = pod_spec.get("containers") or []
    index = podtemplate.train_container_index(containers) if containers else None
    raw: dict[str, Any] = {
        "image": str(containers[index].get("image") or "") if index is not None else "",
        "gpuTypes": [t.strip() for t in str(ann.get(ANN_GPU_TYPES, "")).split(",") if t.strip()],
        "workers": kind.replicas(job),  # a Job's parallel pods are timed alone; a PyTorchJob's train together
        "gpusPerWorker": pod_gpus(pod_spec),
        "precision": ann.get(ANN_PRECISION, "fp32"),
        "optimizer": ann.get(ANN_OPTIMIZER, "adam"),
        "checkpointing": str(ann.get(ANN_CHECKPOINTING_OPT, "false")).lower() == "true",
    }  # fmt: skip
    try:
        for key, field in ((ANN_BATCH_SIZE, "batchSize"), (ANN_STEPS, "steps"), (ANN_SEQ_LEN, "seqLen")):
            value = _int_annotation(ann, key)
            if value is not None:
                raw[field] = value
        if ANN_ESTIMATED_SECONDS in ann:
            raw["estimatedSeconds"] = float(str(ann[ANN_ESTIMATED_SECONDS]))
            raw.setdefault("steps", 1)
        source = str(ann.get(ANN_MODEL_SOURCE, "")).strip()
        if source:
            prefix, _, source_name = source.partition(":")
            if prefix not in SOURCE_PREFIXES or not source_name:
                raise SpecError(f"annotation {ANN_MODEL_SOURCE} must be one of "
                                f"{', '.join(p + ':<name>' for p in SOURCE_PREFIXES)}, got {source!r}")
            source_field = SOURCE_PREFIXES[prefix]
            raw["modelSource"] = {source_field: {"name": source_name} if source_field == "graphConfigMap"
                                  else source_name}
        if "batchSize" not in raw:
            raise SpecError(f"annotation {ANN_BATCH_SIZE} is required (per-pod samples per step)")
        spec = parse_spec(raw)
    except (SpecError, ValueError) as e:
        return None, [*problems, Problem("InvalidSpec", str(e))]
    name = str((job.get("metadata") or {}).get("name") or "")
    problems += [p for p in validate(spec, job_name=name[:names.MAX_JOB_NAME], resolve_gpu=resolve_gpu)
                 if p.reason != "NameTooLong"]
    if spec.model_source.kind == "entrypoint":
        problems.append(Problem("InvalidModelSource", "an entry point needs a TrainingJob (its analysis pod)"))
    return (spec if not problems else None), problems


def admission_patch(job: Mapping[str, Any], spec: JobSpec, *, gpu_types: tuple[str, ...],
                    remaining: Mapping[str, Mapping[str, Any]], kind: JobKind = BATCH_JOB) -> dict[str, Any]:
    """Merge patch of the suspended workload's pod templates: the prediction the extender places by, offpeak's pod
    annotations, and node affinity for the allowed GPU types ANDed with each template's own."""
    annotations = {**predicted_annotation(remaining),
                   names.ANN_CHECKPOINTING: "true" if spec.checkpointing else "false",
                   names.ANN_PREEMPTIBLE: "true"}
    per_template = {}
    for replica, template in kind.templates(job).items():
        pod_spec = template.get("spec") or {}
        required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = podtemplate.merge_node_terms(required.get("nodeSelectorTerms") or [], gpu_type_terms(gpu_types))
        per_template[replica] = {
            "metadata": {"annotations": annotations, "labels": {names.LABEL_WORKLOAD: "offline"}},
            "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}},
        }
    return kind.templates_patch(per_template)


def state_patch(word: str, message: str, *, prediction: str | None = None,
                sample: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Merge patch of the Job's own annotations: what offpeak did with it."""
    annotations = {ANN_STATE: f"{word}: {message}"[:1000]}
    if prediction is not None:
        annotations[ANN_PREDICTION] = prediction
    if sample is not None:
        annotations[ANN_SAMPLE] = sample[:500]
    return {"metadata": {"annotations": annotations}}


def job_step_seconds(*, job_seconds: float, steps: int, startup_seconds: float | None) -> float | None:
    """A succeeded Job's mean step time from its whole run (a Job reports no progress): the run less the start-up
    the prediction assumed, over its steps. None when nothing is left to divide (the run was all start-up)."""
    startup = PREDICTOR_STARTUP_SECONDS if startup_seconds is None else startup_seconds
    if steps < 1 or not job_seconds > startup:
        return None
    return (job_seconds - startup) / steps


def ran_on(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The node a Job's work ran on: its succeeded pod's (the last one, by start), else any bound pod's."""
    def started(pod: Mapping[str, Any]) -> str:
        return str((pod.get("status") or {}).get("startTime") or "")

    bound = sorted((p for p in pods if (p.get("spec") or {}).get("nodeName")), key=started)
    done = [p for p in bound if (p.get("status") or {}).get("phase") == "Succeeded"]
    chosen = (done or bound)[-1:]
    return str(chosen[0]["spec"]["nodeName"]) if chosen else None


@dataclass(frozen=True, slots=True)
class Ending:
    """How an unsuspended Job ended, per its own status."""

    succeeded: bool
    seconds: float | None  # startTime -> completionTime (or the Failed condition's time)


def ending(job: Mapping[str, Any], kind: JobKind = BATCH_JOB) -> Ending | None:
    """The workload's ending from its conditions (Complete or Succeeded, or Failed, True), None while it runs."""
    status = job.get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("status") != "True" or c.get("type") not in (kind.done_condition, "Failed"):
            continue
        start = parse_time(status.get("startTime"))
        end: datetime | None = parse_time(status.get("completionTime") or c.get("lastTransitionTime"))
        seconds = (end - start).total_seconds() if start and end else None
        return Ending(succeeded=c["type"] == kind.done_condition, seconds=seconds)
    return None


def prediction_summary(remaining: Mapping[str, Mapping[str, Any]], *, source: str) -> str:
    """The prediction as the Job's `offpeak.io/prediction` annotation: compact JSON a person can read."""
    return json.dumps({"source": source, **{g: {"p50": v["p50"], "p90": v["p90"]} for g, v in remaining.items()}},
                      sort_keys=True, separators=(",", ":"))
