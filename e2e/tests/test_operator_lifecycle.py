"""The real operator (kopf.testing.KopfRunner, --standalone, one namespace) against the local control plane.

The cluster's own operator service watches every namespace, so it is paused while these tests run their operator
in-process, and restarted afterwards. Training pods are scheduled by the cluster's offpeak-scheduler onto kwok GPU
nodes and complete after their `offpeak.io/sim-runtime` annotation (copied from spec.podAnnotations).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kopf.testing import KopfRunner
from offpeak_graph.schema import ModelGraph, Op
from prometheus_client import CollectorRegistry

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_e2e.harness import E2ECluster
from offpeak_operator.graphstore import encode_graph
from offpeak_operator.settings import AnalysisSettings, OperatorSettings, PredictorSettings, RequeueSettings
from offpeak_operator.wiring import Operator, build_operator

GPU_TYPES = ["A100-SXM4-40GB", "L4"]  # both present among the e2e cluster's kwok nodes


def _graph() -> ModelGraph:
    ops = [Op(id=0, type="input", framework_type="input", output_shapes=[[32, 512]])]
    for i in range(6):
        ops.append(Op(id=len(ops), type="linear", framework_type="aten.addmm", inputs=[len(ops) - 1],
                      input_shapes=[[32, 512]], output_shapes=[[32, 512]], flops=2.0 * 32 * 512 * 512,
                      bytes_read=4 * (32 * 512 + 512 * 512), bytes_written=4 * 32 * 512, params=512 * 512 + 512,
                      name=f"layers.{i}"))
    return ModelGraph(framework="synthetic", model_name="mlp6", batch_size=32, ops=ops, model_family="mlp")


def _job(name: str, *, sim_seconds: float, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "image": "registry.local/offpeak-e2e/train:1", "command": ["python", "train.py"], "batchSize": 32,
        "steps": 200, "gpuTypes": GPU_TYPES, "modelSource": {"graphConfigMap": {"name": "mlp6-graph"}},
        "podAnnotations": {"offpeak.io/sim-runtime": f"{round(sim_seconds * 1000)}ms"},
    }  # fmt: skip
    body.update(spec)
    body = {k: v for k, v in body.items() if v is not None}  # None: leave the field out
    return {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


class RunningOperator:
    """Start/stop the in-process operator for one namespace (restartable, to test resuming)."""

    def __init__(self, cluster: E2ECluster, namespace: str, *, kopf_args: tuple[str, ...] = ("--standalone",),
                 analysis: AnalysisSettings | None = None) -> None:
        self.cluster, self.namespace, self.kopf_args = cluster, namespace, kopf_args
        self.analysis = analysis or AnalysisSettings()
        self.output = ""
        self.op: Operator | None = None
        self.runner: KopfRunner | None = None

    def start(self) -> Operator:
        predictor = self.cluster.state.urls.get("predictor", "http://127.0.0.1:9")
        settings = OperatorSettings(predictor=PredictorSettings(url=predictor, timeout_seconds=5),
                                    requeue=RequeueSettings(base_seconds=2), resync_seconds=1.0,
                                    analysis=self.analysis)
        self.op = build_operator(settings, kubeconfig=str(self.cluster.kubeconfig),
                                 metrics_registry=CollectorRegistry())
        self.runner = KopfRunner(["run", *self.kopf_args, "--namespace", self.namespace], registry=self.op.registry,
                                 settings=self.op.kopf_settings, timeout=60)
        self.runner.__enter__()
        return self.op

    def stop(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            runner.__exit__(None, None, None)
            self.output += runner.output


@pytest.fixture(scope="module")
def operator_service_paused(e2e_cluster: E2ECluster) -> Iterator[None]:
    """Pause the cluster's own operator (it watches every namespace) for one test module."""
    had_service = "operator" in e2e_cluster.state.urls
    e2e_cluster.stop_service("operator")
    try:
        yield
    finally:
        if had_service:
            e2e_cluster.start_service("operator")


@pytest.fixture
def kopf_operator(e2e_cluster: E2ECluster, e2e_namespace: str,
                  operator_service_paused: None) -> Iterator[RunningOperator]:
    running = RunningOperator(e2e_cluster, e2e_namespace)
    running.start()
    try:
        e2e_cluster.apply({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "mlp6-graph", "namespace": e2e_namespace},
                           "binaryData": {"graph.json.gz": base64.b64encode(encode_graph(_graph()).data).decode()}})
        yield running
    finally:
        running.stop()


def _apply(cluster: E2ECluster, ns: str, job: dict[str, Any]) -> None:
    cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))


def _events(cluster: E2ECluster, ns: str, name: str) -> list[dict[str, Any]]:
    return cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")["items"]


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == type_)


def test_job_runs_to_success_with_prediction_pods_and_metrics(e2e_cluster: E2ECluster, e2e_namespace: str,
                                                              kopf_operator: RunningOperator) -> None:
    ns = e2e_namespace
    _apply(e2e_cluster, ns, _job("ok", sim_seconds=4))
    running = e2e_cluster.wait_phase(ns, "ok", ["Running", "Succeeded", "Failed"], timeout=120)["status"]
    assert running["phase"] != "Failed", running
    assert running["graph"]["hash"] == _graph().content_hash() and running["graph"]["source"] == "graphConfigMap"
    assert {g["gpuType"] for g in running["prediction"]["gpus"]} == set(GPU_TYPES)
    assert _condition(running, "Valid")["status"] == "True"

    (pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=ok,offpeak.io/role=training")
    meta = pod["metadata"]
    assert meta["name"] == "ok-a1-w0" and pod["spec"]["schedulerName"] == "offpeak-scheduler"
    assert meta["labels"]["offpeak.io/workload"] == "offline"
    assert meta["ownerReferences"][0]["kind"] == "TrainingJob"
    assert set(json.loads(meta["annotations"]["offpeak.io/predicted-job-seconds"])) == set(GPU_TYPES)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    node = e2e_cluster.get("node", pod["spec"]["nodeName"])
    assert node_gpu_type(node["metadata"]["labels"]) in GPU_TYPES

    job_meta = e2e_cluster.trainingjob(ns, "ok")["metadata"]
    assert not job_meta.get("finalizers"), job_meta  # deletion never waits for the operator

    done = e2e_cluster.wait_phase(ns, "ok", ["Succeeded", "Failed"], timeout=90)["status"]
    assert done["phase"] == "Succeeded", done
    assert done["gpuType"] == node_gpu_type(node["metadata"]["labels"])
    assert 3 <= done["actualSeconds"] <= 4 + 30, done
    assert _condition(done, "Finished")["reason"] == "Succeeded"
    reasons = {e["reason"] for e in _events(e2e_cluster, ns, "ok")}
    assert {"Accepted", "Running", "Succeeded"} <= reasons, reasons
    registry = kopf_operator.op.metrics.registry
    labels = {"trainingjob": "ok", "job_namespace": ns, "gpu_type": done["gpuType"], "model_family": "mlp"}
    assert registry.get_sample_value("offpeak_job_actual_seconds", labels) == done["actualSeconds"]
    assert registry.get_sample_value("offpeak_jobs", {"phase": "Succeeded"}) == 1


def test_bad_input_fails_with_condition_and_event_and_creates_nothing(e2e_cluster: E2ECluster, e2e_namespace: str,
                                                                      kopf_operator: RunningOperator) -> None:
    ns = e2e_namespace
    _apply(e2e_cluster, ns, _job("bad-gpu", sim_seconds=1, gpuTypes=["A100-SXM4-40GB", "Z9000"]))
    status = e2e_cluster.wait_phase(ns, "bad-gpu", ["Failed"], timeout=60)["status"]
    valid = _condition(status, "Valid")
    assert valid["status"] == "False" and valid["reason"] == "UnknownGPUType" and "Z9000" in valid["message"]
    warnings = [e for e in _events(e2e_cluster, ns, "bad-gpu") if e["type"] == "Warning"]
    assert any(e["reason"] == "UnknownGPUType" for e in warnings)
    time.sleep(2)
    assert e2e_cluster.pods(ns, "offpeak.io/trainingjob=bad-gpu") == []


def test_schema_refuses_what_it_can(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    ns = e2e_namespace
    both = _job("both", sim_seconds=1, epochs=2, datasetSize=100)
    proc = e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(both), check=False)
    assert proc.returncode != 0 and "either steps, or epochs together with datasetSize" in proc.stderr
    zero = _job("zero", sim_seconds=1, batchSize=0, precision="fp8")
    proc = e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(zero), check=False)
    assert proc.returncode != 0 and "batchSize" in proc.stderr and "precision" in proc.stderr
    defaulted = _job("defaults", sim_seconds=1)
    e2e_cluster.kubectl("-n", ns, "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(defaulted))
    out = json.loads(e2e_cluster.kubectl("-n", ns, "create", "--dry-run=server", "-o", "json", "-f", "-",
                                         stdin=json.dumps(defaulted)).stdout)
    assert (out["spec"]["precision"], out["spec"]["maxAttempts"], out["spec"]["workers"]) == ("fp32", 3, 1)
