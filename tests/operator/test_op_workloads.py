"""batch/v1 Jobs that opt in by a pod-template label: parsed, predicted, annotated, unsuspended, recorded."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import msgspec

import kubernetes_validate
from kubernetes.client.exceptions import ApiException
from optestkit import NOW, small_graph
from prometheus_client import CollectorRegistry

from offpeak_core.gangs import GangKey
from offpeak_core.jobkinds import BATCH_JOB, PYTORCH_JOB, JobKind
from offpeak_extender.wire import parse_gang
from offpeak_graph.schema import ModelGraph
from offpeak_operator import workloads
from offpeak_operator.graphstore import encode_graph, to_log_lines
from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.predictor_http import PredictorUnavailable, SampleReport
from offpeak_operator.reconciler import Context, Reconciler
from offpeak_operator.resync import Resyncer
from offpeak_operator.settings import AnalysisSettings, OperatorSettings
from offpeak_operator.workload_reconciler import WorkloadReconciler


def batch_job(*, suspend: bool = True, scheduler: str = "offpeak-scheduler", **ann: str) -> dict[str, Any]:
    annotations = {"offpeak.io/batch-size": "32", "offpeak.io/steps": "1000", "offpeak.io/gpu-types": "A100,T4",
                   "offpeak.io/estimated-seconds": "600", **ann}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "nightly", "namespace": "team", "uid": "u1", "annotations": {}},
        "spec": {"suspend": suspend, "backoffLimit": 4, "template": {
            "metadata": {"labels": {"offpeak.io/offline": "true"}, "annotations": annotations},
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "pool", "operator": "In", "values": ["batch"]}]}]}}},
                     "containers": [{"name": "train", "image": "example/train:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}},
    }  # fmt: skip


def test_only_jobs_whose_template_carries_the_label_opt_in() -> None:
    job = batch_job()
    assert workloads.opted_in(job)
    job["spec"]["template"]["metadata"]["labels"] = {"offpeak.io/offline": "false"}
    assert not workloads.opted_in(job)


def test_a_jobs_annotations_become_a_predictable_spec() -> None:
    spec, problems = workloads.workload_spec(batch_job(**{"offpeak.io/model-source": "torchvision:resnet50",
                                                          "offpeak.io/precision": "bf16"}), resolve_gpu=None)
    assert problems == [] and spec is not None
    assert (spec.batch_size, spec.steps, spec.gpus_per_worker, spec.precision) == (32, 1000, 4, "bf16")
    assert spec.model_source.kind == "torchvision" and spec.model_source.value == "resnet50"
    assert spec.gpu_types == ("A100", "T4") and spec.estimated_seconds == 600.0


def test_what_cannot_be_predicted_says_which_annotation_or_field() -> None:
    _, problems = workloads.workload_spec(batch_job(scheduler="default-scheduler"), resolve_gpu=None)
    assert "schedulerName: offpeak-scheduler" in problems[0].message
    _, problems = workloads.workload_spec(batch_job(**{"offpeak.io/model-source": "s3://x"}), resolve_gpu=None)
    assert "must be one of torchvision:<name>" in problems[0].message
    _, problems = workloads.workload_spec(batch_job(**{"offpeak.io/batch-size": "many"}), resolve_gpu=None)
    assert "offpeak.io/batch-size must be an integer" in problems[0].message
    no_gpus = batch_job()
    del no_gpus["spec"]["template"]["metadata"]["annotations"]["offpeak.io/gpu-types"]
    assert any("gpuTypes" in p.message for p in workloads.workload_spec(no_gpus, resolve_gpu=None)[1])


def test_the_admission_patch_is_a_valid_job_with_the_prediction_and_anded_affinity() -> None:
    job = batch_job()
    spec, _ = workloads.workload_spec(job, resolve_gpu=None)
    remaining = {"A100-SXM4-40GB": {"p50": 500.0, "p90": 700.0}}
    patch = workloads.admission_patch(job, spec, gpu_types=("A100-SXM4-40GB",), remaining=remaining)
    merged = copy.deepcopy(job)
    merged["spec"]["template"]["metadata"]["annotations"].update(patch["spec"]["template"]["metadata"]["annotations"])
    merged["spec"]["template"]["metadata"]["labels"].update(patch["spec"]["template"]["metadata"]["labels"])
    merged["spec"]["template"]["spec"]["affinity"] = patch["spec"]["template"]["spec"]["affinity"]
    kubernetes_validate.validate(merged, "1.32", strict=True)
    ann = merged["spec"]["template"]["metadata"]["annotations"]
    assert json.loads(ann["offpeak.io/predicted-job-seconds"]) == remaining
    terms = merged["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(t["matchExpressions"][0]["key"] == "pool" for t in terms) and len(terms) == 2


class JobKube:
    """Just enough of KubeIO for opted-in workloads: merge patches applied to one stored object of one kind."""

    def __init__(self, job: dict[str, Any], kind: JobKind = BATCH_JOB) -> None:
        self.job, self.kind, self.events, self.patches = job, kind, [], []

    def get_workload(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind is self.kind
        return copy.deepcopy(self.job)

    def patch_workload(self, kind: JobKind, namespace: str, name: str, patch: dict[str, Any]) -> None:
        assert kind is self.kind
        self.patches.append(patch)
        _merge(self.job, patch)

    def get_configmap(self, namespace: str, name: str) -> None:
        return None

    def emit_event(self, job: dict[str, Any], *, type: str, reason: str, message: str, now=None) -> None:
        self.events.append((job["kind"], type, reason, message))


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """A JSON merge patch, as the API server applies it (null deletes)."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def make(job: dict[str, Any], kind: JobKind = BATCH_JOB) -> tuple[WorkloadReconciler, JobKube]:
    kube = JobKube(job, kind)

    class NoPredictor:
        def predict(self, **_: Any) -> dict[str, Any]:
            raise AssertionError("no graph: the predictor is not asked")

    ctx = Context(settings=OperatorSettings(), kube=kube, predictor=NoPredictor(),  # type: ignore[arg-type]
                  metrics=OperatorMetrics(CollectorRegistry()), resolve_gpu=None, clock=lambda: NOW)
    return WorkloadReconciler(Reconciler(ctx), kind), kube


def test_a_suspended_job_is_predicted_annotated_and_unsuspended_then_its_ending_recorded() -> None:
    rec, kube = make(batch_job())
    assert rec.reconcile("team", "nightly") == "Predicted"
    assert kube.job["spec"]["suspend"] is False
    assert kube.patches[0]["spec"]["template"] and kube.patches[1] == {"spec": {"suspend": False}}  # template first
    template = kube.job["spec"]["template"]["metadata"]  # a Job's parallel pods are independent: no gang
    assert "offpeak.io/gang" not in template["labels"] and "offpeak.io/gang-size" not in template["annotations"]
    ann = kube.job["spec"]["template"]["metadata"]["annotations"]
    assert json.loads(ann["offpeak.io/predicted-job-seconds"])["T4"]["p50"] == 600.0  # the user's estimate
    assert kube.job["metadata"]["annotations"]["offpeak.io/state"].startswith("Predicted: predicted 600s")
    assert json.loads(kube.job["metadata"]["annotations"]["offpeak.io/prediction"])["source"] == "user-estimate"
    assert kube.events[-1][:3] == ("Job", "Normal", "Predicted")
    assert rec.reconcile("team", "nightly") == "Predicted" and len(kube.patches) == 3  # nothing more to do
    kube.job["status"] = {"startTime": "2026-11-21T06:00:00Z", "completionTime": "2026-11-21T06:11:00Z",
                          "conditions": [{"type": "Complete", "status": "True"}]}
    assert rec.reconcile("team", "nightly") == "Finished"
    assert "succeeded in 660s" in kube.job["metadata"]["annotations"]["offpeak.io/state"]
    assert rec.reconcile("team", "nightly") == "Finished" and kube.events[-1][2] == "Succeeded"


def test_a_job_queued_in_kueue_is_predicted_but_left_suspended_for_kueue_to_admit() -> None:
    job = batch_job()
    job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "gpu-queue"
    rec, kube = make(job)
    assert rec.reconcile("team", "nightly") == "Predicted"
    assert kube.job["spec"]["suspend"] is True and {"spec": {"suspend": False}} not in kube.patches
    assert "offpeak.io/predicted-job-seconds" in kube.job["spec"]["template"]["metadata"]["annotations"]
    assert "Kueue queue gpu-queue admits it" in kube.job["metadata"]["annotations"]["offpeak.io/state"]


def test_an_invalid_job_stays_suspended_and_says_why_once() -> None:
    rec, kube = make(batch_job(scheduler="default-scheduler"))
    assert rec.reconcile("team", "nightly") == "Invalid"
    assert kube.job["spec"]["suspend"] is True and len(kube.events) == 1 and kube.events[0][1] == "Warning"
    assert rec.reconcile("team", "nightly") == "Invalid" and len(kube.events) == 1


def test_an_unsuspended_job_is_warned_about_once_and_left_alone() -> None:
    rec, kube = make(batch_job(suspend=False))
    assert rec.reconcile("team", "nightly") == "Unpredicted"
    assert rec.reconcile("team", "nightly") == "Unpredicted" and len(kube.events) == 1
    assert "spec.suspend: true" in kube.events[0][3]
    assert "offpeak.io/predicted-job-seconds" not in kube.job["spec"]["template"]["metadata"]["annotations"]


class SampleKube(JobKube):
    """A Job that has run: its pods (one failed try, then the succeeded one) on labelled nodes."""

    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        super().__init__(job)
        self.pods = pods

    def list_workload_pods(self, kind: JobKind, namespace: str, name: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)

    def node_gpu_type(self, node: str) -> str:
        return {"gpu-t4-0": "T4", "gpu-a100-0": "A100-SXM4-40GB"}.get(node, "")


class SamplePredictor:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.samples = fail, []

    def report_sample(self, sample: SampleReport) -> dict[str, Any]:
        if self.fail:
            raise PredictorUnavailable("predictor /v1/samples: unreachable")
        self.samples.append(msgspec.structs.asdict(sample))  # every field, defaults included
        return {"status": "accepted"}


def _ended_job(*, succeeded: bool = True, end: str = "06:11:00", **ann: str) -> dict[str, Any]:
    job = batch_job(suspend=False, **{"offpeak.io/model-source": "torchvision:resnet18", **ann})
    job["metadata"]["annotations"]["offpeak.io/state"] = "Predicted: predicted 600s"
    job["status"] = {"startTime": "2026-11-21T06:00:00Z", "completionTime": f"2026-11-21T{end}Z",
                     "conditions": [{"type": "Complete" if succeeded else "Failed", "status": "True"}]}
    return job


def _pod(node: str, phase: str, started: str) -> dict[str, Any]:
    return {"spec": {"nodeName": node}, "status": {"phase": phase, "startTime": started}}


def _sampling(job: dict[str, Any], predictor: SamplePredictor, pods: list[dict[str, Any]] | None = None):
    kube = SampleKube(job, pods if pods is not None else [_pod("gpu-a100-0", "Failed", "2026-11-21T06:00:05Z"),
                                                          _pod("gpu-t4-0", "Succeeded", "2026-11-21T06:02:00Z")])
    ctx = Context(settings=OperatorSettings(), kube=kube, predictor=predictor,  # type: ignore[arg-type]
                  metrics=OperatorMetrics(CollectorRegistry()), resolve_gpu=None, clock=lambda: NOW,
                  extract=lambda spec, timeout: small_graph(name=spec.model_source.value))
    return WorkloadReconciler(Reconciler(ctx)), kube


def test_a_succeeded_job_becomes_a_predictor_sample_on_the_gpu_type_it_ran_on() -> None:
    predictor = SamplePredictor()
    rec, kube = _sampling(_ended_job(), predictor)
    assert rec.reconcile("team", "nightly") == "Finished"
    (sent,) = predictor.samples
    assert sent["gpu"] == "T4"  # the succeeded pod's node, not the failed try's
    assert sent["steps"] == 1000 and sent["job_seconds"] == 660.0
    assert sent["step_seconds"] == (660.0 - 60.0) / 1000  # the run less the predictor's default start-up
    assert sent["graph_hash"] == small_graph(name="resnet18").content_hash() and sent["graph"]["ops"]
    assert (sent["precision"], sent["num_gpus"], sent["job"]) == ("fp32", 4, "team/nightly")
    assert kube.job["metadata"]["annotations"]["offpeak.io/sample"] == "accepted"
    assert rec.reconcile("team", "nightly") == "Finished" and len(predictor.samples) == 1  # once


def test_a_job_sample_that_cannot_be_sent_says_why_on_the_job() -> None:
    cases = [
        (_ended_job(), SamplePredictor(fail=True), None, "not learned: predictor /v1/samples: unreachable"),
        (_ended_job(succeeded=False), SamplePredictor(), None, "not sent: the Job failed"),
        (_ended_job(**{"offpeak.io/model-source": ""}), SamplePredictor(), None, "not sent: the Job has no model"),
        (_ended_job(end="06:00:04", **{"offpeak.io/model-source": ""}), SamplePredictor(), None,
         "not sent: the Job has no model"),  # the missing source is the reason, not the short run
        (_ended_job(), SamplePredictor(), [], "not sent: the node it ran on is not known"),
        (_ended_job(end="06:00:45"), SamplePredictor(), None, "not sent: 45s is no longer than the assumed start-up"),
    ]
    for job, predictor, pods, said in cases:
        rec, kube = _sampling(job, predictor, pods)
        assert rec.reconcile("team", "nightly") == "Finished"
        assert kube.job["metadata"]["annotations"]["offpeak.io/sample"].startswith(said), said
        assert predictor.samples == []


def pytorch_job(*, suspend: bool = True, workers: int = 3) -> dict[str, Any]:
    def replica(n: int, annotations: dict[str, str]) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {
            "metadata": {"labels": {"offpeak.io/offline": "true"}, "annotations": annotations},
            "spec": {"schedulerName": "offpeak-scheduler", "containers": [
                {"name": "pytorch", "image": "example/ddp:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}

    said = {"offpeak.io/batch-size": "16", "offpeak.io/steps": "500", "offpeak.io/gpu-types": "H100",
            "offpeak.io/estimated-seconds": "900"}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": "team", "uid": "u2", "annotations": {}},
        "spec": {"runPolicy": {"suspend": suspend},
                 "pytorchReplicaSpecs": {"Worker": replica(workers, {}), "Master": replica(1, said)}},
    }  # fmt: skip


def test_a_pytorchjob_is_read_from_its_master_and_predicted_for_all_its_replicas_together() -> None:
    job = pytorch_job()
    assert workloads.opted_in(job, PYTORCH_JOB) and not workloads.opted_in(job)  # not a batch Job's shape
    assert list(PYTORCH_JOB.templates(job)) == ["Master", "Worker"]
    spec, problems = workloads.workload_spec(job, resolve_gpu=None, kind=PYTORCH_JOB)
    assert problems == [] and spec is not None
    assert (spec.workers, spec.gpus_per_worker, spec.batch_size, spec.total_steps) == (4, 2, 16, 500)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    _, problems = workloads.workload_spec(job, resolve_gpu=None, kind=PYTORCH_JOB)
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName" in problems[0].message


def test_a_suspended_pytorchjob_gets_every_replicas_template_annotated_then_is_unsuspended() -> None:
    job = pytorch_job(workers=1)
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]  # a Master alone: no Worker may be created by the patch
    rec, kube = make(job, PYTORCH_JOB)
    assert rec.reconcile("team", "ddp") == "Predicted"
    assert kube.job["spec"]["runPolicy"]["suspend"] is False
    assert set(kube.job["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    rec, kube = make(pytorch_job(workers=2), PYTORCH_JOB)
    assert rec.reconcile("team", "ddp") == "Predicted"
    for replica in ("Master", "Worker"):
        template = kube.job["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert set(json.loads(template["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])) == {"H100"}
        assert template["metadata"]["labels"]["offpeak.io/workload"] == "offline"
        assert template["spec"]["affinity"]["nodeAffinity"]
        # one gang of all 3 replicas (Master + 2 Workers): the extender places them all or none
        assert template["metadata"]["labels"]["offpeak.io/gang"] == "ddp"
        assert template["metadata"]["annotations"]["offpeak.io/gang-size"] == "3"
        gang = parse_gang({**template["metadata"], "namespace": "team"})  # as the extender reads the pods
        assert gang is not None and gang.size == 3 and gang.key == GangKey("team", "gang:ddp", "")
    assert kube.patches[-2] == {"spec": {"runPolicy": {"suspend": False}}}  # after the templates, before the state
    assert kube.events[-1][:3] == ("PyTorchJob", "Normal", "Predicted")
    kube.job["status"] = {"startTime": "2026-11-21T06:00:00Z", "completionTime": "2026-11-21T06:20:00Z",
                          "conditions": [{"type": "Created", "status": "True"},
                                         {"type": "Succeeded", "status": "True"}]}
    assert rec.reconcile("team", "ddp") == "Finished"
    assert "succeeded in 1200s" in kube.job["metadata"]["annotations"]["offpeak.io/state"]


def test_an_unsuspended_pytorchjob_is_warned_about_with_its_own_field() -> None:
    rec, kube = make(pytorch_job(suspend=False), PYTORCH_JOB)
    assert rec.reconcile("team", "ddp") == "Unpredicted"
    assert "spec.runPolicy.suspend: true" in kube.events[0][3]


# ---- an entry point, analysed in the Job's own image -------------------------------------------------------


class AnalysisKube(JobKube):
    """JobKube plus the pods, logs and ConfigMaps an entry point's analysis makes and reads."""

    def __init__(self, job: dict[str, Any], kind: JobKind = BATCH_JOB, *, reject_pods: int | None = None) -> None:
        super().__init__(job, kind)
        self.pods: dict[str, dict[str, Any]] = {}
        self.created_pods: list[str] = []
        self.logs: dict[str, str] = {}
        self.configmaps: dict[str, dict[str, Any]] = {}
        self.reject_pods = reject_pods

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.pods.get(name))

    def create_pod(self, body: dict[str, Any]) -> bool:
        if self.reject_pods is not None:
            raise ApiException(status=self.reject_pods, reason="Forbidden")
        name = body["metadata"]["name"]
        if name in self.pods:
            return False
        self.pods[name] = {**copy.deepcopy(body), "status": {"phase": "Pending"}}
        self.pods[name]["metadata"]["creationTimestamp"] = "2026-11-21T06:00:00Z"  # NOW
        self.created_pods.append(name)
        return True

    def delete_pod(self, namespace: str, name: str) -> None:
        self.pods.pop(name, None)

    def pod_log(self, namespace: str, name: str, container: str) -> str:
        assert container == "emit"
        if name not in self.logs:
            raise ApiException(status=400, reason="container not found")
        return self.logs[name]

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.configmaps.get(name))

    def create_configmap(self, body: dict[str, Any]) -> bool:
        if body["metadata"]["name"] in self.configmaps:
            return False  # as the API server's 409
        self.configmaps[body["metadata"]["name"]] = copy.deepcopy(body)
        return True

    def replace_configmap(self, body: dict[str, Any]) -> None:
        assert body["metadata"]["name"] in self.configmaps  # a PUT of an absent object is a 404
        self.configmaps[body["metadata"]["name"]] = copy.deepcopy(body)


class GraphPredictor:
    """Answers from the graph it is given (it must be the analysed one)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def predict(self, **body: Any) -> dict[str, Any]:
        self.requests.append(body)
        return {"model_version": "m1", "graph_hash": "sha256:x", "predictions": [
            {"gpu": g, "gpu_type": g, "step_seconds": 0.2, "step_seconds_p90": 0.3, "job_seconds": 260.0,
             "job_seconds_p90": 360.0, "model_version": "m1"} for g in body["gpus"]]}


def entrypoint_job(source: str = "entrypoint:team.models:build", **ann: str) -> dict[str, Any]:
    job = batch_job(**{"offpeak.io/model-source": source, "offpeak.io/input-shape": "3,64,64", **ann})
    container = job["spec"]["template"]["spec"]["containers"][0]
    container.update(env=[{"name": "MODEL_DEPTH", "value": "18"}], workingDir="/src")
    job["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "registry"}]
    return job


def analysing(job: dict[str, Any], kind: JobKind = BATCH_JOB, *, extract_image: str = "", **kube_kw: Any):
    kube = AnalysisKube(job, kind, **kube_kw)
    clock = {"now": NOW}
    predictor = GraphPredictor()
    settings = OperatorSettings(analysis=AnalysisSettings(extract_image=extract_image))
    ctx = Context(settings=settings, kube=kube, predictor=predictor,  # type: ignore[arg-type]
                  metrics=OperatorMetrics(CollectorRegistry()), resolve_gpu=None, clock=lambda: clock["now"])
    return WorkloadReconciler(Reconciler(ctx), kind), kube, predictor, clock


def _finish_analysis(kube: AnalysisKube, pod: str, graph) -> None:
    encoded = encode_graph(graph)
    kube.logs[pod] = "\n".join(to_log_lines(encoded.data, {"hash": encoded.graph_hash, "reduced": "",
                                                           "original_ops": len(graph.ops)}))
    kube.pods[pod]["status"] = {"phase": "Succeeded"}


def test_an_entry_point_and_its_input_shape_become_a_spec_run_with_the_training_containers_settings() -> None:
    spec, problems = workloads.workload_spec(entrypoint_job(), resolve_gpu=None)
    assert problems == [] and spec is not None
    assert (spec.model_source.kind, spec.model_source.value) == ("entrypoint", "team.models:build")
    assert spec.input_shape == (3, 64, 64) and spec.image == "example/train:1" and spec.working_dir == "/src"
    assert spec.env == ({"name": "MODEL_DEPTH", "value": "18"},)
    assert spec.image_pull_secrets == ({"name": "registry"},)
    no_shape = entrypoint_job()
    del no_shape["spec"]["template"]["metadata"]["annotations"]["offpeak.io/input-shape"]
    assert any("inputShape" in p.message for p in workloads.workload_spec(no_shape, resolve_gpu=None)[1])
    _, problems = workloads.workload_spec(entrypoint_job(**{"offpeak.io/input-shape": "3xx64"}), resolve_gpu=None)
    assert "offpeak.io/input-shape must be comma-separated integers" in problems[0].message
    _, problems = workloads.workload_spec(entrypoint_job("entrypoint:not a module"), resolve_gpu=None)
    assert problems and problems[0].reason == "InvalidModelSource"


def test_an_entry_point_is_extracted_in_an_owned_analysis_pod_then_predicted_from_its_graph() -> None:
    rec, kube, predictor, _ = analysing(entrypoint_job())
    assert rec.reconcile("team", "nightly") == "Analyzing"
    pod = kube.pods["job-nightly-analysis"]
    kubernetes_validate.validate({k: v for k, v in pod.items() if k != "status"}, "1.32", strict=True)
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "nightly",
                                                   "uid": "u1"}]  # not a controller's: the Job controller ignores it
    assert pod["metadata"]["labels"] == {"offpeak.io/role": "analysis", "offpeak.io/workload-kind": "Job",
                                         "offpeak.io/workload-name": "nightly"}
    assert pod["metadata"]["annotations"] == {"offpeak.io/model-source": "team.models:build"}
    extract = pod["spec"]["initContainers"][1]
    assert extract["image"] == "example/train:1" and extract["workingDir"] == "/src"
    assert "--entrypoint" in extract["command"] and "team.models:build" in extract["command"]
    assert {"name": "MODEL_DEPTH", "value": "18"} in extract["env"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}] and "nvidia.com/gpu" not in str(pod)
    assert kube.job["spec"]["suspend"] is True
    assert kube.job["metadata"]["annotations"]["offpeak.io/state"].startswith(
        "Analyzing: extracting the model graph from team.models:build in analysis pod job-nightly-analysis")
    assert rec.reconcile("team", "nightly") == "Analyzing"  # still running: nothing new
    assert kube.created_pods == ["job-nightly-analysis"] and len(kube.events) == 1

    graph = small_graph(name="user-model")
    _finish_analysis(kube, "job-nightly-analysis", graph)
    assert rec.reconcile("team", "nightly") == "Predicted"
    (asked,) = predictor.requests
    assert ModelGraph.from_dict(asked["graph"]).content_hash() == graph.content_hash()
    assert kube.job["spec"]["suspend"] is False and "job-nightly-analysis" not in kube.pods
    cm = kube.configmaps["job-nightly-graph"]
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert cm["metadata"]["annotations"]["offpeak.io/graph-hash"] == graph.content_hash()
    assert json.loads(kube.job["metadata"]["annotations"]["offpeak.io/analysis"])["outcome"] == "extracted"
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_analysis_duration_seconds_count",
                                                     {"source": "entrypoint", "outcome": "ok"}) == 1
    assert "by the predictor" in kube.job["metadata"]["annotations"]["offpeak.io/state"]
    # the sample of the finished Job is sent with the stored graph
    assert rec._graph(kube.job, workloads.workload_spec(kube.job, resolve_gpu=None)[0]).content_hash() == \
        graph.content_hash()


def test_with_an_extract_image_a_torchvision_source_is_extracted_in_an_owned_analysis_pod() -> None:
    rec, kube, predictor, _ = analysing(batch_job(**{"offpeak.io/model-source": "torchvision:resnet50"}),
                                        extract_image="offpeak:1-extract")
    rec.ctx.extract = lambda spec, timeout: (_ for _ in ()).throw(AssertionError("no torch in the operator"))
    assert rec.reconcile("team", "nightly") == "Analyzing"
    pod = kube.pods["job-nightly-analysis"]
    kubernetes_validate.validate({k: v for k, v in pod.items() if k != "status"}, "1.32", strict=True)
    assert pod["metadata"]["annotations"] == {"offpeak.io/model-source": "torchvision:resnet50"}
    (extract,) = pod["spec"]["initContainers"]
    assert extract["image"] == "offpeak:1-extract" and extract["command"][1:4] == ["extract", "--torchvision",
                                                                                    "resnet50"]
    assert kube.job["metadata"]["annotations"]["offpeak.io/state"].endswith("in offpeak:1-extract")
    graph = small_graph(name="resnet50")
    _finish_analysis(kube, "job-nightly-analysis", graph)
    assert rec.reconcile("team", "nightly") == "Predicted"
    (asked,) = predictor.requests
    assert ModelGraph.from_dict(asked["graph"]).content_hash() == graph.content_hash()
    cm = kube.configmaps["job-nightly-graph"]
    assert cm["metadata"]["annotations"]["offpeak.io/model-source"] == "torchvision:resnet50"
    assert cm["metadata"]["annotations"]["offpeak.io/graph-source"] == "torchvision"
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_analysis_duration_seconds_count",
                                                     {"source": "torchvision", "outcome": "ok"}) == 1
    spec = workloads.workload_spec(kube.job, resolve_gpu=None)[0]
    assert rec._graph(kube.job, spec).content_hash() == graph.content_hash()  # the sample's graph, stored


def test_an_entry_point_the_extractor_rejects_leaves_the_job_invalid_until_the_annotation_changes() -> None:
    rec, kube, predictor, _ = analysing(entrypoint_job())
    assert rec.reconcile("team", "nightly") == "Analyzing"
    kube.pods["job-nightly-analysis"]["status"] = {"phase": "Failed", "initContainerStatuses": [
        {"name": "extract", "state": {"terminated": {"exitCode": 2, "message": "cannot import team.models"}}}]}
    assert rec.reconcile("team", "nightly") == "Invalid"
    state = kube.job["metadata"]["annotations"]["offpeak.io/state"]
    assert state == "Invalid: invalid model source: cannot import team.models"
    assert kube.events[-1][1:3] == ("Warning", "InvalidModelSource") and kube.job["spec"]["suspend"] is True
    assert rec.reconcile("team", "nightly") == "Invalid"  # not analysed again, not said again
    assert kube.created_pods == ["job-nightly-analysis"] and len(kube.events) == 2 and predictor.requests == []
    kube.job["spec"]["template"]["metadata"]["annotations"]["offpeak.io/model-source"] = "entrypoint:team.fixed:build"
    assert rec.reconcile("team", "nightly") == "Analyzing" and kube.created_pods[-1] == "job-nightly-analysis"
    assert len(kube.created_pods) == 2


def test_an_analysis_of_an_entry_point_the_job_no_longer_names_is_replaced() -> None:
    rec, kube, _, _ = analysing(entrypoint_job())
    assert rec.reconcile("team", "nightly") == "Analyzing"
    kube.job["spec"]["template"]["metadata"]["annotations"]["offpeak.io/model-source"] = "entrypoint:team.v2:build"
    _finish_analysis(kube, "job-nightly-analysis", small_graph(name="old-model"))  # the old source's graph
    assert rec.reconcile("team", "nightly") == "Analyzing" and kube.pods == {}  # not collected: deleted
    assert rec.reconcile("team", "nightly") == "Analyzing"
    assert kube.pods["job-nightly-analysis"]["metadata"]["annotations"]["offpeak.io/model-source"] == \
        "team.v2:build"
    assert "job-nightly-graph" not in kube.configmaps


def test_a_graph_of_an_entry_point_the_job_no_longer_names_is_replaced_not_reused() -> None:
    """Extracted, then refused on admission (the Job stays suspended), then pointed at another entry point: the new
    analysis must predict from, and keep, the new graph, never the old ConfigMap's (which used to be kept: the
    ConfigMap was only created when absent)."""
    rec, kube, predictor, _ = analysing(entrypoint_job())
    old, new = small_graph(name="old-model"), small_graph(3, name="new-model")
    assert old.content_hash() != new.content_hash()
    assert rec.reconcile("team", "nightly") == "Analyzing"
    _finish_analysis(kube, "job-nightly-analysis", old)
    assert rec.reconcile("team", "nightly") == "Predicted"
    # as `_admit` leaves a Job whose prediction's patch the API server refused: suspended, Invalid
    kube.job["spec"]["suspend"] = True
    kube.job["metadata"]["annotations"]["offpeak.io/state"] = "Invalid: the API server refused the prediction's patch"
    kube.job["spec"]["template"]["metadata"]["annotations"]["offpeak.io/model-source"] = "entrypoint:team.v2:build"
    assert rec._graph(kube.job, workloads.workload_spec(kube.job, resolve_gpu=None)[0]) is None  # not v2's graph
    assert rec.reconcile("team", "nightly") == "Analyzing"
    _finish_analysis(kube, "job-nightly-analysis", new)
    assert rec.reconcile("team", "nightly") == "Predicted"
    assert ModelGraph.from_dict(predictor.requests[-1]["graph"]).content_hash() == new.content_hash()
    cm = kube.configmaps["job-nightly-graph"]
    assert cm["metadata"]["annotations"]["offpeak.io/graph-hash"] == new.content_hash()
    assert cm["metadata"]["annotations"]["offpeak.io/model-source"] == "team.v2:build"


def test_an_invalid_job_always_says_its_current_reason() -> None:
    rec, kube, _, _ = analysing(entrypoint_job())
    assert rec.reconcile("team", "nightly") == "Analyzing"
    kube.pods["job-nightly-analysis"]["status"] = {"phase": "Failed", "initContainerStatuses": [
        {"name": "extract", "state": {"terminated": {"exitCode": 2, "message": "build() needs an argument"}}}]}
    assert rec.reconcile("team", "nightly") == "Invalid"
    annotations = kube.job["spec"]["template"]["metadata"]["annotations"]
    annotations["offpeak.io/batch-size"] = "many"
    assert rec.reconcile("team", "nightly") == "Invalid"
    assert "offpeak.io/batch-size must be an integer" in kube.job["metadata"]["annotations"]["offpeak.io/state"]
    annotations["offpeak.io/batch-size"] = "32"  # fixed: the entry point is still the one that cannot be built
    assert rec.reconcile("team", "nightly") == "Invalid"
    assert kube.job["metadata"]["annotations"]["offpeak.io/state"] == \
        "Invalid: invalid model source: build() needs an argument"


def test_a_hung_or_refused_analysis_falls_back_to_a_prediction_without_the_graph_and_says_why() -> None:
    rec, kube, predictor, clock = analysing(entrypoint_job())
    assert rec.reconcile("team", "nightly") == "Analyzing"
    settings = OperatorSettings().analysis
    clock["now"] = NOW + timedelta(seconds=settings.timeout_seconds + settings.grace_seconds + 1)
    assert rec.reconcile("team", "nightly") == "Predicted"
    assert "job-nightly-analysis" not in kube.pods and predictor.requests == [] and kube.job["spec"]["suspend"] is False
    state = kube.job["metadata"]["annotations"]["offpeak.io/state"]
    assert f"by the user-estimate (no graph after {settings.timeout_seconds}s of analysis)" in state, state
    failed = {"source": "entrypoint", "outcome": "failed"}
    registry = rec.ctx.metrics.registry
    assert registry.get_sample_value("offpeak_analysis_duration_seconds_count", failed) == 1
    assert registry.get_sample_value("offpeak_analysis_duration_seconds_sum", failed) == \
        settings.timeout_seconds + settings.grace_seconds + 1

    rec, kube, predictor, _ = analysing(entrypoint_job(), reject_pods=403)
    assert rec.reconcile("team", "nightly") == "Predicted" and kube.pods == {}
    assert "the API server rejected the analysis pod" in kube.job["metadata"]["annotations"]["offpeak.io/state"]


def test_a_pytorchjobs_analysis_runs_in_its_masters_image_under_its_own_names() -> None:
    job = pytorch_job()
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    master["metadata"]["annotations"].update({"offpeak.io/model-source": "entrypoint:ddp.model:build",
                                              "offpeak.io/seq-len": "128"})
    rec, kube, _, _ = analysing(job, PYTORCH_JOB)
    assert rec.reconcile("team", "ddp") == "Analyzing"
    pod = kube.pods["pytorchjob-ddp-analysis"]
    assert pod["spec"]["initContainers"][1]["image"] == "example/ddp:1"
    assert pod["metadata"]["ownerReferences"][0] == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                     "name": "ddp", "uid": "u2"}
    assert kube.job["spec"]["runPolicy"]["suspend"] is True


# ---- a fallback replaced once the predictor is back (as a TrainingJob's) -----------------------------------------


class PodsKube(JobKube):
    """JobKube plus the workload's pods, which the operator lists and may annotate (or be refused to)."""

    def __init__(self, job: dict[str, Any], kind: JobKind = BATCH_JOB) -> None:
        super().__init__(job, kind)
        self.pods: dict[str, dict[str, Any]] = {}
        self.refuse_pods: int | None = None
        self.listed = 0

    def list_workload_pods(self, kind: JobKind, namespace: str, name: str) -> list[dict[str, Any]]:
        self.listed += 1
        return copy.deepcopy(list(self.pods.values()))

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        if self.refuse_pods is not None:
            raise ApiException(status=self.refuse_pods, reason="Forbidden")
        self.pods[name]["metadata"]["annotations"].update(annotations)

    def add_pod(self, name: str, *, node: str | None = None, phase: str = "Pending") -> None:
        template = copy.deepcopy(self.kind.primary_template(self.job)["metadata"])
        self.pods[name] = {"metadata": {"name": name, **template}, "spec": {"nodeName": node} if node else {},
                           "status": {"phase": phase}}

    def pod_prediction(self, name: str) -> dict[str, Any]:
        return json.loads(self.pods[name]["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])


class FlakyPredictor(GraphPredictor):
    """GraphPredictor that is unreachable while `down`."""

    def __init__(self) -> None:
        super().__init__()
        self.down, self.asked = True, 0

    def predict(self, **body: Any) -> dict[str, Any]:
        self.asked += 1
        if self.down:
            raise PredictorUnavailable("predictor /v1/predict: unreachable")
        return super().predict(**body)


def repredicting(job: dict[str, Any], kind: JobKind = BATCH_JOB, *, down: bool = True):
    """A workload with a graph (in-process extraction), admitted while the predictor is down (or up)."""
    kube, predictor, clock = PodsKube(job, kind), FlakyPredictor(), {"now": NOW}
    predictor.down = down
    ctx = Context(settings=OperatorSettings(), kube=kube, predictor=predictor,  # type: ignore[arg-type]
                  metrics=OperatorMetrics(CollectorRegistry()), resolve_gpu=None, clock=lambda: clock["now"],
                  extract=lambda spec, timeout: small_graph(name=spec.model_source.value))
    rec = WorkloadReconciler(Reconciler(ctx), kind)
    assert rec.reconcile("team", job["metadata"]["name"]) == (workloads.AWAITING_PREDICTOR if down else "Predicted")
    return rec, kube, predictor, clock


def _ann(kube: JobKube) -> dict[str, str]:
    return kube.job["metadata"]["annotations"]


def _summary(kube: JobKube) -> dict[str, Any]:
    return json.loads(_ann(kube)["offpeak.io/prediction"])


def _at(seconds: float) -> Any:
    return NOW + timedelta(seconds=seconds)


def test_a_jobs_fallback_is_replaced_on_its_waiting_pods_once_the_predictor_is_back() -> None:
    rec, kube, predictor, clock = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}))
    assert kube.job["spec"]["suspend"] is False and _summary(kube)["source"] == "user-estimate"
    assert _ann(kube)["offpeak.io/prediction-retries"] == "0"
    assert _ann(kube)["offpeak.io/next-prediction-time"] == "2026-11-21T06:00:15Z"  # backoff(1): 15 s
    assert "the predictor is asked again" in _ann(kube)["offpeak.io/state"]
    kube.add_pod("nightly-a")
    assert kube.pod_prediction("nightly-a")["T4"]["p50"] == 600.0  # the template's fallback
    predictor.down = False
    clock["now"] = _at(10)  # not yet due: nothing is asked or listed
    assert rec.reconcile("team", "nightly") == workloads.AWAITING_PREDICTOR
    assert predictor.asked == 1 and kube.listed == 0
    clock["now"] = _at(15)
    assert rec.reconcile("team", "nightly") == "Predicted"
    assert kube.pod_prediction("nightly-a") == {"A100": {"p50": 260.0, "p90": 360.0},
                                                "T4": {"p50": 260.0, "p90": 360.0}}
    assert _summary(kube) == {"source": "predictor", "A100": {"p50": 260.0, "p90": 360.0},
                              "T4": {"p50": 260.0, "p90": 360.0}}
    assert "offpeak.io/prediction-retries" not in _ann(kube) and "offpeak.io/next-prediction-time" not in _ann(kube)
    kind, type_, reason, message = kube.events[-1]
    assert (kind, type_, reason) == ("Job", "Normal", "Repredicted")
    assert "re-predicted after a fallback" in message and "pods the Job creates later keep the template's" in message
    assert _ann(kube)["offpeak.io/state"].startswith("Predicted: re-predicted after a fallback")
    clock["now"] = _at(600)
    assert rec.reconcile("team", "nightly") == "Predicted" and predictor.asked == 2  # not asked again


def test_a_jobs_fallback_stays_and_its_retries_back_off_while_the_predictor_is_down() -> None:
    rec, kube, predictor, clock = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}))
    kube.add_pod("nightly-a")
    events = len(kube.events)
    clock["now"] = _at(15)
    assert rec.reconcile("team", "nightly") == workloads.AWAITING_PREDICTOR
    assert (_ann(kube)["offpeak.io/prediction-retries"], _ann(kube)["offpeak.io/next-prediction-time"]) == \
        ("1", "2026-11-21T06:00:30Z")  # backoff(1)
    clock["now"] = _at(30)
    assert rec.reconcile("team", "nightly") == workloads.AWAITING_PREDICTOR
    assert (_ann(kube)["offpeak.io/prediction-retries"], _ann(kube)["offpeak.io/next-prediction-time"]) == \
        ("2", "2026-11-21T06:01:00Z")  # backoff(2): 30 s
    assert predictor.asked == 3 and len(kube.events) == events  # quiet: no Event per failed try
    assert kube.pod_prediction("nightly-a")["T4"]["p50"] == 600.0 and _summary(kube)["source"] == "user-estimate"
    assert _ann(kube)["offpeak.io/state"].startswith("Predicted: predicted 600s")
    predictor.down = False
    clock["now"] = _at(59)
    assert rec.reconcile("team", "nightly") == workloads.AWAITING_PREDICTOR and predictor.asked == 3
    clock["now"] = _at(60)
    assert rec.reconcile("team", "nightly") == "Predicted" and kube.pod_prediction("nightly-a")["T4"]["p50"] == 260.0


def test_a_job_with_a_pod_bound_to_a_node_keeps_its_fallback() -> None:
    for node, phase in (("gpu-t4-0", "Pending"), ("gpu-t4-0", "Running")):  # bound, started or not
        rec, kube, predictor, clock = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}))
        kube.add_pod("nightly-a")
        kube.add_pod("nightly-b", node=node, phase=phase)
        predictor.down = False
        clock["now"] = _at(15)
        assert rec.reconcile("team", "nightly") == "Predicted"
        assert predictor.asked == 1  # the admission's only
        assert kube.pod_prediction("nightly-a")["T4"]["p50"] == 600.0 and _summary(kube)["source"] == "user-estimate"
        assert "offpeak.io/next-prediction-time" not in _ann(kube)  # given up: not polled any more
        assert kube.events[-1][2] == "Predicted"


def test_a_refused_pod_patch_is_said_not_raised() -> None:
    rec, kube, predictor, clock = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}))
    kube.add_pod("nightly-a")
    kube.refuse_pods = 403
    predictor.down = False
    clock["now"] = _at(15)
    assert rec.reconcile("team", "nightly") == "Predicted"
    assert kube.pod_prediction("nightly-a")["T4"]["p50"] == 600.0
    assert _summary(kube)["source"] == "predictor"  # the Job knows the real prediction
    assert kube.events[-1][2] == "Repredicted"
    assert "the waiting pods keep the fallback annotation" in kube.events[-1][3]
    # a transient error is not swallowed: the retry stays for the next trigger
    rec2, kube2, predictor2, clock2 = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}))
    kube2.add_pod("nightly-a")
    kube2.refuse_pods, predictor2.down, clock2["now"] = 500, False, _at(15)
    try:
        rec2.reconcile("team", "nightly")
    except ApiException as e:
        assert e.status == 500
    else:
        raise AssertionError("a 500 must propagate")
    assert "offpeak.io/next-prediction-time" in _ann(kube2)


def test_a_job_kueue_still_holds_gets_the_answer_in_its_template() -> None:
    job = batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"})
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu-queue"}
    rec, kube, predictor, clock = repredicting(job)
    assert kube.job["spec"]["suspend"] is True
    predictor.down, clock["now"] = False, _at(15)
    assert rec.reconcile("team", "nightly") == "Predicted"
    template = kube.job["spec"]["template"]["metadata"]["annotations"]
    assert json.loads(template["offpeak.io/predicted-job-seconds"])["T4"]["p50"] == 260.0
    assert kube.job["spec"]["suspend"] is True  # Kueue's to unsuspend
    assert kube.events[-1][2] == "Repredicted" and "creates later" not in kube.events[-1][3]


def test_a_pytorchjobs_fallback_is_replaced_on_its_waiting_pods() -> None:
    job = pytorch_job(workers=1)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"][
        "offpeak.io/model-source"] = "torchvision:resnet50"
    rec, kube, predictor, clock = repredicting(job, PYTORCH_JOB)
    assert kube.job["spec"]["runPolicy"]["suspend"] is False and _summary(kube)["source"] == "user-estimate"
    kube.add_pod("ddp-master-0")
    kube.add_pod("ddp-worker-0")
    predictor.down, clock["now"] = False, _at(15)
    assert rec.reconcile("team", "ddp") == "Predicted"
    assert kube.pod_prediction("ddp-master-0") == kube.pod_prediction("ddp-worker-0") == \
        {"H100": {"p50": 260.0, "p90": 360.0}}
    assert kube.events[-1][:3] == ("PyTorchJob", "Normal", "Repredicted")
    assert "pods the PyTorchJob creates later keep the template's fallback" in kube.events[-1][3]


def test_a_workload_awaiting_the_predictor_is_polled_by_the_resync_until_replaced() -> None:
    rec, kube, predictor, clock = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}))
    resync = Resyncer(rec, interval_seconds=1, live_while=workloads.polled_while)
    resync.track("team", "nightly", phase=workloads.AWAITING_PREDICTOR)
    assert resync.live() == [("team", "nightly")]
    predictor.down, clock["now"] = False, _at(15)
    resync.track("team", "nightly", phase=rec.reconcile("team", "nightly"))
    assert resync.live() == [] and _summary(kube)["source"] == "predictor"
    assert not workloads.polled_while("Predicted") and workloads.polled_while("Analyzing")


def test_a_job_admitted_by_the_predictor_or_without_a_graph_awaits_no_reprediction() -> None:
    rec, kube, predictor, clock = repredicting(batch_job(**{"offpeak.io/model-source": "torchvision:resnet18"}),
                                               down=False)
    assert _summary(kube)["source"] == "predictor" and "offpeak.io/next-prediction-time" not in _ann(kube)
    kube.add_pod("nightly-a")
    clock["now"] = _at(600)
    assert rec.reconcile("team", "nightly") == "Predicted" and predictor.asked == 1 and kube.listed == 0
    rec, kube = make(batch_job())  # no model source: the fallback is all there is
    assert rec.reconcile("team", "nightly") == "Predicted" and "offpeak.io/next-prediction-time" not in _ann(kube)
    rec, kube, _, _ = analysing(batch_job(**{"offpeak.io/model-source": "graph-configmap:g"}))
    assert rec.reconcile("team", "nightly") == "Predicted"  # its ConfigMap is missing: no graph
    assert "offpeak.io/next-prediction-time" not in _ann(kube)


def test_an_unreadable_retry_time_counts_as_due() -> None:
    job = batch_job()
    assert not workloads.reprediction_due(job, now=NOW)
    job["metadata"]["annotations"]["offpeak.io/next-prediction-time"] = "soon"
    assert workloads.reprediction_due(job, now=NOW)
    assert workloads.waiting_pods([]) == [] and workloads.waiting_pods([{"metadata": {"name": "p"}}]) == ["p"]
    assert workloads.waiting_pods([{"metadata": {"name": "p"}, "status": {"phase": "Failed"}}]) is None
