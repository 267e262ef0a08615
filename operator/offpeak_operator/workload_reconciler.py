"""One reconcile of one opted-in workload (offpeak_operator.workloads): analyse an entry point in the workload's
own image, predict, annotate, unsuspend, record.

The Job stays the Job controller's: it creates, retries and finishes the pods. offpeak only decides when they may
start and where (the prediction the extender places by), says so in annotations and Events, and records how long
the Job really took against the prediction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException
from offpeak_core.jobkinds import BATCH_JOB, JobKind
from offpeak_graph.schema import ModelGraph

from offpeak_operator import names, workloads
from offpeak_operator.extraction import ExtractionFailed
from offpeak_operator.graphstore import GraphDecodeError, graph_from_configmap
from offpeak_operator.jobspec import JobSpec
from offpeak_operator.observe import pod_view
from offpeak_operator.podspecs import predicted_annotation
from offpeak_operator.predictions import fallback, remaining_seconds
from offpeak_operator.predictor_http import PredictorUnavailable, SampleReport
from offpeak_operator.reconciler import RECORDED_API_ERRORS, Reconciler, api_message, read_analysis_graph
from offpeak_operator.statemachine import INVALID_MODEL_SOURCE, analysed_in_pod, judge_analysis, parse_time

log = logging.getLogger(__name__)


class WorkloadReconciler:
    """Reconciles opted-in workloads of one kind (batch/v1 Jobs, PyTorchJobs) with the TrainingJob reconciler's
    context (API, predictor, extractor, metrics)."""

    def __init__(self, reconciler: Reconciler, kind: JobKind = BATCH_JOB) -> None:
        self.reconciler = reconciler
        self.ctx = reconciler.ctx
        self.kind = kind

    def reconcile(self, namespace: str, name: str, *, wait: bool = True) -> str | None:
        """Bring one Job forward; returns the state word it is left in ("" when it is not offpeak's;
        `workloads.AWAITING_PREDICTOR` for a `Predicted` one whose fallback is to be replaced). Triggers (the
        workload's events, its analysis pod's, the resync while it is analysed or awaits the predictor) are
        serialised per workload; with `wait=False` one already being reconciled is skipped (None)."""
        return self.reconciler.serialised(f"{self.kind.kind}:{namespace}/{name}",
                                          lambda: self._reconcile(namespace, name), wait=wait)

    def _reconcile(self, namespace: str, name: str) -> str:
        kube = self.ctx.kube
        job = kube.get_workload(self.kind, namespace, name)
        if job is None or not workloads.opted_in(job, self.kind):
            return ""
        current = workloads.state(job)
        suspended = self.kind.suspended(job)
        if current == "Finished":
            return current
        if current == "Predicted":
            return self._track(job)
        if not suspended:
            if current != "Unpredicted":  # say it once
                where = "spec.suspend" if self.kind.replica_specs is None else "spec.runPolicy.suspend"
                self._say(job, "Unpredicted", f"the {self.kind.kind} was created unsuspended, so its pods may start "
                          f"before their runtime is predicted; create opted-in {self.kind.kind}s with {where}: true",
                          warning=True)
            return "Unpredicted"
        spec, problems = workloads.workload_spec(job, resolve_gpu=self.ctx.resolve_gpu, kind=self.kind)
        if spec is None:
            message = "; ".join(p.message for p in problems)
            if job["metadata"].get("annotations", {}).get(workloads.ANN_STATE) != f"Invalid: {message}"[:1000]:
                self._say(job, "Invalid", message, warning=True, reason=problems[0].reason)
            return "Invalid"  # stays suspended: nothing runs that offpeak cannot place
        if not analysed_in_pod(spec.model_source, self.ctx.settings.analysis):
            return self._admit(job, spec, self._graph(job, spec), "no graph")
        word, graph, why = self._analyse(job, spec)
        if word == "Invalid":
            if job["metadata"].get("annotations", {}).get(workloads.ANN_STATE) != f"Invalid: {why}"[:1000]:
                self._say(job, "Invalid", why, warning=True, reason=INVALID_MODEL_SOURCE)
            return word
        return word if word == "Analyzing" else self._admit(job, spec, graph, why or "no graph")

    def _analyse(self, job: Mapping[str, Any], spec: JobSpec) -> tuple[str, ModelGraph | None, str]:
        """Extract the graph in an analysis pod (a TrainingJob's: an entry point in the workload's own image, a
        torchvision/HF source in the extract image) and keep it.

        Returns ("Analyzing", None, "") while the pod runs, ("Invalid", None, why) when the source cannot be built
        (the training would fail the same way), ("Ready", graph, "") once extracted, or ("Ready", None, why) when
        the analysis failed and the prediction goes on without the graph. Each outcome is written on the Job, so
        it holds across restarts and the pod is made once per source."""
        meta = job["metadata"]
        namespace, source = meta["namespace"], workloads.analysis_key(spec.model_source)
        kube = self.ctx.kube
        record = workloads.analysis_record(job, source)
        if record is not None and record.get("outcome") == "extracted":
            graph = self._graph(job, spec)
            if graph is not None:
                return "Ready", graph, ""
            record = None  # its ConfigMap is gone: analyse again
        if record is not None:
            return ("Invalid" if record.get("outcome") == "invalid" else "Ready"), None, record.get("message", "")
        pod_name = workloads.owned_name(job, self.kind, "analysis")
        pod = kube.get_pod(namespace, pod_name)
        if pod is not None and workloads.analysed_source(pod) != source:
            kube.delete_pod(namespace, pod_name)  # it analyses a source the workload no longer names
            return "Analyzing", None, ""  # its deletion triggers the next reconcile, which makes the new one
        now = self.ctx.clock()
        started = (parse_time(pod["metadata"].get("creationTimestamp")) if pod else None) or now
        view = pod_view(pod, node_gpu_types={}) if pod else None
        judged = judge_analysis(view, started=started, now=now, settings=self.ctx.settings, source_value=source)
        match judged.outcome:
            case "wait":
                return "Analyzing", None, ""
            case "create":
                try:
                    kube.create_pod(workloads.analysis_pod(job, spec, self.ctx.settings.analysis, self.kind))
                except ApiException as e:
                    if e.status not in (400, 403, 422):
                        raise  # transient: the next trigger tries again
                    return self._analysed(job, source, "failed",
                                          f"the API server rejected the analysis pod: {api_message(e)}")
                if workloads.state(job) != "Analyzing":
                    where = (f"the {self.kind.kind}'s own image" if spec.model_source.kind == "entrypoint"
                             else self.ctx.settings.analysis.extract_image)
                    self._say(job, "Analyzing", f"extracting the model graph from {source} in analysis pod "
                                                f"{pod_name}, in {where}")
                return "Analyzing", None, ""
            case "collect":
                try:
                    encoded, graph = read_analysis_graph(kube, namespace, pod_name)
                except (ApiException, GraphDecodeError) as e:
                    kube.delete_pod(namespace, pod_name)
                    return self._analysed(job, source, "failed", "could not read the graph from the analysis pod: "
                                                                 f"{getattr(e, 'reason', None) or e}")
                body = workloads.graph_configmap(job, encoded, self.kind, source=spec.model_source)
                if not kube.create_configmap(body):  # an earlier entry point's graph: this one replaces it
                    kube.replace_configmap(body)
                kube.delete_pod(namespace, pod_name)
                kube.patch_workload(self.kind, namespace, meta["name"], workloads.analysis_patch(
                    source, "extracted", f"model graph extracted ({encoded.original_ops} ops)"))
                self._observe_analysis(spec, (now - started).total_seconds(), ok=True)
                return "Ready", graph, ""
            case "invalid":
                kube.delete_pod(namespace, pod_name)
                self._observe_analysis(spec, (now - started).total_seconds(), ok=False)
                return self._analysed(job, source, "invalid", f"invalid model source: {judged.message}")
        kube.delete_pod(namespace, pod_name)  # failed: what is left of it goes
        self._observe_analysis(spec, (now - started).total_seconds(), ok=False)
        return self._analysed(job, source, "failed", judged.message)

    def _observe_analysis(self, spec: JobSpec, seconds: float, *, ok: bool) -> None:
        """An analysis pod's run, from its creation to its outcome, in the histogram TrainingJobs' analyses feed
        (label `source`: the model source's kind)."""
        self.ctx.metrics.analysis_duration_seconds.labels(source=spec.model_source.kind, outcome="ok" if ok else
                                                          "failed").observe(max(0.0, seconds))  # fmt: skip

    def _analysed(self, job: Mapping[str, Any], source: str, outcome: str, message: str) -> tuple[str, None, str]:
        """Record an analysis that gave no graph; the reconcile goes on as the outcome says."""
        meta = job["metadata"]
        self.ctx.kube.patch_workload(self.kind, meta["namespace"], meta["name"],
                                     workloads.analysis_patch(source, outcome, message))
        log.warning("no graph for %s %s/%s: %s", self.kind.kind, meta["namespace"], meta["name"], message)
        return ("Invalid" if outcome == "invalid" else "Ready"), None, message

    def _graph(self, job: Mapping[str, Any], spec: JobSpec) -> ModelGraph | None:
        source = spec.model_source
        try:
            if analysed_in_pod(source, self.ctx.settings.analysis):  # into the workload's graph ConfigMap
                cm = self.ctx.kube.get_configmap(job["metadata"]["namespace"],
                                                 workloads.owned_name(job, self.kind, "graph"))
                if cm is None or not workloads.graph_is_of(cm, source):
                    return None  # none yet, or another entry point's
                return graph_from_configmap(cm, key=names.GRAPH_KEY)
            if source.in_process:
                return self.ctx.extract(spec, float(self.ctx.settings.analysis.in_process_timeout_seconds))
            if source.kind == "graphConfigMap":
                cm = self.ctx.kube.get_configmap(job["metadata"]["namespace"], source.value)
                return graph_from_configmap(cm, key=source.key) if cm is not None else None
        except (ExtractionFailed, GraphDecodeError) as e:
            log.warning("no graph for Job %s/%s: %s", job["metadata"]["namespace"], job["metadata"]["name"], e)
        return None

    def _admit(self, job: Mapping[str, Any], spec: JobSpec, graph: ModelGraph | None, why: str) -> str:
        """Predict (from `graph`; without one, by the fallback, saying `why`), annotate and unsuspend."""
        meta = job["metadata"]
        asked, canonical = self.reconciler.gpu_names(spec)
        prediction, why = self.reconciler.ask_predictor(job, spec, graph) if graph is not None else (None, why)
        if prediction is None:
            prediction = fallback(asked=asked, canonical=canonical, steps=spec.total_steps,
                                  estimated_seconds=spec.estimated_seconds, startup_seconds=spec.startup_seconds,
                                  settings=self.ctx.settings.fallback)  # fmt: skip
        remaining = remaining_seconds(prediction, completed_steps=0)
        patch = workloads.admission_patch(job, spec, gpu_types=tuple(canonical), remaining=remaining, kind=self.kind)
        retrying = graph is not None and prediction.source != "predictor"  # the predictor is asked again (_track)
        retry = (workloads.retry_annotations(tries=0, now=self.ctx.clock(),
                                             backoff=self.ctx.settings.predict_retry.backoff)
                 if retrying else workloads.retry_cleared(job))
        queued = workloads.kueue_queue(job)
        kube = self.ctx.kube
        try:
            kube.patch_workload(self.kind, meta["namespace"], meta["name"], patch)
            if queued is None:  # Kueue unsuspends a Job it queues, once it admits it
                kube.patch_workload(self.kind, meta["namespace"], meta["name"], self.kind.unsuspend_patch())
        except ApiException as e:
            if e.status not in (400, 403, 409, 422):
                raise  # transient: the next event tries again
            self._say(job, "Invalid", f"the API server refused the prediction's patch ({e.status}): "
                      f"{api_message(e)}", warning=True, reason="PatchRefused")
            return "Invalid"
        best = prediction.fastest()
        used = "predictor" if prediction.source == "predictor" else f"{prediction.source} ({why})"
        handed = ("unsuspended for offpeak-scheduler" if queued is None else
                  f"Kueue queue {queued} admits it (offpeak's admission check: once a forecast window fits)")
        message = (f"predicted {best.job_seconds:.0f}s (p90 {best.job_seconds_p90:.0f}s) on {best.gpu_type} by the "
                   f"{used}; {handed}" if best else handed)
        if retrying:
            message += "; the predictor is asked again while no pod is placed"
        self._say(job, "Predicted", message, prediction=workloads.prediction_summary(remaining,
                                                                                      source=prediction.source),
                  more=retry)
        return workloads.AWAITING_PREDICTOR if retrying else "Predicted"

    def _track(self, job: Mapping[str, Any]) -> str:
        end = workloads.ending(job, self.kind)
        if end is None:
            return self._repredict(job) if workloads.awaiting_predictor(job) else "Predicted"
        meta = job["metadata"]
        predicted = workloads.template_annotations(job, self.kind).get("offpeak.io/predicted-job-seconds", "")
        outcome = "succeeded" if end.succeeded else "failed"
        took = f" in {end.seconds:.0f}s" if end.seconds is not None else ""
        sample = self._report_sample(job, end) if end.succeeded else "not sent: the Job failed"
        self._say(job, "Finished", f"the Job {outcome}{took}; offpeak predicted {predicted or 'nothing'}",
                  warning=not end.succeeded, reason="Succeeded" if end.succeeded else "Failed", sample=sample)
        log.info("Job %s/%s %s%s; sample %s", meta["namespace"], meta["name"], outcome, took, sample)
        return "Finished"

    def _repredict(self, job: Mapping[str, Any]) -> str:
        """Replace the fallback of a workload admitted without the predictor once it answers, while none of its
        pods is placed (placed work keeps its prediction, as a running TrainingJob's does). Returns
        `AWAITING_PREDICTOR` while it is still to be asked (the resync polls it), else "Predicted"."""
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        kube, now = self.ctx.kube, self.ctx.clock()
        if not workloads.reprediction_due(job, now=now):
            return workloads.AWAITING_PREDICTOR
        waiting = workloads.waiting_pods(kube.list_workload_pods(self.kind, namespace, name))
        if waiting is None:  # placed by the fallback: it stays, and nothing is asked again
            kube.patch_workload(self.kind, namespace, name, {"metadata": {"annotations": workloads.retry_cleared(job)}})
            return "Predicted"
        spec, _ = workloads.workload_spec(job, resolve_gpu=self.ctx.resolve_gpu, kind=self.kind)
        graph = self._graph(job, spec) if spec is not None else None
        prediction, why = (self.reconciler.ask_predictor(job, spec, graph) if spec is not None and graph is not None
                           else (None, "the workload's spec or model graph is unreadable"))
        if spec is None or prediction is None:
            tries = workloads.prediction_retries(job) + 1
            retry = workloads.retry_annotations(tries=tries, now=now, backoff=self.ctx.settings.predict_retry.backoff)
            kube.patch_workload(self.kind, namespace, name, {"metadata": {"annotations": retry}})
            log.debug("re-prediction %d of %s %s/%s failed (%s); next at %s", tries, self.kind.kind, namespace, name,
                      why, retry[workloads.ANN_NEXT_PREDICTION])
            return workloads.AWAITING_PREDICTOR
        remaining = remaining_seconds(prediction, completed_steps=0)
        message = f"re-predicted after a fallback: {self.reconciler.predicted_message(prediction)}"
        if self.kind.suspended(job):  # Kueue still holds it: its template may change, so every pod gets the answer
            _, canonical = self.reconciler.gpu_names(spec)
            try:
                kube.patch_workload(self.kind, namespace, name, workloads.admission_patch(
                    job, spec, gpu_types=tuple(canonical), remaining=remaining, kind=self.kind))
            except ApiException as e:
                if e.status not in RECORDED_API_ERRORS:
                    raise
                message += f"; its template keeps the fallback (the API server refused the patch: {api_message(e)})"
        else:  # a started Job's template is immutable: only the pods waiting now can carry the answer
            if not self.reconciler.annotate_waiting_pods(job, waiting, predicted_annotation(remaining)):
                message += "; the waiting pods keep the fallback annotation (the operator may not patch pods)"
            message += f"; pods the {self.kind.kind} creates later keep the template's fallback"
        self._say(job, "Predicted", message, reason="Repredicted",
                  prediction=workloads.prediction_summary(remaining, source=prediction.source),
                  more=workloads.retry_cleared(job))
        return "Predicted"

    def _report_sample(self, job: Mapping[str, Any], end: workloads.Ending) -> str:
        """Post the succeeded Job's run as a predictor sample, as a TrainingJob's is (closing the loop): its mean
        step time over the whole run, on the GPU type of the node it ran on, with its model graph. What became of
        it, in words (the Job's `offpeak.io/sample` annotation)."""
        meta = job["metadata"]
        spec, _ = workloads.workload_spec(job, resolve_gpu=self.ctx.resolve_gpu, kind=self.kind)
        if spec is None or end.seconds is None:
            return "not sent: the Job's spec or run time cannot be read back"
        if spec.model_source.kind == "none":
            return "not sent: the Job has no model graph (offpeak.io/model-source)"
        step = workloads.job_step_seconds(job_seconds=end.seconds, steps=spec.total_steps,
                                          startup_seconds=spec.startup_seconds)  # fmt: skip
        if step is None:
            return f"not sent: {end.seconds:.0f}s is no longer than the assumed start-up"
        node = workloads.ran_on(self.ctx.kube.list_workload_pods(self.kind, meta["namespace"], meta["name"]))
        gpu_type = self.ctx.kube.node_gpu_type(node) if node else ""
        if not gpu_type:
            return "not sent: the node it ran on is not known, or has no GPU type label"
        graph = self._graph(job, spec)
        if graph is None:
            return "not sent: the Job has no model graph (offpeak.io/model-source)"
        try:
            # ignore: precision and optimizer are the spec's strings; the client checks them as the predictor will
            answer = self.ctx.predictor.report_sample(SampleReport(
                gpu=gpu_type, step_seconds=step, job_seconds=end.seconds, steps=spec.total_steps,
                startup_seconds=end.seconds - step * spec.total_steps, job=f"{meta['namespace']}/{meta['name']}",
                graph=graph.to_dict(), graph_hash=graph.content_hash(), mode="train", num_gpus=spec.total_gpus,
                precision=spec.precision, optimizer=spec.optimizer))  # type: ignore[arg-type]
        except PredictorUnavailable as e:  # unreachable, 5xx, or refused (a quarantined sample too)
            return f"not learned: {e}"
        outcome = str(answer.get("status") or "stored")
        return f"{outcome}: {answer['reason']}" if answer.get("reason") else outcome

    def _say(self, job: Mapping[str, Any], word: str, message: str, *, warning: bool = False, reason: str = "",
             prediction: str | None = None, sample: str | None = None,
             more: Mapping[str, str | None] | None = None) -> None:
        """Record the decision on the Job (annotations, `more` among them) and as an Event."""
        meta = job["metadata"]
        self.ctx.kube.patch_workload(self.kind, meta["namespace"], meta["name"], workloads.state_patch(
            word, message, prediction=prediction, sample=sample, more=more))
        self.ctx.kube.emit_event(dict(job), type="Warning" if warning else "Normal", reason=reason or word,
                                 message=message, now=self.ctx.clock())

