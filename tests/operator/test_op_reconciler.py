"""The reconciler's glue (actions, fallbacks, idempotency) over an in-memory stand-in for the API server.

These are unit tests: the real API server is exercised by e2e/tests/test_operator_*.py.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

from offpeak_graph.schema import ModelGraph
from optestkit import NOW, job_body, small_graph
from prometheus_client import CollectorRegistry

from offpeak_operator.extraction import ExtractionFailed
from offpeak_operator.graphstore import encode_graph, to_log_lines
from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.predictor_http import PredictorUnavailable, SampleReport
from offpeak_operator.reconciler import Context, Reconciler
from offpeak_operator.settings import AnalysisSettings, OperatorSettings, RequeueSettings


class MemoryKube:
    """Just enough of KubeIO, storing objects as dicts."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.pods: dict[str, dict[str, Any]] = {}
        self.configmaps: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.logs: dict[str, str] = {}
        self.nodes = {"n1": "T4", "n2": "A100-SXM4-40GB"}
        self.status_patches = 0
        self.services: dict[str, dict[str, Any]] = {}
        self.pvcs: dict[str, dict[str, Any]] = {}

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.job)

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status_patches += 1
        current = self.job.setdefault("status", {})
        for k, v in status.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = copy.deepcopy(v)

    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self.pods.values()]

    def create_pod(self, body: dict[str, Any]) -> bool:
        name = body["metadata"]["name"]
        if name in self.pods:
            return False
        self.pods[name] = copy.deepcopy(body)
        return True

    def delete_pod(self, namespace: str, name: str) -> None:
        self.pods.pop(name, None)

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        if name in self.pods:
            self.pods[name]["metadata"].setdefault("annotations", {}).update(annotations)

    def pod_log(self, namespace: str, name: str, container: str) -> str:
        return self.logs[name]

    def node_gpu_type(self, node: str) -> str:
        return self.nodes.get(node, "")

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.configmaps.get(name))

    def create_configmap(self, body: dict[str, Any]) -> bool:
        if body["metadata"]["name"] in self.configmaps:
            return False
        self.configmaps[body["metadata"]["name"]] = copy.deepcopy(body)
        return True

    def create_service(self, body: dict[str, Any]) -> bool:
        return self.services.setdefault(body["metadata"]["name"], copy.deepcopy(body)) is not None

    def create_pvc(self, body: dict[str, Any]) -> bool:
        if body["metadata"]["name"] in self.pvcs:
            return False
        self.pvcs[body["metadata"]["name"]] = copy.deepcopy(body)
        return True

    def emit_event(self, job: dict[str, Any], *, type: str, reason: str, message: str, now: datetime | None = None):
        self.events.append((type, reason, message))

    # helpers for tests
    def set_pod(self, name: str, phase: str, *, node: str = "n1", start: datetime = NOW,
                finish: datetime | None = None, **status: Any) -> None:
        pod = self.pods[name]
        pod["spec"]["nodeName"] = node
        state = {"terminated": {"startedAt": _t(start), "finishedAt": _t(finish)}} if finish else \
            {"running": {"startedAt": _t(start)}}
        pod["status"] = {"phase": phase, "containerStatuses": [{"name": "train", "state": state}], **status}


def _t(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


class FakePredictor:
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.requests: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []

    def predict(self, **body: Any) -> dict[str, Any]:
        self.requests.append(body)
        if self.fail:
            raise PredictorUnavailable("predictor at http://x unreachable: connection refused")
        return {"model_version": "m1", "graph_hash": "sha256:x", "predictions": [
            {"gpu": g, "gpu_type": g, "step_seconds": 0.1, "step_seconds_p90": 0.2, "job_seconds": 100.0,
             "job_seconds_p90": 200.0, "model_version": "m1"} for g in body["gpus"]]}

    def report_sample(self, sample: SampleReport) -> dict[str, Any]:
        if self.fail:
            raise PredictorUnavailable("down")
        self.samples.append(msgspec.structs.asdict(sample))  # every field, defaults included
        return {"id": len(self.samples), "status": "accepted"}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def make(job: dict[str, Any], *, predictor: FakePredictor | None = None, extract=None, extract_image: str = ""):
    kube = MemoryKube(job)
    clock = Clock()
    pred = predictor or FakePredictor()
    settings = OperatorSettings(requeue=RequeueSettings(base_seconds=10),
                                analysis=AnalysisSettings(extract_image=extract_image))
    ctx = Context(settings=settings, kube=kube, predictor=pred,
                  metrics=OperatorMetrics(CollectorRegistry()), resolve_gpu=None, clock=clock)
    if extract is not None:
        ctx.extract = extract
    return Reconciler(ctx), kube, pred, clock


def graph_cm(graph: ModelGraph) -> dict[str, Any]:
    return {"metadata": {"name": "user-graph"},
            "binaryData": {"graph.json.gz": base64.b64encode(encode_graph(graph).data).decode()}}


def test_configmap_source_runs_the_whole_flow_and_reports_a_sample() -> None:
    rec, kube, pred, clock = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, workers=2))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    assert rec.reconcile("ns", "train-1") == "Waiting"  # Pending -> Analyzing -> Predicted -> Waiting in one pass
    assert sorted(kube.pods) == ["train-1-a1-w0", "train-1-a1-w1"]
    assert pred.requests[0]["gpus"] == ["A100-SXM4-40GB", "T4"] and pred.requests[0]["steps"] == 1000
    assert pred.requests[0]["num_gpus"] == 2
    ann = json.loads(kube.pods["train-1-a1-w0"]["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    assert ann["T4"] == {"p50": 100.0, "p90": 200.0}
    assert rec.reconcile("ns", "train-1") == "Waiting" and len(kube.pods) == 2  # idempotent

    for name in kube.pods:
        kube.set_pod(name, "Running", node="n2")
    clock.now = NOW + timedelta(seconds=3)
    assert rec.reconcile("ns", "train-1") == "Running"
    assert kube.job["status"]["gpuType"] == "A100-SXM4-40GB" and kube.job["status"]["node"] == "n2"

    for name in kube.pods:
        kube.set_pod(name, "Succeeded", node="n2", finish=NOW + timedelta(seconds=120))
    clock.now = NOW + timedelta(seconds=125)
    assert rec.reconcile("ns", "train-1") == "Succeeded"
    assert kube.job["status"]["actualSeconds"] == 120.0
    sample = pred.samples[0]
    assert sample["gpu"] == "A100-SXM4-40GB" and sample["job_seconds"] == 120.0 and sample["steps"] == 1000
    assert sample["step_seconds"] == 0.12 and sample["num_gpus"] == 2 and sample["precision"] == "fp32"
    assert kube.job["status"]["sampleReported"] is True and kube.job["status"]["sampleStatus"] == "accepted"
    assert sample["graph_hash"] == small_graph().content_hash() and sample["graph"]["model_name"] == "tiny"
    assert sample["job"] == "ns/train-1" and sample["mode"] == "train"
    m = rec.ctx.metrics.registry
    labels = {"trainingjob": "train-1", "job_namespace": "ns", "gpu_type": "A100-SXM4-40GB", "model_family": "mlp"}
    assert m.get_sample_value("offpeak_job_actual_seconds", labels) == 120
    assert m.get_sample_value("offpeak_jobs", {"job_namespace": "ns", "phase": "Succeeded"}) == 1


def test_startup_seconds_reach_the_predictor_request_only_when_set() -> None:
    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, startupSeconds=0))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    assert pred.requests[0]["startup_seconds"] == 0.0
    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    assert pred.requests[0]["startup_seconds"] is None  # the client then leaves it out: the predictor's default


def test_predictor_down_default_fallback_adds_the_jobs_startup() -> None:
    rec, kube, _, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, steps=10,
                                    startupSeconds=45), predictor=FakePredictor(fail=True))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    prediction = kube.job["status"]["prediction"]
    step = rec.ctx.settings.fallback.default_step_seconds
    assert prediction["source"] == "default"
    assert {g["jobSeconds"] for g in prediction["gpus"]} == {10 * step + 45}


def test_predictor_down_falls_back_to_user_estimate_and_never_stalls() -> None:
    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}},
                                       estimatedSeconds=900), predictor=FakePredictor(fail=True))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    assert rec.reconcile("ns", "train-1") == "Waiting"
    status = kube.job["status"]
    assert status["prediction"]["source"] == "user-estimate"
    predicted = next(c for c in status["conditions"] if c["type"] == "Predicted")
    assert predicted["status"] == "False" and predicted["reason"] == "PredictorUnavailable"
    assert "unreachable" in predicted["message"]
    assert ("Warning", "PredictorUnavailable") in [e[:2] for e in kube.events]
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_jobs", {"job_namespace": "ns", "phase": "Waiting"}) == 1


def test_missing_graph_configmap_falls_back_to_default() -> None:
    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "absent"}}))
    assert rec.reconcile("ns", "train-1") == "Waiting"
    status = kube.job["status"]
    assert next(c for c in status["conditions"] if c["type"] == "GraphReady")["reason"] == "GraphConfigMapNotFound"
    assert status["prediction"]["source"] == "default" and pred.requests == []


def test_in_process_extraction_stores_an_owned_configmap() -> None:
    seen = []

    def extract(spec, timeout):
        seen.append((spec.model_source.value, timeout))
        return small_graph(name="resnet18")

    rec, kube, pred, _ = make(job_body(modelSource={"torchvision": "resnet18"}), extract=extract)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    assert seen[0][0] == "resnet18" and seen[0][1] > 0
    cm = kube.configmaps["train-1-graph"]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-123"
    assert kube.job["status"]["graph"]["configMap"] == "train-1-graph"
    assert pred.requests[0]["graph"]["model_name"] == "resnet18"


def test_in_process_extraction_failure_is_a_condition_not_a_crash() -> None:
    def extract(spec, timeout):
        raise ExtractionFailed("extraction of resnet18 ran past 180s")

    rec, kube, _, _ = make(job_body(modelSource={"torchvision": "resnet18"}), extract=extract)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    cond = next(c for c in kube.job["status"]["conditions"] if c["type"] == "GraphReady")
    assert cond["reason"] == "ExtractionFailed" and "180s" in cond["message"]


def test_in_process_invalid_model_source_fails_the_job_without_pods_or_prediction() -> None:
    line = "offpeak extract: error: unknown torchvision model 'no_such_model'"

    def extract(spec, timeout):
        raise ExtractionFailed(line, exit_code=2)

    rec, kube, pred, _ = make(job_body(modelSource={"torchvision": "no_such_model"}), extract=extract)
    assert rec.reconcile("ns", "train-1") == "Failed"
    status = kube.job["status"]
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["GraphReady"]["reason"] == "InvalidModelSource" and conds["GraphReady"]["message"] == line
    assert conds["Finished"]["reason"] == "InvalidModelSource" and line in status["message"]
    assert kube.pods == {} and kube.configmaps == {} and pred.requests == [] and "prediction" not in status
    assert ("Warning", "InvalidModelSource") in [(t, r) for t, r, _ in kube.events]
    assert rec.reconcile("ns", "train-1") == "Failed" and kube.pods == {}  # terminal: stays put


def test_in_process_extractor_crash_still_falls_back() -> None:
    def extract(spec, timeout):
        raise ExtractionFailed("extraction of resnet18 failed (exit 1): Traceback | RuntimeError: boom", exit_code=1)

    rec, kube, _, _ = make(job_body(modelSource={"torchvision": "resnet18"}, estimatedSeconds=60), extract=extract)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    cond = next(c for c in kube.job["status"]["conditions"] if c["type"] == "GraphReady")
    assert cond["reason"] == "ExtractionFailed"
    assert kube.job["status"]["prediction"]["source"] == "user-estimate" and "train-1-a1-w0" in kube.pods


def test_analysis_pod_exit_2_fails_the_job_and_exit_137_falls_back() -> None:
    line = "offpeak extract: error: cannot import entry point module 'pkg' (ModuleNotFoundError: No module named 'pkg')"
    for code, reason, expected in ((2, "Error", "Failed"), (137, "OOMKilled", "Waiting")):
        rec, kube, pred, _ = make(job_body(modelSource={"entrypoint": "pkg.m:build"}, inputShape=[64]))
        assert rec.reconcile("ns", "train-1") == "Analyzing"
        kube.pods["train-1-analysis"]["status"] = {"phase": "Failed", "initContainerStatuses": [
            {"name": "extract", "state": {"terminated": {"exitCode": code, "reason": reason,
                                                         "message": f"some warning\n{line}\n"}}}]}
        assert rec.reconcile("ns", "train-1") == expected
        graph = next(c for c in kube.job["status"]["conditions"] if c["type"] == "GraphReady")
        training = [n for n in kube.pods if n != "train-1-analysis"]
        if code == 2:
            assert graph["reason"] == "InvalidModelSource" and graph["message"] == line
            assert training == [] and kube.configmaps == {} and pred.requests == []
            assert ("Warning", "InvalidModelSource") in [(t, r) for t, r, _ in kube.events]
        else:
            assert graph["reason"] == "AnalysisFailed" and "exited 137" in graph["message"]
            assert training == ["train-1-a1-w0"]


def finish_analysis(kube: MemoryKube, graph: ModelGraph) -> None:
    """The analysis pod succeeded, its `emit` log holding `graph`."""
    enc = encode_graph(graph)
    kube.logs["train-1-analysis"] = "\n".join(to_log_lines(enc.data, {"hash": enc.graph_hash, "reduced": "",
                                                                          "original_ops": len(graph.ops)}))
    kube.pods["train-1-analysis"]["status"] = {"phase": "Succeeded"}


def test_analysis_pod_graph_is_collected_from_its_log() -> None:
    rec, kube, pred, _ = make(job_body(modelSource={"entrypoint": "pkg.m:build"}, inputShape=[64]))
    assert rec.reconcile("ns", "train-1") == "Analyzing"
    assert "train-1-analysis" in kube.pods
    assert rec.reconcile("ns", "train-1") == "Analyzing"  # still running: nothing new
    g = small_graph(name="user-model")
    finish_analysis(kube, g)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    assert kube.job["status"]["graph"]["hash"] == g.content_hash()
    assert "train-1-graph" in kube.configmaps


def test_with_an_extract_image_a_torchvision_graph_comes_from_an_analysis_pod_never_the_operator() -> None:
    def extract(spec, timeout):
        raise AssertionError("the operator's image has no torch: it must not extract")

    rec, kube, pred, _ = make(job_body(modelSource={"torchvision": "resnet50"}), extract=extract,
                              extract_image="offpeak:1-extract")
    assert rec.reconcile("ns", "train-1") == "Analyzing"
    pod = kube.pods["train-1-analysis"]
    assert pod["spec"]["initContainers"][0]["image"] == "offpeak:1-extract"
    g = small_graph(name="resnet50")
    finish_analysis(kube, g)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    status = kube.job["status"]
    assert status["graph"]["source"] == "torchvision" and status["graph"]["hash"] == g.content_hash()
    assert kube.configmaps["train-1-graph"]["metadata"]["annotations"]["offpeak.io/graph-source"] == "torchvision"
    assert pred.requests[0]["graph"]["model_name"] == "resnet50"
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_analysis_duration_seconds_count",
                                                     {"source": "torchvision", "outcome": "ok"}) == 1
    assert "train-1-a1-w0" in kube.pods


def test_with_an_extract_image_a_missing_hf_configmap_makes_no_pod_and_falls_back() -> None:
    rec, kube, pred, _ = make(job_body(modelSource={"hfConfigMap": {"name": "my-llm"}}, seqLen=64),
                              extract_image="offpeak:1-extract")
    assert rec.reconcile("ns", "train-1") == "Waiting"
    graph = next(c for c in kube.job["status"]["conditions"] if c["type"] == "GraphReady")
    assert graph["reason"] == "HfConfigMapNotFound" and "my-llm" in graph["message"]
    assert "train-1-analysis" not in kube.pods and kube.job["status"]["prediction"]["source"] == "default"


def test_with_an_extract_image_an_hf_configmap_that_is_not_json_fails_the_job_without_a_pod() -> None:
    rec, kube, pred, _ = make(job_body(modelSource={"hfConfigMap": {"name": "my-llm"}}, seqLen=64),
                              extract_image="offpeak:1-extract")
    kube.configmaps["my-llm"] = {"metadata": {"name": "my-llm"}, "data": {"config.json": "{not json"}}
    assert rec.reconcile("ns", "train-1") == "Failed"
    graph = next(c for c in kube.job["status"]["conditions"] if c["type"] == "GraphReady")
    assert graph["reason"] == "InvalidModelSource" and kube.pods == {} and pred.requests == []
    kube.configmaps["my-llm"]["data"]["config.json"] = '{"model_type": "gpt2"}'
    rec2, kube2, _, _ = make(job_body(modelSource={"hfConfigMap": {"name": "my-llm"}}, seqLen=64),
                             extract_image="offpeak:1-extract")
    kube2.configmaps["my-llm"] = kube.configmaps["my-llm"]
    assert rec2.reconcile("ns", "train-1") == "Analyzing" and "train-1-analysis" in kube2.pods


def test_invalid_job_fails_creates_nothing_and_posts_an_event() -> None:
    rec, kube, pred, _ = make(job_body(gpuTypes=["A100"], resources={"limits": {"nvidia.com/gpu": 4}}))
    rec.ctx.resolve_gpu = lambda name: name  # accept every GPU name
    assert rec.reconcile("ns", "train-1") == "Failed"
    assert kube.pods == {} and pred.requests == []
    assert kube.events and kube.events[0][0] == "Warning" and "nvidia.com/gpu" in kube.events[0][2]


def test_eviction_requeues_then_relaunches_with_remaining_prediction() -> None:
    rec, kube, _, clock = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, checkpointing=True,
                                        steps=1000))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    kube.set_pod("train-1-a1-w0", "Running", node="n1")
    clock.now = NOW + timedelta(seconds=1)
    assert rec.reconcile("ns", "train-1") == "Running"
    kube.pods["train-1-a1-w0"]["metadata"]["annotations"]["offpeak.io/eviction-reason"] = "online-load"
    clock.now = NOW + timedelta(seconds=100)  # 100 s at p90 0.2 s/step = 500 steps done
    # marked by the evictor: the operator deletes it (so it can save), then requeues once it is gone
    assert rec.reconcile("ns", "train-1") == "Running" and "train-1-a1-w0" not in kube.pods
    assert rec.reconcile("ns", "train-1") == "Requeued"
    assert kube.job["status"]["completedSteps"] == 500 and "train-1-a1-w0" not in kube.pods
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_job_requeues_total", {"reason": "Evicted"}) == 1
    clock.now = NOW + timedelta(seconds=111)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    pod = kube.pods["train-1-a2-w0"]
    ann = json.loads(pod["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    assert ann["T4"] == {"p50": 50.0, "p90": 100.0}  # half the work left


def test_reporting_failure_does_not_block_success() -> None:
    rec, kube, pred, clock = make(job_body(), predictor=FakePredictor(fail=True))
    rec.reconcile("ns", "train-1")
    kube.set_pod("train-1-a1-w0", "Succeeded", finish=NOW + timedelta(seconds=60))
    assert rec.reconcile("ns", "train-1") == "Succeeded"


def test_a_sample_the_predictor_refuses_is_said_in_the_status_and_never_blocks() -> None:
    class Refusing(FakePredictor):
        def report_sample(self, sample: SampleReport) -> dict[str, Any]:
            self.samples.append(msgspec.structs.asdict(sample))
            raise PredictorUnavailable("predictor /v1/samples: HTTP 422: measured step time is 9x the model's")

    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}), predictor=Refusing())
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    kube.set_pod("train-1-a1-w0", "Succeeded", node="n1", finish=NOW + timedelta(seconds=60))
    assert rec.reconcile("ns", "train-1") == "Succeeded"
    status = kube.job["status"]
    assert status["sampleReported"] is False and "9x" in status["sampleStatus"]
    assert pred.samples[0]["graph"]["model_name"] == "tiny"  # the graph the job was predicted with


def test_a_job_without_a_graph_sends_no_sample_and_says_so() -> None:
    rec, kube, pred, _ = make(job_body())
    rec.reconcile("ns", "train-1")
    kube.set_pod("train-1-a1-w0", "Succeeded", finish=NOW + timedelta(seconds=60))
    assert rec.reconcile("ns", "train-1") == "Succeeded"
    assert pred.samples == [] and kube.job["status"]["sampleStatus"].startswith("not sent")


def test_a_corrected_prediction_is_recorded_with_its_sample_count() -> None:
    class Correcting(FakePredictor):
        def predict(self, **body: Any) -> dict[str, Any]:
            answer = super().predict(**body)
            for row in answer["predictions"]:
                row["correction"] = {"samples": 3, "factor": 1.38, "level": "graph"}
            return answer

    rec, kube, _, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}), predictor=Correcting())
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    gpus = kube.job["status"]["prediction"]["gpus"]
    assert all(g["correctionSamples"] == 3 and g["correctionFactor"] == 1.38 for g in gpus)
    predicted = next(c for c in kube.job["status"]["conditions"] if c["type"] == "Predicted")
    assert "corrected by up to 3 measured sample(s)" in predicted["message"]


def test_deleted_job_is_forgotten() -> None:
    rec, kube, _, _ = make(job_body())
    rec.reconcile("ns", "train-1")
    waiting = {"job_namespace": "ns", "phase": "Waiting"}
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_jobs", waiting) == 1
    kube.job = None
    assert rec.reconcile("ns", "train-1") is None
    assert rec.ctx.metrics.registry.get_sample_value("offpeak_jobs", waiting) is None  # the namespace's last job


def test_busy_job_is_skipped_without_waiting() -> None:
    rec, kube, _, _ = make(job_body())
    lock = rec.lock("ns/train-1")
    with lock:
        assert rec.reconcile("ns", "train-1", wait=False) is None
    assert kube.status_patches == 0
    assert rec.reconcile("ns", "train-1", wait=False) == "Waiting"


def test_pod_rejected_by_the_api_server_fails_the_job_with_its_message() -> None:
    from kubernetes.client.exceptions import ApiException

    rec, kube, _, _ = make(job_body())

    def reject(body):
        e = ApiException(status=422, reason="Unprocessable Entity")
        e.body = json.dumps({"message": 'Pod "train-1-a1-w0" is invalid: spec.containers[0].image: Required value'})
        raise e

    kube.create_pod = reject
    assert rec.reconcile("ns", "train-1") == "Failed"
    cond = next(c for c in kube.job["status"]["conditions"] if c["type"] == "Finished")
    assert cond["reason"] == "PodRejected" and "Required value" in cond["message"]


def test_transient_api_errors_propagate_for_a_retry() -> None:
    from kubernetes.client.exceptions import ApiException
    import pytest

    rec, kube, _, _ = make(job_body())

    def down(body):
        raise ApiException(status=503, reason="Service Unavailable")

    kube.create_pod = down
    with pytest.raises(ApiException):
        rec.reconcile("ns", "train-1")
    assert kube.job["status"].get("phase") in (None, "Analyzing", "Predicted")  # Waiting never recorded


def test_a_launch_makes_the_rendezvous_service_and_checkpoint_claim_once_and_records_the_generation() -> None:
    claim = {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    job = job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, workers=2,
                   checkpoint={"claimTemplate": claim})
    job["metadata"]["generation"] = 3
    rec, kube, _, _ = make(job)
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    assert rec.reconcile("ns", "train-1") == "Waiting"
    assert list(kube.services) == ["train-1-workers"] and list(kube.pvcs) == ["train-1-checkpoint"]
    status = kube.job["status"]
    assert status["observedGeneration"] == 3
    assert status["predicted"] == "2m" and status["predictedSeconds"] == 100.0  # human twin of the seconds
    for pod in kube.pods.values():
        assert pod["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] == "train-1-checkpoint"


def test_a_rejected_checkpoint_claim_fails_the_job_naming_the_claim() -> None:
    from kubernetes.client.exceptions import ApiException

    class Refusing(MemoryKube):
        def create_pvc(self, body: dict[str, Any]) -> bool:
            raise ApiException(status=422, reason="Unprocessable Entity")

    job = job_body(modelSource={"graphConfigMap": {"name": "user-graph"}},
                   checkpoint={"claimTemplate": {"spec": {"accessModes": ["Bogus"]}}})
    rec, _, _, _ = make(job)
    kube = Refusing(job)
    rec.ctx.kube = kube
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    assert rec.reconcile("ns", "train-1") == "Failed"
    assert "rejected the checkpoint claim" in kube.job["status"]["message"] and not kube.pods
    finished = {c["type"]: c for c in kube.job["status"]["conditions"]}
    assert finished["Failed"]["status"] == "True" and finished["Failed"]["reason"] == "PodRejected"


def test_a_resumed_job_is_timed_by_the_step_time_it_measured_not_the_prediction() -> None:
    from offpeak.progress import Progress

    rec, kube, _, clock = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}},
                                        checkpoint={"claimName": "ckpt"}))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    kube.set_pod("train-1-a1-w0", "Failed", node="n1", finish=NOW + timedelta(seconds=60), reason="Evicted")
    report = Progress(steps=500, attempt_steps=500, step_seconds=0.3, startup_seconds=5.0, checkpoint_steps=500)
    kube.pods["train-1-a1-w0"]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = report.to_json()
    clock.now = NOW + timedelta(seconds=61)
    assert rec.reconcile("ns", "train-1") == "Requeued" and kube.job["status"]["completedSteps"] == 500
    clock.now = NOW + timedelta(seconds=200)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    ann = json.loads(kube.pods["train-1-a2-w0"]["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    # 500 steps left at the measured 0.3 s; p90: the narrow spread of a measured pace, not the prediction's x2
    assert ann["T4"] == {"p50": 150.0, "p90": 165.0}
    assert ann["A100-SXM4-40GB"] == {"p50": 50.0, "p90": 100.0}  # not measured there: half the prediction


def test_a_multi_worker_job_is_predicted_across_nodes_and_records_the_links_assumed() -> None:
    class Spread(FakePredictor):
        def predict(self, **body: Any) -> dict[str, Any]:
            answer = super().predict(**body)
            for row in answer["predictions"]:
                row["interconnect"] = {"gpus_per_node": body["gpus_per_node"], "nodes": 2,
                                       "within_node": "NVLink (300 GB/s per direction); learned",
                                       "between_nodes": "network (100 Gbit/s per node), a ring all-reduce"}
            return answer

    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, workers=2,
                                       gpusPerWorker=4), predictor=Spread())
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    assert pred.requests[0]["num_gpus"] == 8 and pred.requests[0]["gpus_per_node"] == 4
    (gpu, *_) = kube.job["status"]["prediction"]["gpus"]
    assert gpu["interconnect"].startswith("2 node(s) x 4 GPU(s); within node: NVLink")
    assert "between nodes: network (100 Gbit/s per node)" in gpu["interconnect"]
    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}, gpusPerWorker=4))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    assert pred.requests[0]["gpus_per_node"] is None  # one worker: all its GPUs in one node
