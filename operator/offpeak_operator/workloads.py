"""batch/v1 Jobs that opt in to offpeak by a label on their pod template. Pure.

A team keeps its Job and adds, to the pod template, the label `offpeak.io/offline: "true"`,
`schedulerName: offpeak-scheduler`, and annotations saying what it trains:

    offpeak.io/model-source: torchvision:resnet50 | hf:gpt2 | graph-configmap:<name>
                             | entrypoint:<package.module:function>   (optional)
    offpeak.io/input-shape: "3,224,224"   (an entry point's float input per sample; or offpeak.io/seq-len)
    offpeak.io/batch-size: "64"        offpeak.io/steps: "10000"   (or offpeak.io/estimated-seconds)
    offpeak.io/gpu-types: "A100,H100"  offpeak.io/precision, offpeak.io/optimizer, offpeak.io/seq-len (optional)

and creates the Job with `spec.suspend: true`, so no pod starts before its runtime is predicted. The operator
predicts, writes what the extender places by (the prediction annotation, GPU-type node affinity) into the pod
template, which a suspended Job that never ran may change, and unsuspends it (a Job queued in Kueue, by the label
`kueue.x-k8s.io/queue-name`, Kueue unsuspends once offpeak's admission check finds a window). The Job's status
stays the Job controller's: what offpeak decided goes to annotations on the Job (`offpeak.io/state`,
`offpeak.io/prediction`) and to Events. A fallback given although the workload has a graph (the predictor was down)
is replaced while no pod is placed yet: the retries are kept on the workload (`offpeak.io/prediction-retries`,
`offpeak.io/next-prediction-time`) and the new prediction goes onto its pending pods.

An entry point is built in the Job's own image, as a TrainingJob's is: the operator runs the same analysis pod
(`<kind>-<name>-analysis`, the training container's image, env and working directory, CPU only) and keeps the graph
in the ConfigMap `<kind>-<name>-graph`; both are owned by the workload, so they go with it. The Job stays suspended
(state `Analyzing`) meanwhile. What became of the analysis is kept on the Job (`offpeak.io/analysis`), so a model
source that cannot be built is not run again until the annotation names another one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from offpeak_core.jobkinds import BATCH_JOB, JobKind, template_opted_in
from offpeak_core.kueue import QUEUE_LABEL
from offpeak_operator import names, podspecs, podtemplate
from offpeak_operator.conditions import rfc3339
from offpeak_operator.graphstore import EncodedGraph
from offpeak_operator.jobspec import GpuResolver, JobSpec, ModelSource, Problem, SpecError, parse_spec, validate
from offpeak_operator.podspecs import gpu_type_terms, predicted_annotation
from offpeak_operator.settings import AnalysisSettings
from offpeak_operator.jobstate import parse_time

ANN_MODEL_SOURCE = "offpeak.io/model-source"
ANN_BATCH_SIZE = "offpeak.io/batch-size"
ANN_STEPS = "offpeak.io/steps"
ANN_ESTIMATED_SECONDS = "offpeak.io/estimated-seconds"
ANN_GPU_TYPES = "offpeak.io/gpu-types"
ANN_PRECISION = "offpeak.io/precision"
ANN_OPTIMIZER = "offpeak.io/optimizer"
ANN_SEQ_LEN = "offpeak.io/seq-len"
ANN_INPUT_SHAPE = "offpeak.io/input-shape"  # an entry point's input per sample, e.g. "3,224,224"
ANN_CHECKPOINTING_OPT = "offpeak.io/checkpointing"  # "true": the code resumes from its own checkpoints
# written by the operator on the Job itself
ANN_SAMPLE = "offpeak.io/sample"  # what became of the measured run as a predictor sample
ANN_STATE = "offpeak.io/state"  # Invalid | Predicted | Unpredicted | Finished, with a reason after ": "
ANN_PREDICTION = "offpeak.io/prediction"  # the prediction in human words
ANN_ANALYSIS = "offpeak.io/analysis"  # what became of an entry point's analysis: {"source", "outcome", "message"}
# a fallback prediction of a workload with a model graph: failed re-predictions so far, and when to ask again
ANN_PREDICTION_RETRIES = "offpeak.io/prediction-retries"
ANN_NEXT_PREDICTION = "offpeak.io/next-prediction-time"  # RFC3339
# what a reconcile returns (the state annotation stays `Predicted`) for a workload whose fallback is still to be
# replaced by the predictor's answer: the resync polls it, as it polls one being analysed
AWAITING_PREDICTOR = "AwaitingPredictor"
# The start-up the predictor adds when a job names none (offpeak_predictor.jobtime.DEFAULT_STARTUP_SECONDS; the
# operator talks to the predictor over HTTP only, so the figure is repeated here).
PREDICTOR_STARTUP_SECONDS = 60.0
KUEUE_QUEUE_LABEL = QUEUE_LABEL  # offpeak_core.kueue: the LocalQueue a job is queued in
SOURCE_PREFIXES = {"torchvision": "torchvision", "hf": "hfConfig", "graph-configmap": "graphConfigMap",
                   "entrypoint": "entrypoint"}


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


def _shape_annotation(value: str) -> list[int]:
    try:
        shape = [int(part) for part in str(value).split(",")]
    except ValueError as e:
        raise SpecError(f"annotation {ANN_INPUT_SHAPE} must be comma-separated integers such as \"3,224,224\", "
                        f"got {value!r}") from e
    return shape


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
    train: Mapping[str, Any] = containers[index] if index is not None else {}
    raw: dict[str, Any] = {
        "image": str(train.get("image") or ""),
        # what an entry point's analysis pod runs the extractor with: the training container's own
        "env": [e for e in train.get("env") or [] if isinstance(e, Mapping) and e.get("name")],
        "workingDir": str(train.get("workingDir") or ""),
        "imagePullPolicy": str(train.get("imagePullPolicy") or "IfNotPresent"),
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
        if ANN_INPUT_SHAPE in ann:
            raw["inputShape"] = _shape_annotation(ann[ANN_INPUT_SHAPE])
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
        spec = replace(spec, image_pull_secrets=tuple(dict(s) for s in pod_spec.get("imagePullSecrets") or []
                                                      if isinstance(s, Mapping)))
    except (SpecError, ValueError) as e:
        return None, [*problems, Problem("InvalidSpec", str(e))]
    name = str((job.get("metadata") or {}).get("name") or "")
    problems += [p for p in validate(spec, job_name=name[:names.MAX_JOB_NAME], resolve_gpu=resolve_gpu)
                 if p.reason != "NameTooLong"]
    return (spec if not problems else None), problems


def admission_patch(job: Mapping[str, Any], spec: JobSpec, *, gpu_types: tuple[str, ...],
                    remaining: Mapping[str, Mapping[str, Any]], kind: JobKind = BATCH_JOB) -> dict[str, Any]:
    """Merge patch of the suspended workload's pod templates: the prediction the extender places by, offpeak's pod
    annotations, node affinity for the allowed GPU types ANDed with each template's own, and, for replicas that
    train together (a PyTorchJob's), the gang the extender places all or none."""
    annotations = {**predicted_annotation(remaining),
                   names.ANN_CHECKPOINTING: "true" if spec.checkpointing else "false",
                   names.ANN_PREEMPTIBLE: "true"}
    labels = {names.LABEL_WORKLOAD: "offline"}
    gang = kind.gang_size(job)
    if gang > 1:
        annotations[names.ANN_GANG_SIZE] = str(gang)
        labels[names.LABEL_GANG] = str(job["metadata"]["name"])
    per_template = {}
    for replica, template in kind.templates(job).items():
        pod_spec = template.get("spec") or {}
        required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = podtemplate.merge_node_terms(required.get("nodeSelectorTerms") or [], gpu_type_terms(gpu_types))
        per_template[replica] = {
            "metadata": {"annotations": annotations, "labels": labels},
            "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}},
        }
    return kind.templates_patch(per_template)


def state_patch(word: str, message: str, *, prediction: str | None = None, sample: str | None = None,
                more: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """Merge patch of the Job's own annotations: what offpeak did with it (and `more`, e.g. `retry_patch`'s, in the
    same write, so the state never says Predicted without them)."""
    annotations: dict[str, str | None] = {**(more or {}), ANN_STATE: f"{word}: {message}"[:1000]}
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


# ---- a fallback replaced once the predictor answers (as a TrainingJob's: statemachine.wants_reprediction) -------


def prediction_retries(job: Mapping[str, Any]) -> int:
    """Failed re-predictions of the workload's fallback so far (0 when none, or the annotation is unreadable)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(ANN_PREDICTION_RETRIES)
    try:
        return max(0, int(str(raw))) if raw is not None else 0
    except ValueError:
        return 0


def retry_annotations(*, tries: int, now: datetime, backoff: Callable[[int], float]) -> dict[str, str | None]:
    """The workload's retry annotations after `tries` failed re-predictions (0: the admission fell back although
    the workload has a graph): the predictor is asked again `backoff(max(1, tries))` seconds from now."""
    next_at = now + timedelta(seconds=backoff(max(1, tries)))
    return {ANN_PREDICTION_RETRIES: str(tries), ANN_NEXT_PREDICTION: rfc3339(next_at)}


def retry_cleared(job: Mapping[str, Any]) -> dict[str, str | None]:
    """Merge-patch nulls for the retry annotations the workload carries (none: nothing to clear)."""
    ann = (job.get("metadata") or {}).get("annotations") or {}
    return {key: None for key in (ANN_PREDICTION_RETRIES, ANN_NEXT_PREDICTION) if key in ann}


def polled_while(state: str | None) -> bool:
    """Whether the resync polls a workload left in this state: no event comes when an analysis pod hangs past its
    deadline, or when a fallback's retry time passes."""
    return state in ("Analyzing", AWAITING_PREDICTOR)


def awaiting_predictor(job: Mapping[str, Any]) -> bool:
    """Whether the workload's fallback is still to be replaced (it carries `offpeak.io/next-prediction-time`)."""
    return bool(((job.get("metadata") or {}).get("annotations") or {}).get(ANN_NEXT_PREDICTION))


def reprediction_due(job: Mapping[str, Any], *, now: datetime) -> bool:
    """Whether a workload admitted with a fallback (it carries `offpeak.io/next-prediction-time`) should ask the
    predictor again now. An unreadable time counts as due, so a hand-edited annotation cannot stop the retries."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(ANN_NEXT_PREDICTION)
    if not raw:
        return False
    try:
        next_at = parse_time(str(raw))
    except ValueError:
        return True
    return next_at is None or now >= next_at


def waiting_pods(pods: Iterable[Mapping[str, Any]]) -> list[str] | None:
    """The names of a workload's pods while none is bound to a node (all wait for a window, or none is made yet);
    None once one is: its placement is made, so the prediction stays, as a running TrainingJob's does."""
    waiting = []
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return None
        waiting.append(str(pod["metadata"]["name"]))
    return waiting


# ---- an entry point's analysis, in the workload's own image ----------------------------------------------------


def owned_name(job: Mapping[str, Any], kind: JobKind, suffix: str) -> str:
    """`<kind>-<name>-<suffix>`: apart from a TrainingJob's `<name>-<suffix>` and another kind's of the same name."""
    return f"{kind.kind.lower()}-{job['metadata']['name']}-{suffix}"


def owned_metadata(job: Mapping[str, Any], kind: JobKind, *, suffix: str, role: str) -> dict[str, Any]:
    """Metadata of an object offpeak makes for a workload: labelled with whose it is (the operator's pod trigger
    reads them) and owned by it, so it is deleted with it. The reference is not a controller's, so the Job
    controller (or training-operator) neither adopts nor releases it."""
    meta = job["metadata"]
    return {
        "name": owned_name(job, kind, suffix),
        "namespace": meta["namespace"],
        "labels": {names.LABEL_ROLE: role, names.LABEL_WORKLOAD_KIND: kind.kind,
                   names.LABEL_WORKLOAD_NAME: meta["name"]},
        "annotations": {},
        "ownerReferences": [{"apiVersion": kind.api_version, "kind": kind.kind, "name": meta["name"],
                             "uid": meta["uid"]}],
    }


def analysis_key(source: ModelSource) -> str:
    """What names an analysed source on the objects that record it (pod, graph ConfigMap, the Job's record): an
    entry point by itself, another source by kind and name."""
    return source.value if source.kind == "entrypoint" else f"{source.kind}:{source.value}"


def analysis_pod(job: Mapping[str, Any], spec: JobSpec, settings: AnalysisSettings,
                 kind: JobKind = BATCH_JOB) -> dict[str, Any]:
    """The TrainingJob's analysis pod (offpeak_operator.podspecs), named and owned for the workload, annotated with
    the source it analyses (the user may name another before it ends)."""
    metadata = owned_metadata(job, kind, suffix="analysis", role="analysis")
    metadata["annotations"][ANN_MODEL_SOURCE] = analysis_key(spec.model_source)
    return podspecs.analysis_pod(job, spec, settings, metadata=metadata)


def analysed_source(pod: Mapping[str, Any]) -> str:
    """The source (`analysis_key`) an analysis pod analyses, or whose graph a graph ConfigMap holds."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(ANN_MODEL_SOURCE, ""))


def graph_configmap(job: Mapping[str, Any], encoded: EncodedGraph, kind: JobKind = BATCH_JOB, *,
                    source: ModelSource) -> dict[str, Any]:
    """The workload's `<kind>-<name>-graph` ConfigMap, as a TrainingJob's `<name>-graph`; it names the source
    whose graph it holds (`ANN_MODEL_SOURCE`, `analysis_key`), so a graph of a source the workload no longer names
    is never taken for the current one's (`graph_is_of`)."""
    metadata = owned_metadata(job, kind, suffix="graph", role="graph")
    metadata["annotations"] = {ANN_MODEL_SOURCE: analysis_key(source)}
    return podspecs.graph_configmap(job, encoded, source=source.kind, metadata=metadata)


def graph_is_of(configmap: Mapping[str, Any], source: ModelSource) -> bool:
    """Whether a workload's graph ConfigMap holds the graph of this source."""
    return analysed_source(configmap) == analysis_key(source)


def analysis_record(job: Mapping[str, Any], source: str) -> Mapping[str, str] | None:
    """What became of the analysis of entry point `source` (the Job's `offpeak.io/analysis`), None when it has not
    ended, or ended for another source (the user changed the annotation: analyse again)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(ANN_ANALYSIS)
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("source") != source:
        return None
    return {k: str(v) for k, v in record.items()}


def analysis_patch(source: str, outcome: str, message: str = "") -> dict[str, Any]:
    """Merge patch of the Job's `offpeak.io/analysis`: `extracted`, `invalid` (the source cannot be built) or
    `failed` (predicted without the graph)."""
    record = {"source": source, "outcome": outcome, "message": message[:500]}
    return {"metadata": {"annotations": {ANN_ANALYSIS: json.dumps(record, sort_keys=True)}}}
