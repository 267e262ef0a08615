"""The TrainingJob state machine: (spec, status, observed pods, now) -> (status changes, actions). Pure.

Phases: Pending -> Analyzing -> Predicted -> Waiting -> Running -> Succeeded | Failed, with Requeued after an
eviction or a failed attempt (back to Waiting after a backoff, until maxAttempts). The reconciler performs the
actions (Kubernetes, predictor) and merges their results; every decision here is re-derivable from the stored
status and the observed pods, so a restarted operator resumes without duplicates.

Its vocabulary (phases, pod views, actions) is in jobstate.py and the status the reconciler writes after its own
actions in statuses.py. Over 500 lines because every phase's branch reads the same status and pods; the branches
are small functions beside `decide`, which is the table of contents.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from offpeak_core.gangs import width_scale
from offpeak_core.livepace import LIVE_PROGRESS_ANNOTATION

from offpeak_operator import admission
from offpeak_operator import conditions as cond
from offpeak_operator import names
from offpeak_operator.conditions import rfc3339
from offpeak_operator.jobspec import JobSpec, ModelSource, Problem
from offpeak_operator.liveprogress import live_update
from offpeak_operator.measure import Measurement, checkpointed_steps, measure_attempt, with_measurement
from offpeak_operator.predictions import Prediction, remaining_seconds
from offpeak_operator.settings import AnalysisSettings, OperatorSettings
# The vocabulary and the status builders live beside this module; they are re-exported here, where the reconciler
# and the tests meet the state machine as one namespace (`statemachine as sm`).
from offpeak_operator.jobstate import (
    REQUEUE_EVICTED, REQUEUE_POD_FAILED, REQUEUE_YIELDED, REQUEUE_SUSPENDED, REQUEUE_REASONS, NOT_COUNTED,
    USER_ERROR_EXIT, INVALID_MODEL_SOURCE, EVICTION_REASONS, Phase, TERMINAL, QUEUED_PHASES, PodView, Observed,
    CreateAnalysisPod, DeleteAnalysisPod, CollectGraph, LoadUserGraph, ExtractInProcess, Predict, Repredict,
    CreateTrainingPods, DeletePods, StopPods, AnnotatePods, CreateWorkload, ReleaseWorkload, FinishWorkload,
    ReportSample, RecordOutcome, RecordRequeue, EmitEvent, Action, Decision, parse_time,
)
from offpeak_operator.statuses import (
    copied_conditions, display_fields, wants_reprediction, reprediction_failed_status, reprediction_status,
    prediction_status, graph_status, rejected_status, API_ERROR_REASONS, api_error_status, api_error_condition,
    api_accepted,
)


def graph_failure_reason(*, exit_code: int | None, default: str) -> str:
    """Condition reason of a failed extraction: InvalidModelSource when the extractor said the input is wrong."""
    return INVALID_MODEL_SOURCE if exit_code == USER_ERROR_EXIT else default


def analysed_in_pod(source: ModelSource, analysis: AnalysisSettings) -> bool:
    """Whether a source's graph comes from an analysis pod: an entry point always (only the user's image can import
    it); a torchvision/HF source when an extract image is set (the operator's own image has no torch), else the
    operator extracts it in its own process."""
    if source.kind == "entrypoint":
        return True
    return source.in_process and bool(analysis.extract_image)


def expected_pods(job_name: str, *, attempt: int, workers: int) -> tuple[str, ...]:
    return tuple(names.training_pod_name(job_name, attempt=attempt, worker=w) for w in range(workers))


# ---- the decision --------------------------------------------------------------------------------------


def decide(*, job_name: str, spec: JobSpec | None, problems: Sequence[Problem], status: Mapping[str, Any],
           observed: Observed, now: datetime, settings: OperatorSettings, queue: str | None = None) -> Decision:
    """The next status change and actions for one TrainingJob; `queue`: the Kueue LocalQueue it is queued in."""
    phase = Phase(status.get("phase") or Phase.PENDING)
    if phase in TERMINAL:
        if admission.needs_finish(queue=queue, workload=observed.workload):
            return Decision(actions=[FinishWorkload(succeeded=phase == Phase.SUCCEEDED,
                                                    message=str(status.get("message") or phase))])
        return Decision()
    if spec is None or problems:
        return _invalid(status, problems, now)
    if phase == Phase.PENDING:
        return _start(spec, status, now, settings)
    if phase == Phase.ANALYZING:
        return _analyzing(spec, status, observed, now, settings)
    if phase == Phase.REQUEUED:
        next_at = parse_time(status.get("nextAttemptTime"))
        if next_at is not None and now < next_at:
            return Decision()
    if phase in (Phase.PREDICTED, Phase.REQUEUED):
        gate = admission.launch_gate(suspend=spec.suspend, queue=queue, workload=observed.workload)
        decision = _held(status, gate, now) if gate is not None else _launch(job_name, spec, status, now)
    else:
        decision = _stop(spec, observed, queue) or _track(job_name, spec, status, observed, now, settings)
    where = admission.placement(observed.workload if queue is not None else None)
    decision.actions = [replace(a, placement=where) if isinstance(a, CreateTrainingPods) else a
                        for a in decision.actions]
    if decision.phase not in (None, Phase.RUNNING) and status.get("etaSeconds") is not None:
        decision.status["etaSeconds"] = None  # the ETA of a running attempt: gone once it stops
    return decision


def _held(status: Mapping[str, Any], gate: admission.Gate, now: datetime) -> Decision:
    """The next attempt may not start yet (suspended, or Kueue has not admitted its Workload): say why, once, and
    do what the gate asks (create the Workload, give an evicted one's quota back)."""
    actions: list[Action] = []
    if gate.create_workload:
        actions.append(CreateWorkload())
    if gate.release_quota:
        actions.append(ReleaseWorkload())
    if status.get("message") == gate.message and status.get("reason") == gate.reason:
        return Decision(actions=actions)
    conds = cond.set_condition(copied_conditions(status), type=cond.SUSPENDED, ok=True, reason=gate.reason,
                               message=gate.message, now=now)
    return Decision(status={"message": gate.message, "reason": gate.reason, "conditions": conds},
                    actions=[*actions, EmitEvent("Normal", gate.reason, gate.message)])


def _stop(spec: JobSpec, observed: Observed, queue: str | None) -> Decision | None:
    """The attempt's live pods, when they must stop (the job was suspended, or Kueue took its admission back): mark
    them, and `_track` requeues the attempt without counting it once they are evicted."""
    reason = admission.stop_reason(suspend=spec.suspend, queue=queue, workload=observed.workload)
    if reason is None:
        return None
    live = tuple(v.name for v in observed.training_pods.values()
                 if v.phase in ("Pending", "Running") and not v.deleting and not v.eviction_reason)
    return Decision(actions=[StopPods(live, reason)]) if live else None


def _invalid(status: Mapping[str, Any], problems: Sequence[Problem], now: datetime) -> Decision:
    problems = list(problems) or [Problem("InvalidSpec", "spec could not be read")]
    message = "; ".join(p.message for p in problems)
    conds = cond.set_condition(copied_conditions(status), type=cond.VALID, ok=False, reason=problems[0].reason,
                               message=message, now=now)
    conds = cond.finished(conds, succeeded=False, reason=problems[0].reason, message=f"invalid TrainingJob: {message}",
                          now=now)
    return Decision(
        status={"phase": Phase.FAILED, "message": f"invalid TrainingJob: {message}", "conditions": conds,
                "finishTime": rfc3339(now), "reason": problems[0].reason},
        actions=[EmitEvent("Warning", p.reason, p.message) for p in problems],
    )


def _start(spec: JobSpec, status: Mapping[str, Any], now: datetime, settings: OperatorSettings) -> Decision:
    conds = cond.set_condition(copied_conditions(status), type=cond.VALID, ok=True, reason="Valid",
                               message="spec accepted", now=now)
    out: dict[str, Any] = {"phase": Phase.ANALYZING, "gpus": spec.total_gpus, "totalSteps": spec.total_steps,
                           "attempts": 0, "completedSteps": 0, "analysisStartTime": rfc3339(now)}
    source = spec.model_source
    actions: list[Action]
    if source.kind == "entrypoint":
        actions = [CreateAnalysisPod()]
        out["message"] = f"extracting the model graph from {source.value} in an analysis pod"
    elif analysed_in_pod(source, settings.analysis):
        actions = [CreateAnalysisPod()]
        out["message"] = (f"extracting the model graph of {source.kind} {source.value} in an analysis pod "
                          f"({settings.analysis.extract_image})")
    elif source.kind == "graphConfigMap":
        actions = [LoadUserGraph()]
        out["message"] = f"reading the model graph from ConfigMap {source.value}"
    elif source.in_process:
        actions = [ExtractInProcess()]
        out["message"] = f"extracting the model graph of {source.kind} {source.value}"
    else:
        conds = cond.set_condition(conds, type=cond.GRAPH_READY, ok=False, reason="NoModelSource",
                                   message="no spec.modelSource: runtime cannot be predicted from the model", now=now)
        actions = [Predict()]
        out["message"] = "no model source: estimating the runtime without a graph"
    out["conditions"] = conds
    return Decision(status=out, actions=[EmitEvent("Normal", "Accepted", out["message"]), *actions])


def _analyzing(spec: JobSpec, status: Mapping[str, Any], observed: Observed, now: datetime,
               settings: OperatorSettings) -> Decision:
    graph = cond.get_condition(status.get("conditions"), cond.GRAPH_READY) or {}
    if graph.get("status") == "False" and graph.get("reason") == INVALID_MODEL_SOURCE:
        return _invalid_source(status, str(graph.get("message") or "the model source cannot be built"), now)
    graph_ready = cond.is_true(status.get("conditions"), cond.GRAPH_READY)
    if graph_ready is not None:  # decided either way: predict (with or without the graph)
        return Decision(actions=[Predict()])
    source = spec.model_source
    if source.kind == "graphConfigMap":
        return Decision(actions=[LoadUserGraph()])
    if source.in_process and not analysed_in_pod(source, settings.analysis):
        return Decision(actions=[ExtractInProcess()])
    started = parse_time(status.get("analysisStartTime")) or now
    judged = judge_analysis(observed.analysis_pod, started=started, now=now, settings=settings,
                            source_value=source.value)
    match judged.outcome:
        case "invalid":
            return _invalid_source(status, judged.message, now)
        case "collect":
            return Decision(actions=[CollectGraph()])
        case "failed":
            decision = _graph_failed(status, judged.reason, judged.message, now)
            if judged.delete_pod:
                decision.actions.insert(0, DeleteAnalysisPod())
            return decision
        case "create":
            return Decision(actions=[CreateAnalysisPod()])  # gone (or never made): make it again, by the same name
    return Decision()


@dataclass(frozen=True, slots=True)
class AnalysisJudgement:
    """What the analysis pod's state means: `create` it (again), `wait`, `collect` its graph, the model source is
    `invalid` (the user's error, stop), or the analysis `failed` (predict without the graph; `delete_pod` when it
    is still there, hung)."""

    outcome: Literal["create", "wait", "collect", "invalid", "failed"]
    reason: str = ""
    message: str = ""
    delete_pod: bool = False


def judge_analysis(pod: PodView | None, *, started: datetime, now: datetime, settings: OperatorSettings,
                   source_value: str) -> AnalysisJudgement:
    """Judge an analysis pod started at `started` (TrainingJobs and opted-in workloads alike)."""
    timeout = settings.analysis.timeout_seconds
    deadline = started + timedelta(seconds=timeout + settings.analysis.grace_seconds)
    if pod is not None and pod.extract_exit_code == USER_ERROR_EXIT:
        return AnalysisJudgement("invalid", INVALID_MODEL_SOURCE,
                                 pod.extract_message or f"the extractor rejected {source_value}")
    if pod is not None and pod.phase == "Succeeded":
        return AnalysisJudgement("collect")
    if pod is not None and pod.phase == "Failed":
        timed_out = pod.reason == "DeadlineExceeded"
        if timed_out:
            message = f"analysis pod ran past {timeout}s"
        elif pod.extract_exit_code:
            message = f"extractor exited {pod.extract_exit_code}: {pod.extract_message or 'see its logs'}"
        else:
            message = f"analysis pod failed: {pod.reason or 'see its logs'} {pod.message}".strip()
        return AnalysisJudgement("failed", "AnalysisTimeout" if timed_out else "AnalysisFailed", message)
    if now >= deadline:
        return AnalysisJudgement("failed", "AnalysisTimeout", f"no graph after {timeout}s of analysis",
                                 delete_pod=True)
    if pod is None:
        return AnalysisJudgement("create")
    return AnalysisJudgement("wait")


def _invalid_source(status: Mapping[str, Any], detail: str, now: datetime) -> Decision:
    """The model source cannot be built: the training would fail the same way in the same image, so stop here."""
    message = f"invalid model source: {detail}"
    conds = cond.set_condition(copied_conditions(status), type=cond.GRAPH_READY, ok=False, reason=INVALID_MODEL_SOURCE,
                               message=detail, now=now)
    conds = cond.finished(conds, succeeded=False, reason=INVALID_MODEL_SOURCE, message=message, now=now)
    return Decision(
        status={"phase": Phase.FAILED, "message": message, "conditions": conds, "finishTime": rfc3339(now),
                "reason": INVALID_MODEL_SOURCE},
        actions=[EmitEvent("Warning", INVALID_MODEL_SOURCE, message)],
    )


def _graph_failed(status: Mapping[str, Any], reason: str, message: str, now: datetime) -> Decision:
    conds = cond.set_condition(copied_conditions(status), type=cond.GRAPH_READY, ok=False, reason=reason,
                               message=message, now=now)
    return Decision(status={"conditions": conds, "message": message},
                    actions=[EmitEvent("Warning", reason, message), Predict()])


def _launch(job_name: str, spec: JobSpec, status: Mapping[str, Any], now: datetime) -> Decision:
    attempt = int(status.get("attempts") or 0) + 1
    completed = int(status.get("completedSteps") or 0)
    pods = expected_pods(job_name, attempt=attempt, workers=spec.workers)
    resumed = f", resuming after step {completed}" if completed else ""
    counted = attempt - int(status.get("plannedStops") or 0)
    elastic = f" (elastic: it starts on {spec.min_workers} or more)" if spec.elastic else ""
    message = (f"attempt {counted}/{spec.max_attempts}: {len(pods)} training pod(s) waiting for an idle GPU "
               f"window{elastic}{resumed}")
    conds = cond.set_condition(copied_conditions(status), type=cond.SCHEDULED, ok=False, reason="WaitingForWindow",
                               message=message, now=now)
    if cond.is_true(conds, cond.SUSPENDED):  # resumed, or admitted by Kueue
        conds = cond.set_condition(conds, type=cond.SUSPENDED, ok=False, reason="Resumed", message=message, now=now)
    return Decision(
        status={"phase": Phase.WAITING, "attempts": attempt, "pods": list(pods), "message": message,
                "conditions": conds, "nextAttemptTime": None, "node": None, "gpuType": None,
                "reason": "WaitingForWindow"},
        actions=[CreateTrainingPods(attempt=attempt, completed_steps=completed)],
    )


def _track(job_name: str, spec: JobSpec, status: Mapping[str, Any], observed: Observed, now: datetime,
           settings: OperatorSettings) -> Decision:
    attempt = int(status.get("attempts") or 1)
    expected = expected_pods(job_name, attempt=attempt, workers=spec.workers)
    views = [observed.training_pods.get(n) for n in expected]
    prediction = Prediction.from_status(status.get("prediction"))
    gone = [n for n, v in zip(expected, views, strict=True) if v is None]
    present = [v for v in views if v is not None]
    evicted = [v for v in present if v.evicted]
    failed = [v for v in present if not v.evicted and v.phase == "Failed"]
    if evicted and spec.checkpointing:
        marked = tuple(p.name for p in evicted if _marked_only(p))
        if marked:  # the evictor has marked them but not deleted them yet: delete them, so they save a checkpoint
            return Decision(actions=[DeletePods(marked)])
        if _writing_checkpoint(evicted, now, settings):
            return Decision()  # the evicted pods are saving a checkpoint: read their final report before requeueing
    if (gone or evicted) and not failed:
        going_on = _narrow(spec, status, views)
        if going_on is not None:
            return going_on
    if gone or evicted:
        if evicted and all(v.eviction_reason in admission.GATE_REASONS for v in evicted):
            what = f"pod {evicted[0].name} stopped: {evicted[0].eviction_reason}"
            return _requeue(spec, status, present, prediction, REQUEUE_SUSPENDED, what, now, settings)
        if evicted and not gone and spec.checkpointing and all(v.planned_stop for v in evicted):
            what = f"pod {evicted[0].name} stopped before its window ended ({evicted[0].eviction_reason})"
            return _requeue(spec, status, present, prediction, REQUEUE_YIELDED, what, now, settings)
        if evicted:
            what = f"pod {evicted[0].name} evicted ({evicted[0].eviction_reason or evicted[0].reason or 'deleted'})"
        else:
            what = f"pod {gone[0]} disappeared"
        return _requeue(spec, status, present, prediction, REQUEUE_EVICTED, what, now, settings)
    if failed:
        what = f"pod {failed[0].name} failed: {failed[0].reason or 'see its logs'} {failed[0].message}".strip()
        return _requeue(spec, status, present, prediction, REQUEUE_POD_FAILED, what, now, settings)
    if spec.elastic:
        return _track_elastic(spec, status, present, prediction, now, settings)
    if all(v.phase == "Succeeded" for v in present):
        return _succeeded(spec, status, present, prediction, now)
    running = [v for v in present if v.phase in ("Running", "Succeeded")]
    if running and len(running) == len(present):
        return _with_live(_running(spec, status, present, prediction, now), spec, status, present, prediction, now,
                          settings)
    if all(v.phase == "Pending" for v in present):
        if wants_reprediction(status, now=now):
            return Decision(actions=[Repredict()])
        return _why_waiting(spec, status, present, now)
    return Decision()


# Workers that start this close together ran the attempt together; one that started later joined at a checkpoint.
JOINED_LATE_SECONDS = 120.0
NARROWED = "Narrowed"  # status.reason and event: an elastic attempt lost workers and goes on with the others


def _track_elastic(spec: JobSpec, status: Mapping[str, Any], present: Sequence[PodView],
                   prediction: Prediction | None, now: datetime, settings: OperatorSettings) -> Decision:
    """An elastic attempt (no worker failed or evicted): it runs once at least `minWorkers` workers run and the
    others still wait, and it succeeds when the workers that ran together succeeded; workers that never started
    (or started only after the others finished) are deleted then, so none waits for a rendezvous that is over."""
    started = [v for v in present if v.phase != "Pending"]
    done = [v for v in started if v.phase == "Succeeded"]
    if done:
        ended = min((v.finished_at for v in done if v.finished_at is not None), default=now)
        late = [v for v in started if v.phase == "Running" and v.started_at is not None and v.started_at >= ended]
        ran = [v for v in started if v not in late]
        if not all(v.phase == "Succeeded" for v in ran):
            return Decision()  # the others of its group are finishing
        decision = _succeeded(spec, status, ran, prediction, now)
        leftover = tuple(v.name for v in present if v not in ran and not v.deleting)
        return Decision(status=decision.status, actions=[*decision.actions, DeletePods(leftover)] if leftover
                        else decision.actions)
    running = [v for v in started if v.phase == "Running"]
    if len(running) >= (spec.min_workers or spec.workers) and len(running) == len(started):
        return _with_live(_running(spec, status, running, prediction, now), spec, status, running, prediction, now,
                          settings)
    if not started:
        if wants_reprediction(status, now=now):
            return Decision(actions=[Repredict()])
        return _why_waiting(spec, status, present, now)
    return Decision()


def _narrow(spec: JobSpec, status: Mapping[str, Any], views: Sequence[PodView | None]) -> Decision | None:
    """An elastic attempt that lost workers (evicted, stopped at a checkpoint or deleted) but still runs worker 0
    and at least `minWorkers` goes on narrower instead of being requeued: torchrun's agents on the workers left
    restart them from the last checkpoint at the new width (`PET_MAX_RESTARTS`), and each lost worker's pod is made
    again once the old one is gone, to rejoin at a checkpoint when the extender finds it a window, as a late joiner
    does. None when it cannot (not elastic, worker 0 lost, too few left running): the attempt is requeued."""
    lead = views[0] if views else None
    if not spec.elastic or lead is None or lead.evicted or lead.phase != "Running":
        return None
    staying = [v for v in views if v is not None and not v.evicted and v.phase == "Running"]
    if len(staying) < (spec.min_workers or spec.workers):
        return None
    lost = [(i, v) for i, v in enumerate(views) if v is None or v.evicted]
    attempt = int(status.get("attempts") or 1)
    actions: list[Action] = []
    stale = tuple(v.name for _, v in lost if v is not None and not v.deleting)
    if stale:  # evicted but still there (the kubelet's Failed pod): its name is needed for the new pod
        actions.append(DeletePods(stale))
    if any(v is None for _, v in lost):  # creating is idempotent by name: only the missing workers are made
        actions.append(CreateTrainingPods(attempt=attempt, completed_steps=int(status.get("completedSteps") or 0)))
    width = f"going on with {len(staying)} of {spec.workers} workers"
    if status.get("reason") == NARROWED and width in str(status.get("message") or ""):
        return Decision(actions=actions)  # said already (the lost pod was seen leaving, and now it is gone)
    first_index, first = lost[0]
    why = ("is gone" if first is None else "stopped before its window ended" if first.planned_stop else
           f"was evicted ({first.eviction_reason or first.reason or 'deleted'})")
    counted = attempt - int(status.get("plannedStops") or 0)
    message = (f"attempt {counted}/{spec.max_attempts}: worker {first_index} {why}; {width} from the last "
               f"checkpoint; worker(s) {', '.join(str(i) for i, _ in lost)} will rejoin at a checkpoint")
    return Decision(status={"message": message, "narrowedAttempt": attempt, "reason": NARROWED},
                    actions=[*actions, EmitEvent("Normal", NARROWED, message)])


def narrowed(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView]) -> bool:
    """Whether an elastic attempt ran on fewer than all its workers for some of its time: its step time is not the
    full-width one the prediction is for, so it neither teaches the predictor nor counts as predicted vs actual.
    Seen running narrower (`status.narrowedAttempt`), or told by its workers' start times where it was not seen."""
    if not spec.elastic:
        return False
    if status.get("narrowedAttempt") == int(status.get("attempts") or 1):
        return True
    starts = [p.started_at for p in pods if p.started_at is not None]
    if len(starts) < spec.workers:
        return True
    return (max(starts) - min(starts)).total_seconds() > JOINED_LATE_SECONDS


def _marked_only(pod: PodView) -> bool:
    """Whether a pod carries the eviction annotation but is still running undisturbed: deleting it (with its grace
    period) rather than requeueing at once lets its training code write a checkpoint and report how far it got."""
    return bool(pod.eviction_reason) and not pod.deleting and pod.phase == "Running" and not pod.terminated


def _writing_checkpoint(evicted: Sequence[PodView], now: datetime, settings: OperatorSettings) -> bool:
    """Whether an evicted checkpointing pod is still within its grace period without having ended: its training
    code is writing a checkpoint, and the report it leaves on exit says how far it got."""
    slack = timedelta(seconds=settings.requeue.termination_slack_seconds)
    return any(p.deleting and not p.terminated and p.phase == "Running" and p.deletion_deadline is not None
               and now < p.deletion_deadline + slack for p in evicted)


def _why_waiting(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView], now: datetime) -> Decision:
    """Say in the job why its pods wait: the scheduler's words, which carry the extender's per-node reasons
    (no window long enough, earliest window, memory); nothing when they say nothing new."""
    said = next((p.unschedulable for p in pods if p.unschedulable), "")
    if not said:
        return Decision()
    counted = int(status.get("attempts") or 1) - int(status.get("plannedStops") or 0)
    message = f"attempt {counted}/{spec.max_attempts}: waiting: {said}"[:1000]
    if status.get("message") == message:
        return Decision()
    conds = cond.set_condition(copied_conditions(status), type=cond.SCHEDULED, ok=False, reason="Unschedulable",
                               message=message, now=now)
    return Decision(status={"message": message, "conditions": conds, "reason": "Unschedulable"})


def _attempt_start(status: Mapping[str, Any], pods: Sequence[PodView], now: datetime) -> datetime:
    starts = [p.started_at for p in pods if p.started_at is not None]
    return min(starts) if starts else (parse_time(status.get("attemptStartTime")) or now)


def _remaining_p50(prediction: Prediction | None, gpu_type: str, completed: int) -> float | None:
    if prediction is None:
        return None
    remaining = remaining_seconds(prediction, completed_steps=completed)
    gp = prediction.for_gpu(gpu_type)
    return remaining[gp.gpu_type]["p50"] if gp is not None else None


def _running(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView], prediction: Prediction | None,
             now: datetime) -> Decision:
    lead = pods[0]
    width = len(pods)
    if (status.get("phase") == Phase.RUNNING and status.get("node") == lead.node
            and (not spec.elastic or status.get("runningWorkers") == width)):
        return Decision()
    start = _attempt_start(status, pods, now)
    completed = int(status.get("completedSteps") or 0)
    nodes = sorted({p.node for p in pods if p.node})
    message = f"running on {', '.join(nodes) or 'unknown node'} ({lead.gpu_type or 'unknown GPU type'})"
    if spec.elastic:
        message = f"{message}, {width} of {spec.workers} workers"
    out: dict[str, Any] = {
        "phase": Phase.RUNNING, "node": lead.node or None, "gpuType": lead.gpu_type or None,
        "attemptStartTime": rfc3339(start), "message": message, "reason": "Running",
        "conditions": cond.set_condition(copied_conditions(status), type=cond.SCHEDULED, ok=True, reason="Running",
                                         message=message, now=now),
    }  # fmt: skip
    if not status.get("startTime"):
        out["startTime"] = rfc3339(start)
    predicted = _remaining_p50(prediction, lead.gpu_type, completed)
    if spec.elastic:
        out["runningWorkers"] = width
        if width < spec.workers:
            out["narrowedAttempt"] = int(status.get("attempts") or 1)
        if predicted is not None:  # the same samples on fewer workers, as the extender places it
            predicted *= width_scale(width=width, full_width=spec.workers)
    if predicted is not None:
        out["predictedSeconds"] = predicted
    return Decision(status=out, actions=[EmitEvent("Normal", "Running", message)])


def _with_live(decision: Decision, spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView],
               prediction: Prediction | None, now: datetime, settings: OperatorSettings) -> Decision:
    """A running attempt's decision with what its latest live report says (liveprogress.py): the measured pace
    and ETA in the status, an Event when the pace is beyond the p90 margin, an early sample once it is steady."""
    merged = {**status, **decision.status}
    running = [p for p in pods if p.phase == "Running"]
    update = live_update(status=merged, attempt=int(merged.get("attempts") or 1),
                         gpu_type=pods[0].gpu_type or str(merged.get("gpuType") or ""), prediction=prediction,
                         total_steps=spec.total_steps, attempt_start=_attempt_start(status, pods, now),
                         narrowed=narrowed(spec, status, pods), settings=settings.live,
                         workers=len(running) or 1)
    if update is None:
        return decision
    decision.status.update(update.status)
    if update.event is not None:
        decision.actions.append(EmitEvent(*update.event))
    if update.sample is not None:
        decision.actions.append(ReportSample.of(update.sample, live=True))
    names = tuple(p.name for p in running if not p.deleting)
    if update.progress is not None and names:
        decision.actions.append(AnnotatePods(names, {LIVE_PROGRESS_ANNOTATION: update.progress.encode()}))
    return decision


def _measure(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView], prediction: Prediction | None,
             *, wall_seconds: float | None, completed: bool) -> Measurement | None:
    lead = pods[0] if pods else None
    gpu_type = (lead.gpu_type if lead else "") or status.get("gpuType") or ""
    if not gpu_type:
        return None
    done_before = int(status.get("completedSteps") or 0)
    return measure_attempt(gpu_type=gpu_type, wall_seconds=wall_seconds, reports=[p.progress for p in pods],
                           attempt=int(status.get("attempts") or 1), steps=max(1, spec.total_steps - done_before),
                           completed=completed, prediction=prediction, spec_startup=spec.startup_seconds)


def _first_pace_eta(status: Mapping[str, Any], start: datetime) -> float | None:
    """Seconds from the attempt's start to the end its first steady measured pace expected; None without one."""
    live = status.get("livePace") or {}
    first = parse_time(live.get("firstFinishTime")) if live.get("attempt") == status.get("attempts") else None
    return None if first is None else max(0.0, (first - start).total_seconds())


def _succeeded(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView], prediction: Prediction | None,
               now: datetime) -> Decision:
    start = _attempt_start(status, pods, now)
    finishes = [p.finished_at for p in pods if p.finished_at is not None]
    finish = max(finishes) if finishes else now
    actual = max(0.0, (finish - start).total_seconds())
    completed = int(status.get("completedSteps") or 0)
    lead = pods[0]
    gpu_type = lead.gpu_type or status.get("gpuType") or ""
    narrow = narrowed(spec, status, pods)
    measured = None if narrow else _measure(spec, status, pods, prediction, wall_seconds=actual, completed=True)
    message = f"succeeded in {actual:.0f}s on {gpu_type or 'an unknown GPU type'}"
    if narrow:
        message += (f" (elastic: on fewer than its {spec.workers} workers for some of it, so not compared with the "
                    "full-width prediction)")
    if measured is not None:
        message += f", {measured.step_seconds:.4g}s per step"
        if measured.error is not None:
            message += f" ({measured.error:+.0%} against the prediction)"
    out: dict[str, Any] = {
        "phase": Phase.SUCCEEDED, "finishTime": rfc3339(finish), "actualSeconds": round(actual, 3),
        "message": message, "node": lead.node or status.get("node"), "gpuType": gpu_type or None,
        "conditions": cond.finished(copied_conditions(status), succeeded=True, reason="Succeeded", message=message,
                                    now=now),
        "reason": "Succeeded",
    }  # fmt: skip
    if not status.get("startTime"):
        out["startTime"] = rfc3339(start)
    actions: list[Action] = [EmitEvent("Normal", "Succeeded", message)]
    predicted = None if narrow else _remaining_p50(prediction, gpu_type, completed)
    if predicted is not None:
        out["predictedSeconds"] = predicted
        actions.append(RecordOutcome(gpu_type=gpu_type, predicted_seconds=predicted, actual_seconds=actual,
                                     pace_eta_seconds=_first_pace_eta(status, start)))
    if measured is not None:
        out["actualStepSeconds"] = round(measured.step_seconds, 9)
        out["measurements"] = with_measurement(status.get("measurements"), measured)
        actions.append(ReportSample.of(measured))
    return Decision(status=out, actions=actions)


def steps_done(pods: Sequence[PodView], prediction: Prediction | None, *, status: Mapping[str, Any],
               now: datetime, width_share: float = 1.0) -> int:
    """Steps an interrupted attempt got through, estimated pessimistically.

    The attempt's share of its predicted p90 run time (whole-job figures, which include fixed start-up costs a
    restart pays again), times the steps it had to do; never the per-step time alone, which would credit a job
    dominated by start-up with work it never did. `width_share`: the share of its workers an elastic attempt ran
    on (its steps took 1 / share as long as predicted).
    """
    if prediction is None or prediction.steps <= 0:
        return 0
    starts = [p.started_at for p in pods if p.started_at is not None and p.phase != "Pending"]
    start = min(starts) if starts else parse_time(status.get("attemptStartTime"))
    if start is None:
        return 0
    ends = [p.finished_at for p in pods if p.finished_at is not None]
    end = min(ends) if ends else now
    gpu = prediction.for_gpu(pods[0].gpu_type if pods else None) or prediction.fastest()
    completed = int(status.get("completedSteps") or 0)
    todo = max(0, prediction.steps - completed)
    budget = gpu.job_seconds_p90 * todo / prediction.steps if gpu is not None else 0.0
    if todo == 0 or budget <= 0:
        return 0
    return math.floor(todo * min(1.0, width_share * max(0.0, (end - start).total_seconds()) / budget))


def credited_steps(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView],
                   prediction: Prediction | None, *, now: datetime) -> int:
    """Steps a checkpointing job keeps after an interrupted attempt: its checkpoint as the training code
    reported it (offpeak.progress), else the pessimistic estimate of `steps_done`."""
    completed = int(status.get("completedSteps") or 0)
    if not spec.checkpointing:
        return completed
    reported = checkpointed_steps([p.progress for p in pods])
    # an elastic attempt seen narrower may have run on its fewest workers all along: credit it as if it had
    fewest = spec.min_workers or spec.workers
    share = 1 / width_scale(width=fewest, full_width=spec.workers) if narrowed(spec, status, pods) else 1.0
    credit = reported if reported is not None else completed + steps_done(pods, prediction, status=status, now=now,
                                                                        width_share=share)
    return max(completed, min(spec.total_steps - 1, credit))


def _requeue(spec: JobSpec, status: Mapping[str, Any], pods: Sequence[PodView], prediction: Prediction | None,
             reason: str, what: str, now: datetime, settings: OperatorSettings) -> Decision:
    attempt = int(status.get("attempts") or 1)
    stops = int(status.get("plannedStops") or 0) + (reason in NOT_COUNTED)  # attempts that do not count
    completed = credited_steps(spec, status, pods, prediction, now=now)
    ends = [p.finished_at for p in pods if p.finished_at is not None]
    wall = ((max(ends) if ends else now) - _attempt_start(status, pods, now)).total_seconds()
    measured = None if narrowed(spec, status, pods) else _measure(spec, status, pods, prediction,
                                                          wall_seconds=max(0.0, wall), completed=False)
    alive = tuple(p.name for p in pods if p.phase not in ("Succeeded", "Failed") and not p.deleting)
    conds = copied_conditions(status)
    if attempt - stops >= spec.max_attempts:
        message = f"{what}; no attempts left ({attempt - stops}/{spec.max_attempts})"
        conds = cond.finished(conds, succeeded=False, reason="MaxAttemptsReached", message=message, now=now)
        return Decision(
            status={"phase": Phase.FAILED, "finishTime": rfc3339(now), "message": message, "conditions": conds,
                    "completedSteps": completed, "reason": "MaxAttemptsReached"},
            actions=[DeletePods(alive), EmitEvent("Warning", "MaxAttemptsReached", message)],
        )
    delay = 0.0 if reason == REQUEUE_SUSPENDED else settings.requeue.backoff(attempt)  # held until it may run
    next_at = now + timedelta(seconds=delay)
    resume = f", will resume after step {completed}" if spec.checkpointing else ", will restart from the beginning"
    message = f"{what}; attempt {attempt + 1 - stops}/{spec.max_attempts} in {delay:.0f}s{resume}"
    if stops:
        message += f" ({stops} planned stop(s) not counted)"
    conds = cond.set_condition(conds, type=cond.SCHEDULED, ok=False, reason=reason, message=message, now=now)
    out = {"phase": Phase.REQUEUED, "nextAttemptTime": rfc3339(next_at), "message": message, "conditions": conds,
           "completedSteps": completed, "reason": reason, "plannedStops": stops}
    kind = "Normal" if reason in NOT_COUNTED else "Warning"
    actions: list[Action] = [DeletePods(alive), RecordRequeue(reason), EmitEvent(kind, reason, message)]
    if measured is not None:  # the interrupted attempt reported its step time: learn from it too
        out["measurements"] = with_measurement(status.get("measurements"), measured)
        actions.append(ReportSample.of(measured))
    return Decision(status=out, actions=actions)


