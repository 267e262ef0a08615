"""One reconcile of one TrainingJob: read, observe, decide (pure), act, record. The only place that mixes them.

Called by every kopf trigger (create, resync timer, pod events); a per-job lock serialises the triggers inside
one operator and kopf peering keeps a second operator passive, so a job is never worked on twice at once. The
job is re-read at the start, so a stale trigger cannot act on old status.

Over 500 lines because each action of the state machine is carried out here, one short method each, beside the
one `match` that dispatches them; splitting the methods from the dispatch would scatter one reconcile.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException
from offpeak_graph.schema import ModelGraph

from offpeak_operator import conditions as cond
from offpeak_operator import admission, names, podspecs
from offpeak_operator import statemachine as sm
from offpeak_operator.extraction import ExtractionFailed, extract_in_process
from offpeak_operator.graphstore import (EncodedGraph, GraphDecodeError, GraphTooLarge, HfConfigError, decode_bytes,
                                         encode_graph, from_log, graph_from_configmap, hf_config_from_configmap)
from offpeak_operator.jobspec import GpuResolver, JobSpec, ModelSource, Problem, SpecError, parse_spec, validate
from offpeak_operator.kube import KubeIO
from offpeak_operator.livereports import Channel, Claim
from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.observe import observe
from offpeak_operator.predictions import Prediction, PredictorResponseError, fallback, from_predictor
from offpeak_operator.predictions import measured_step_seconds, remaining_seconds
from offpeak_operator.predictor_http import PredictorHTTP, PredictorUnavailable, SampleReport
from offpeak_operator.queueing import KueueLink
from offpeak_operator.settings import OperatorSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_STEPS_PER_RECONCILE = 6  # Pending -> Analyzing -> Predicted -> Waiting can happen in one pass
REJECTED = frozenset({400, 422})  # the object itself is invalid: retrying cannot help
# Refusals recorded as a condition and an Event (quota 403, conflict 409, invalid 422 outside pod creation); the
# job's phase stays, so the next reconcile tries again (pod creation is idempotent by name).
RECORDED_API_ERRORS = frozenset({403, 409, 422})
SLOW_ACTIONS = (sm.ExtractInProcess,)  # status is written before these run (never before pod creation)


def utcnow() -> datetime:
    return datetime.now(UTC)


Extractor = Callable[[JobSpec, float], ModelGraph]


def _default_extractor(spec: JobSpec, timeout: float) -> ModelGraph:
    return extract_in_process(spec, timeout_seconds=timeout)


@dataclass
class Context:
    """Everything a reconcile needs, injected (tests swap the clock, extractor or predictor)."""

    settings: OperatorSettings
    kube: KubeIO
    predictor: PredictorHTTP
    metrics: OperatorMetrics
    resolve_gpu: GpuResolver | None = None
    clock: Callable[[], datetime] = utcnow
    extract: Extractor = field(default=_default_extractor)
    status_channel: Channel | None = None  # the live progress channel training pods report through (None: none)


def api_message(e: ApiException) -> str:
    """The API server's own message from an error response (falls back to the HTTP reason)."""
    try:
        return str(json.loads(e.body or "{}").get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


def read_analysis_graph(kube: KubeIO, namespace: str, pod_name: str) -> tuple[EncodedGraph, ModelGraph]:
    """The graph a finished analysis pod printed to its `emit` log: as it is stored (already reduced to fit a
    ConfigMap by the pod) and decoded. Raises ApiException (no log) or GraphDecodeError (not a graph)."""
    data, header = from_log(kube.pod_log(namespace, pod_name, "emit"))
    graph = decode_bytes(data)
    encoded = EncodedGraph(data=data, graph_hash=header.get("hash") or graph.content_hash(),
                           reduced=header.get("reduced", ""), ops=len(graph.ops),
                           original_ops=int(header.get("original_ops", len(graph.ops))),
                           model_name=graph.model_name, model_family=graph.model_family)
    return encoded, graph


class _Rejected(Exception):
    """The API server refused one of a launch's objects as invalid (400/422): retrying cannot help."""

    def __init__(self, what: str, error: ApiException) -> None:
        super().__init__(what)
        self.what, self.error = what, error


def _apply(status: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value


class Reconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.kueue = KueueLink(ctx.kube, lambda: self.ctx.clock())
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()

    def lock(self, key: str) -> threading.Lock:
        """The lock that serialises the triggers of one object (a TrainingJob, or an opted-in workload)."""
        with self._locks_guard:
            return self._locks[key]

    def reconcile(self, namespace: str, name: str, *, wait: bool = True) -> str | None:
        """Bring one job one or more steps forward; returns its phase (None if the job is gone or busy).

        With `wait=False` a job already being reconciled is skipped: that reconcile, or the next resync, will
        see the newest state, and no kopf worker thread sits blocked behind a slow graph extraction.
        """
        key = f"{namespace}/{name}"
        return self.serialised(key, lambda: self._reconcile(key, namespace, name), wait=wait)

    def serialised(self, key: str, work: Callable[[], T], *, wait: bool = True) -> T | None:
        """`work()` under the lock of one object (a TrainingJob, or an opted-in workload), so its triggers never
        overlap; with `wait=False`, None at once when another trigger holds it."""
        lock = self.lock(key)
        if not lock.acquire(blocking=wait):
            return None
        try:
            return work()
        finally:
            lock.release()

    def _reconcile(self, key: str, namespace: str, name: str) -> str | None:
        job = self.ctx.kube.get_job(namespace, name)
        if job is None:
            self.ctx.metrics.set_phase(key, None)
            return None
        status: dict[str, Any] = dict(job.get("status") or {})
        for _ in range(MAX_STEPS_PER_RECONCILE):  # go on while decisions change something
            patch = self._step(job, status)
            if not patch:
                break
            self.ctx.kube.patch_job_status(namespace, name, patch)
            _apply(status, patch)
        self.ctx.metrics.set_phase(key, status.get("phase") or sm.Phase.PENDING,
                                   reason=str(status.get("reason") or ""))
        return status.get("phase")

    def _step(self, job: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """One decision and its actions; the status patch to write (empty: nothing to do)."""
        meta = job["metadata"]
        phase = status.get("phase") or sm.Phase.PENDING
        labelled = admission.queue_name(job)
        queue = labelled if self.ctx.settings.kueue else None
        if phase in sm.TERMINAL:
            if queue is not None:  # an ended job's Workload gives its quota back
                self._finish_workload(job, status, queue)
            return {}
        now = self.ctx.clock()
        spec: JobSpec | None
        problems: list[Problem] = []
        try:
            spec = parse_spec(job.get("spec") or {})
        except SpecError as e:
            spec, problems = None, [Problem("InvalidSpec", str(e))]
        if spec is not None and phase == sm.Phase.PENDING:
            problems = validate(spec, job_name=meta["name"], resolve_gpu=self.ctx.resolve_gpu)
            problems += [Problem("KueueNotEnabled", m)
                         for m in admission.queue_problems(queue=labelled, kueue_enabled=self.ctx.settings.kueue)]
        observed = sm.Observed()
        if spec is not None and phase in (sm.Phase.ANALYZING, sm.Phase.WAITING, sm.Phase.RUNNING, sm.Phase.REQUEUED):
            pods = self.ctx.kube.list_job_pods(meta["namespace"], meta["name"])
            nodes = {p.get("spec", {}).get("nodeName") for p in pods} - {None, ""}
            observed = observe(pods, node_gpu_types={n: self.ctx.kube.node_gpu_type(n) for n in nodes})
        if queue is not None and spec is not None and phase in sm.QUEUED_PHASES:
            observed = replace(observed, workload=self.kueue.observe(job))
        decision = sm.decide(job_name=meta["name"], spec=spec, problems=problems, status=status,
                             observed=observed, now=now, settings=self.ctx.settings, queue=queue)
        patch = dict(decision.status)
        if patch and any(isinstance(a, SLOW_ACTIONS) for a in decision.actions):
            # say "Analyzing" before a long extraction; safe because the next decision repeats the action
            self.ctx.kube.patch_job_status(meta["namespace"], meta["name"], patch)
            _apply(status, patch)
            patch = {}
        for action in decision.actions:
            current = {**status, **patch}
            try:
                extra = self._act(action, job, spec, current, now)
            except ApiException as e:
                if e.status not in RECORDED_API_ERRORS:
                    raise  # transient (API down): the next reconcile tries again
                self._record_api_error(job, status, action, e, now)
                return {}  # the decision's status is not written: it is retried as it was
            if extra:
                patch.update(extra)
        if patch and cond.is_true(status.get("conditions"), cond.API_ACCEPTED) is False:
            patch["conditions"] = sm.api_accepted(patch.get("conditions") or status.get("conditions") or [], now=now)
        patch.update(sm.display_fields(status, patch))
        generation = meta.get("generation")
        if isinstance(generation, int) and status.get("observedGeneration") != generation:
            patch["observedGeneration"] = generation  # this spec has been read and acted on
        return patch

    def _finish_workload(self, job: Mapping[str, Any], status: Mapping[str, Any], queue: str) -> None:
        """An ended queued job: mark its Workload Finished (once), so Kueue releases its quota."""
        observed = sm.Observed(workload=self.kueue.observe(job))
        decision = sm.decide(job_name=job["metadata"]["name"], spec=None, problems=[], status=status,
                             observed=observed, now=self.ctx.clock(), settings=self.ctx.settings, queue=queue)
        for action in decision.actions:
            if isinstance(action, sm.FinishWorkload):
                self.kueue.finish(job, succeeded=action.succeeded, message=action.message)

    def _record_api_error(self, job: Mapping[str, Any], status: dict[str, Any], action: sm.Action,
                          e: ApiException, now: datetime) -> None:
        """Say in a condition and an Event why the API server refused an action (once per distinct refusal)."""
        meta = job["metadata"]
        patch = sm.api_error_status(status=status, action=type(action).__name__, code=int(e.status or 0),
                                    message=api_message(e), now=now)
        if patch is None:
            return  # the same refusal is already recorded
        condition = sm.api_error_condition(patch)
        log.warning("%s/%s: %s", meta["namespace"], meta["name"], condition["message"])
        self.ctx.kube.emit_event(job, type="Warning", reason=condition["reason"], message=condition["message"],
                                 now=now)
        self.ctx.kube.patch_job_status(meta["namespace"], meta["name"], patch)
        _apply(status, patch)

    # ---- actions -----------------------------------------------------------------------------------------

    def _act(self, action: sm.Action, job: Mapping[str, Any], spec: JobSpec | None, status: Mapping[str, Any],
             now: datetime) -> dict[str, Any] | None:
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        kube = self.ctx.kube
        match action:
            case sm.EmitEvent(type=type_, reason=reason, message=message):
                kube.emit_event(job, type=type_, reason=reason, message=message, now=now)
            case sm.CreateAnalysisPod():
                assert spec is not None
                source = spec.model_source.kind
                if source == "hfConfigMap":  # checked here, as for in-process extraction; the pod mounts it
                    try:
                        self._hf_config_map(job, spec.model_source)
                    except HfConfigError as e:
                        return self._graph_done(status, now, source=source, ok=False, reason=e.reason,
                                                message=str(e))
                try:
                    kube.create_pod(podspecs.analysis_pod(job, spec, self.ctx.settings.analysis))
                except ApiException as e:
                    if e.status not in REJECTED:
                        raise  # transient (quota, API down): the next reconcile tries again
                    message = f"the API server rejected the analysis pod: {api_message(e)}"
                    kube.emit_event(job, type="Warning", reason="AnalysisPodRejected", message=message, now=now)
                    return self._graph_done(status, now, source=source, ok=False,
                                            reason="AnalysisPodRejected", message=message)
            case sm.DeleteAnalysisPod():
                kube.delete_pod(ns, names.analysis_pod_name(name))
            case sm.CollectGraph():
                assert spec is not None
                return self._collect_graph(job, spec.model_source.kind, status, now)
            case sm.LoadUserGraph():
                assert spec is not None
                return self._load_user_graph(spec, ns, status, now)
            case sm.ExtractInProcess():
                assert spec is not None
                return self._extract_in_process(job, spec, status, now)
            case sm.Predict():
                assert spec is not None
                return self._predict(job, spec, status, now)
            case sm.Repredict():
                assert spec is not None
                return self._repredict(job, spec, status, now)
            case sm.CreateTrainingPods(attempt=attempt, completed_steps=completed, placement=placement):
                assert spec is not None
                try:
                    self._create_training_pods(job, spec, status, attempt=attempt, completed=completed,
                                               placement=placement)
                except _Rejected as e:
                    message = f"the API server rejected the {e.what}: {api_message(e.error)}"
                    kube.emit_event(job, type="Warning", reason="PodRejected", message=message, now=now)
                    return sm.rejected_status(status=status, message=message, now=now)
            case sm.DeletePods(pod_names=pod_names):
                for pod in pod_names:
                    kube.delete_pod(ns, pod)
            case sm.StopPods(pod_names=pod_names, reason=reason):
                for pod in pod_names:
                    kube.patch_pod_annotations(ns, pod, {names.ANN_EVICTION_REASON: reason})
            case sm.AnnotatePods(pod_names=pod_names, annotations=annotations):
                for pod in pod_names:
                    kube.patch_pod_annotations(ns, pod, dict(annotations))
            case sm.CreateWorkload():
                assert spec is not None
                queue = admission.queue_name(job)
                assert queue is not None, "only a queued job's decision creates a Workload"
                attempt = int(status.get("attempts") or 0) + 1
                first = self._training_pod(job, spec, status, attempt=attempt, worker=0,
                                           completed=int(status.get("completedSteps") or 0), reports=False)
                self.kueue.create(job, queue=queue, workers=spec.workers, pod=first)
            case sm.ReleaseWorkload():
                self.kueue.release(job)
            case sm.ReportSample():
                assert spec is not None
                return self._report_sample(job, spec, status, action)
            case sm.RecordOutcome(gpu_type=gpu_type, predicted_seconds=predicted, actual_seconds=actual,
                                  pace_eta_seconds=pace_eta):
                family = (status.get("graph") or {}).get("modelFamily", "")
                self.ctx.metrics.job_finished(job=name, namespace=ns, gpu_type=gpu_type, model_family=family,
                                              predicted_seconds=predicted, actual_seconds=actual,
                                              pace_eta_seconds=pace_eta)
            case sm.RecordRequeue(reason=reason):
                self.ctx.metrics.job_requeues_total.labels(reason=reason).inc()
        return None

    def _graph_done(self, status: Mapping[str, Any], now: datetime, *, source: str, ok: bool, reason: str,
                    message: str, graph: Mapping[str, Any] | None = None) -> dict[str, Any]:
        started = sm.parse_time(status.get("analysisStartTime"))
        if started is not None:
            self.ctx.metrics.analysis_duration_seconds.labels(source=source, outcome="ok" if ok else "failed").observe(
                max(0.0, (now - started).total_seconds()))
        return sm.graph_status(status=status, ok=ok, reason=reason, message=message, now=now, graph=graph)

    def _store_graph(self, job: Mapping[str, Any], encoded: EncodedGraph, *, source: str) -> dict[str, Any]:
        body = podspecs.graph_configmap(job, encoded, source=source)
        self.ctx.kube.create_configmap(body)
        return {"source": source, "configMap": body["metadata"]["name"], "key": names.GRAPH_KEY,
                "hash": encoded.graph_hash, "modelName": encoded.model_name, "modelFamily": encoded.model_family,
                "ops": encoded.original_ops, "reduced": encoded.reduced}

    def _collect_graph(self, job: Mapping[str, Any], source: str, status: Mapping[str, Any],
                       now: datetime) -> dict[str, Any]:
        """Store the graph the finished analysis pod printed; `source` is the model source's kind."""
        meta = job["metadata"]
        try:
            encoded, _ = read_analysis_graph(self.ctx.kube, meta["namespace"], names.analysis_pod_name(meta["name"]))
        except (ApiException, GraphDecodeError) as e:
            message = f"could not read the graph from the analysis pod: {getattr(e, 'reason', None) or e}"
            self.ctx.kube.emit_event(job, type="Warning", reason="GraphUnreadable", message=message, now=now)
            return self._graph_done(status, now, source=source, ok=False, reason="GraphUnreadable",
                                    message=message)
        info = self._store_graph(job, encoded, source=source)
        return self._graph_done(status, now, source=source, ok=True, reason="Extracted",
                                message=f"model graph extracted ({info['ops']} ops)", graph=info)

    def _load_user_graph(self, spec: JobSpec, namespace: str, status: Mapping[str, Any],
                         now: datetime) -> dict[str, Any]:
        source = spec.model_source
        cm = self.ctx.kube.get_configmap(namespace, source.value)
        if cm is None:
            return self._graph_done(status, now, source="graphConfigMap", ok=False, reason="GraphConfigMapNotFound",
                                    message=f"ConfigMap {source.value} not found in {namespace}")
        try:
            graph = graph_from_configmap(cm, key=source.key)
        except GraphDecodeError as e:
            return self._graph_done(status, now, source="graphConfigMap", ok=False, reason="GraphInvalid",
                                    message=f"ConfigMap {source.value}: {e}")
        info = {"source": "graphConfigMap", "configMap": source.value, "key": source.key,
                "hash": graph.content_hash(), "modelName": graph.model_name, "modelFamily": graph.model_family,
                "ops": len(graph.ops), "reduced": ""}
        return self._graph_done(status, now, source="graphConfigMap", ok=True, reason="Loaded",
                                message=f"model graph {graph.model_name or source.value} loaded ({len(graph.ops)} ops)",
                                graph=info)

    def _extract_in_process(self, job: Mapping[str, Any], spec: JobSpec, status: Mapping[str, Any],
                            now: datetime) -> dict[str, Any]:
        source = spec.model_source
        if source.kind == "hfConfigMap":
            try:
                spec = replace(spec, model_source=replace(source, config_json=self._hf_config_map(job, source)))
            except HfConfigError as e:
                return self._graph_done(status, now, source=source.kind, ok=False, reason=e.reason, message=str(e))
        try:
            graph = self.ctx.extract(spec, float(self.ctx.settings.analysis.in_process_timeout_seconds))
            encoded = encode_graph(graph, limit_bytes=self.ctx.settings.analysis.configmap_limit_bytes)
        except (ExtractionFailed, GraphTooLarge, GraphDecodeError) as e:
            reason = sm.graph_failure_reason(exit_code=getattr(e, "exit_code", None), default="ExtractionFailed")
            return self._graph_done(status, now, source=source.kind, ok=False, reason=reason, message=str(e))
        info = self._store_graph(job, encoded, source=source.kind)
        end = self.ctx.clock()
        return self._graph_done(status, end, source=source.kind, ok=True, reason="Extracted",
                                message=f"model graph of {source.value} extracted ({encoded.original_ops} ops)",
                                graph=info)

    def _hf_config_map(self, job: Mapping[str, Any], source: ModelSource) -> str:
        """The HF config text held in the job's own namespace (ConfigMap `source.value`, key `source.key`)."""
        cm = self.ctx.kube.get_configmap(job["metadata"]["namespace"], source.value)
        if cm is None:
            raise HfConfigError("HfConfigMapNotFound",
                                f"ConfigMap {source.value} not found in {job['metadata']['namespace']}")
        return hf_config_from_configmap(cm, key=source.key)

    def _read_graph(self, namespace: str, status: Mapping[str, Any]) -> ModelGraph | None:
        info = status.get("graph") or {}
        if not info.get("configMap"):
            return None
        cm = self.ctx.kube.get_configmap(namespace, info["configMap"])
        if cm is None:
            return None
        try:
            return graph_from_configmap(cm, key=info.get("key") or names.GRAPH_KEY)
        except GraphDecodeError:
            return None

    def gpu_names(self, spec: JobSpec) -> tuple[list[str], list[str]]:
        asked = list(dict.fromkeys(spec.gpu_types))
        canonical = []
        for gpu in asked:
            canon = gpu
            if self.ctx.resolve_gpu is not None:
                try:
                    canon = self.ctx.resolve_gpu(gpu)
                except (LookupError, ValueError):
                    canon = gpu
            canonical.append(canon)
        return asked, canonical

    def ask_predictor(self, job: Mapping[str, Any], spec: JobSpec,
                       graph: ModelGraph) -> tuple[Prediction | None, str]:  # fmt: skip
        """The predictor's answer as a Prediction, or None and why not (unreachable, malformed, not finite)."""
        asked, canonical = self.gpu_names(spec)
        try:
            answer = self.ctx.predictor.predict(graph=graph.to_dict(), gpus=asked, precision=spec.precision,
                                                optimizer=spec.optimizer, steps=spec.total_steps,
                                                num_gpus=spec.total_gpus, startup_seconds=spec.startup_seconds,
                                                # workers land on different nodes (gang): the network is crossed
                                                gpus_per_node=spec.gpus_per_worker if spec.workers > 1 else None)
            return from_predictor(answer, steps=spec.total_steps, asked=asked, canonical=canonical), ""
        except (PredictorUnavailable, PredictorResponseError) as e:
            log.warning("prediction for %s/%s failed: %s", job["metadata"]["namespace"], job["metadata"]["name"], e)
            return None, str(e)

    @staticmethod
    def predicted_message(prediction: Prediction) -> str:
        best = prediction.fastest()
        message = (f"predicted by model {prediction.model_version or '?'}: "
                   f"{best.job_seconds:.0f}s on {best.gpu_type} (fastest allowed)" if best else "predicted")
        corrected = max((g.correction_samples for g in prediction.gpus), default=0)
        if corrected:
            message += f", corrected by up to {corrected} measured sample(s)"
        return message

    def _predict(self, job: Mapping[str, Any], spec: JobSpec, status: Mapping[str, Any],
                 now: datetime) -> dict[str, Any]:
        asked, canonical = self.gpu_names(spec)
        graph = self._read_graph(job["metadata"]["namespace"], status)
        prediction: Prediction | None = None
        why = "no model graph"
        if graph is not None:
            prediction, why = self.ask_predictor(job, spec, graph)
        if prediction is not None:
            return sm.prediction_status(status=status, prediction=prediction, reason="Predicted",
                                        message=self.predicted_message(prediction), now=now)
        prediction = fallback(asked=asked, canonical=canonical, steps=spec.total_steps,
                              estimated_seconds=spec.estimated_seconds, startup_seconds=spec.startup_seconds,
                              settings=self.ctx.settings.fallback)  # fmt: skip
        used = ("the user's estimate (spec.estimatedSeconds)" if prediction.source == "user-estimate"
                else f"a conservative default ({self.ctx.settings.fallback.default_step_seconds}s per step)")
        reason = "NoGraph" if graph is None else "PredictorUnavailable"
        message = f"{why}: using {used}, {prediction.gpus[0].job_seconds:.0f}s"
        self.ctx.kube.emit_event(job, type="Warning", reason=reason, message=message, now=now)
        out = sm.prediction_status(status=status, prediction=prediction, reason=reason, message=message, now=now)
        if graph is not None:  # the predictor is asked again while the job waits (sm.wants_reprediction)
            retry_at = now + timedelta(seconds=self.ctx.settings.predict_retry.backoff(1))
            out.update(predictionRetries=0, nextPredictionTime=sm.rfc3339(retry_at))
        return out

    def _repredict(self, job: Mapping[str, Any], spec: JobSpec, status: Mapping[str, Any],
                   now: datetime) -> dict[str, Any]:
        """Replace a waiting job's fallback with the predictor's answer (status and pod annotations)."""
        graph = self._read_graph(job["metadata"]["namespace"], status)
        if graph is None:
            return sm.reprediction_failed_status(status=status, message="the job's model graph is unreadable",
                                                 now=now, backoff=self.ctx.settings.predict_retry.backoff)
        prediction, why = self.ask_predictor(job, spec, graph)
        if prediction is None:
            return sm.reprediction_failed_status(status=status, message=why, now=now,
                                                 backoff=self.ctx.settings.predict_retry.backoff)
        remaining = remaining_seconds(prediction, completed_steps=int(status.get("completedSteps") or 0),
                                      measured_step_seconds=measured_step_seconds(status.get("measurements")))
        message = f"re-predicted after a fallback: {self.predicted_message(prediction)}"
        if not self.annotate_waiting_pods(job, status.get("pods") or [], podspecs.predicted_annotation(remaining)):
            message += "; the waiting pods keep the fallback annotation (the operator may not patch pods)"
        self.ctx.kube.emit_event(job, type="Normal", reason="Repredicted", message=message, now=now)
        return sm.reprediction_status(status=status, prediction=prediction, message=message, now=now)

    def annotate_waiting_pods(self, job: Mapping[str, Any], pods: Iterable[str], annotation: Mapping[str, str]) -> bool:
        """Put a new prediction on a job's (or opted-in workload's) waiting pods; False when the API server refuses
        (no RBAC on pods patch), so the caller can say they keep the old one instead of failing the reconcile."""
        try:
            for pod in pods:
                self.ctx.kube.patch_pod_annotations(job["metadata"]["namespace"], pod, annotation)
        except ApiException as e:
            if e.status not in RECORDED_API_ERRORS:
                raise
            log.warning("cannot annotate the pods of %s/%s with the new prediction: %s", job["metadata"]["namespace"],
                        job["metadata"]["name"], api_message(e))
            return False
        return True

    def _training_pod(self, job: Mapping[str, Any], spec: JobSpec, status: Mapping[str, Any], *, attempt: int,
                      worker: int, completed: int, placement: admission.Placement | None = None,
                      reports: bool = True) -> dict[str, Any]:
        """One worker's pod of an attempt, annotated with the prediction of the work left; with `reports`, given
        the attempt's part of the live progress channel (not in a Kueue Workload's copy of it)."""
        prediction = Prediction.from_status(status.get("prediction"))
        _, canonical = self.gpu_names(spec)
        if prediction is None:  # cannot happen through Predicted, but never launch without an annotation
            prediction = fallback(asked=canonical, canonical=canonical, steps=spec.total_steps,
                                  estimated_seconds=spec.estimated_seconds, startup_seconds=spec.startup_seconds,
                                  settings=self.ctx.settings.fallback)
        remaining = remaining_seconds(prediction, completed_steps=completed,
                                      measured_step_seconds=measured_step_seconds(status.get("measurements")))
        channel = self.ctx.status_channel
        meta = job["metadata"]
        claim = Claim(plural=names.PLURAL, namespace=meta["namespace"], name=meta["name"],
                      uid=str(meta.get("uid") or ""), attempt=attempt)
        parts = channel.pod_parts(claim) if channel is not None and reports else None
        return podspecs.training_pod(job, spec, attempt=attempt, worker=worker, gpu_types=tuple(canonical),
                                     remaining=remaining, completed_steps=completed, placement=placement,
                                     status=parts)

    def _create_training_pods(self, job: Mapping[str, Any], spec: JobSpec, status: Mapping[str, Any], *,
                              attempt: int, completed: int, placement: admission.Placement | None = None) -> None:
        claim = podspecs.checkpoint_claim(job, spec)
        owned = [("checkpoint claim", self.ctx.kube.create_pvc, claim)] if claim is not None else []
        if spec.workers > 1:
            owned.append(("rendezvous Service", self.ctx.kube.create_service, podspecs.worker_service(job)))
        owned += [("training pod", self.ctx.kube.create_pod,
                   self._training_pod(job, spec, status, attempt=attempt, worker=worker, completed=completed,
                                      placement=placement))
                  for worker in range(spec.workers)]
        for what, create, body in owned:  # each create is idempotent by name (a 409 is "made before")
            try:
                create(body)
            except ApiException as e:
                if e.status in REJECTED:
                    raise _Rejected(what, e) from e
                raise

    def _report_sample(self, job: Mapping[str, Any], spec: JobSpec, status: Mapping[str, Any],
                       action: sm.ReportSample) -> dict[str, Any]:
        """Post the measured step time with the graph the job was predicted with (so the sample joins the
        prediction's correction key); the outcome goes into status.sampleStatus. A live sample's id is kept in
        status.livePace, and the attempt's final sample replaces it (`replaces`), so the run counts once."""
        meta = job["metadata"]
        live = status.get("livePace") or {}
        replaces = live.get("sampleId") if not action.live and live.get("attempt") == status.get("attempts") else None
        graph = self._read_graph(meta["namespace"], status)
        graph_hash = graph.content_hash() if graph is not None else (status.get("prediction") or {}).get("graphHash")
        if graph is None and not graph_hash:
            log.info("no sample for %s/%s: it had no model graph to learn from", meta["namespace"], meta["name"])
            return {"sampleReported": False, "sampleStatus": "not sent: the job has no model graph"}
        try:
            # ignore: precision and optimizer are the spec's strings; the client checks them as the predictor will
            answer = self.ctx.predictor.report_sample(SampleReport(
                gpu=action.gpu_type, step_seconds=action.step_seconds, job_seconds=action.job_seconds,
                steps=action.steps, startup_seconds=action.startup_seconds, job=f"{meta['namespace']}/{meta['name']}",
                graph=graph.to_dict() if graph is not None else None, graph_hash=graph_hash or None, mode="train",
                precision=spec.precision, optimizer=spec.optimizer,  # type: ignore[arg-type]
                num_gpus=spec.total_gpus, replaces=replaces if isinstance(replaces, int) else None))
        except PredictorUnavailable as e:
            log.warning("sample for %s/%s not learned: %s", meta["namespace"], meta["name"], e)
            return {"sampleReported": False, "sampleStatus": f"not learned: {e}"[:500]}
        outcome = str(answer.get("status") or "stored")
        if answer.get("reason"):
            outcome += f": {answer['reason']}"
        out: dict[str, Any] = {"sampleReported": True}
        if action.live:
            outcome = f"{outcome} (live, after {action.steps} steps; the final sample replaces it)"
            if isinstance(answer.get("id"), int):
                out["livePace"] = {**live, "sampleId": answer["id"]}
        return {**out, "sampleStatus": outcome[:500]}
