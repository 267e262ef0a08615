"""Issue #16 (operator): re-predicting a fallback, no NaN in annotations or status, API errors recorded,
per-job gauges removed, hfConfig never a path."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

import pytest
from optestkit import NOW, job_body, small_graph
from test_op_reconciler import FakePredictor, MemoryKube, graph_cm, make

from offpeak_operator import statemachine as sm
from offpeak_operator.graphstore import GraphDecodeError, decode_bytes, encode_graph
from offpeak_operator.predictions import PredictorResponseError, from_predictor


class PatchingKube(MemoryKube):
    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        if name in self.pods:
            self.pods[name]["metadata"].setdefault("annotations", {}).update(annotations)


def _waiting_with_fallback():
    pred = FakePredictor(fail=True)
    rec, kube, _, clock = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}), predictor=pred)
    rec.ctx.kube = kube = PatchingKube(kube.job)
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    assert rec.reconcile("ns", "train-1") == "Waiting"
    assert kube.job["status"]["prediction"]["source"] == "default"
    return rec, kube, pred, clock


def _annotation(kube: MemoryKube) -> dict[str, Any]:
    return json.loads(kube.pods["train-1-a1-w0"]["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])


def test_a_fallback_is_replaced_when_the_predictor_returns() -> None:
    rec, kube, pred, clock = _waiting_with_fallback()
    assert _annotation(kube)["T4"]["p50"] == 1000.0  # 1 s/step fallback
    retry_at = sm.parse_time(kube.job["status"]["nextPredictionTime"])
    assert retry_at == NOW + timedelta(seconds=15)

    clock.now = NOW + timedelta(seconds=5)  # before the backoff: not asked again
    asked = len(pred.requests)
    rec.reconcile("ns", "train-1")
    assert len(pred.requests) == asked

    clock.now = NOW + timedelta(seconds=16)  # still down: the backoff doubles
    rec.reconcile("ns", "train-1")
    status = kube.job["status"]
    assert len(pred.requests) == asked + 1 and status["predictionRetries"] == 1
    assert sm.parse_time(status["nextPredictionTime"]) == clock.now + timedelta(seconds=15)
    clock.now += timedelta(seconds=16)
    rec.reconcile("ns", "train-1")
    assert kube.job["status"]["predictionRetries"] == 2
    assert sm.parse_time(kube.job["status"]["nextPredictionTime"]) == clock.now + timedelta(seconds=30)

    pred.fail = False  # the predictor is back
    clock.now += timedelta(seconds=31)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    status = kube.job["status"]
    assert status["prediction"]["source"] == "predictor" and status["attempts"] == 1
    assert "nextPredictionTime" not in status and "predictionRetries" not in status
    predicted = next(c for c in status["conditions"] if c["type"] == "Predicted")
    assert predicted["status"] == "True"
    assert _annotation(kube)["T4"] == {"p50": 100.0, "p90": 200.0}  # the waiting pod now carries the real one
    assert ("Normal", "Repredicted") in [e[:2] for e in kube.events]
    asked = len(pred.requests)
    clock.now += timedelta(seconds=600)
    rec.reconcile("ns", "train-1")
    assert len(pred.requests) == asked  # a real prediction is never asked for again


def test_a_running_job_keeps_its_fallback() -> None:
    status = {"phase": "Running", "prediction": {"source": "default", "gpus": [{"gpuType": "T4"}]},
              "graph": {"configMap": "g"}}
    assert not sm.wants_reprediction(status, now=NOW)
    assert sm.wants_reprediction({**status, "phase": "Waiting"}, now=NOW)
    assert not sm.wants_reprediction({**status, "phase": "Waiting", "graph": {}}, now=NOW)  # nothing to ask with
    later = sm.rfc3339(NOW + timedelta(seconds=1))
    assert not sm.wants_reprediction({**status, "phase": "Waiting", "nextPredictionTime": later}, now=NOW)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_non_finite_predictor_answer_falls_back_and_never_reaches_annotations(bad: float) -> None:
    class NanPredictor(FakePredictor):
        def predict(self, **body: Any) -> dict[str, Any]:
            answer = super().predict(**body)
            answer["predictions"][0]["job_seconds"] = bad
            return answer

    rec, kube, _, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}), predictor=NanPredictor())
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    assert rec.reconcile("ns", "train-1") == "Waiting"
    status = kube.job["status"]
    assert status["prediction"]["source"] == "default"
    for g in status["prediction"]["gpus"]:
        assert all(math.isfinite(g[k]) for k in ("stepSeconds", "jobSeconds", "jobSecondsP90"))
    text = kube.pods["train-1-a1-w0"]["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"]
    assert "NaN" not in text and "Infinity" not in text
    with pytest.raises(PredictorResponseError, match="job_seconds"):
        from_predictor({"predictions": [{"gpu": "T4", "step_seconds": 1.0, "job_seconds": bad}]}, steps=1,
                       asked=["T4"], canonical=["T4"])


def test_a_graph_with_nan_flops_is_refused_as_invalid() -> None:
    graph = small_graph()
    graph.ops[1].flops = float("nan")
    with pytest.raises(GraphDecodeError, match=r"ops\.flops\[1\]"):
        decode_bytes(encode_graph(graph).data)
    rec, kube, pred, _ = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}))
    kube.configmaps["user-graph"] = graph_cm(graph)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    ready = next(c for c in kube.job["status"]["conditions"] if c["type"] == "GraphReady")
    assert ready["status"] == "False" and ready["reason"] == "GraphInvalid" and pred.requests == []


def _job_series(metrics) -> int:
    return sum(len(m.samples) for m in metrics.registry.collect() if m.name in ("offpeak_job_predicted_seconds",
                                                                                   "offpeak_job_actual_seconds"))


def test_a_deleted_jobs_gauges_are_removed_and_series_are_bounded() -> None:
    from prometheus_client import CollectorRegistry

    from offpeak_operator.metrics import OperatorMetrics

    metrics = OperatorMetrics(CollectorRegistry(), max_jobs_with_series=3)
    for i in range(2):
        metrics.set_phase(f"ns/j{i}", "Succeeded")
        metrics.job_finished(job=f"j{i}", namespace="ns", gpu_type="T4", model_family="mlp", predicted_seconds=10,
                             actual_seconds=12)
    assert _job_series(metrics) == 4
    metrics.set_phase("ns/j0", None)  # the job was deleted
    assert _job_series(metrics) == 2
    assert metrics.registry.get_sample_value("offpeak_job_actual_seconds", {
        "trainingjob": "j0", "job_namespace": "ns", "gpu_type": "T4", "model_family": "mlp"}) is None
    for i in range(10, 20):
        metrics.job_finished(job=f"j{i}", namespace="ns", gpu_type="T4", model_family="", predicted_seconds=1,
                             actual_seconds=1)
    assert _job_series(metrics) == 2 * 3  # only the 3 most recent jobs keep series


def test_the_reconciler_forgets_a_deleted_jobs_gauges() -> None:
    rec, kube, _, clock = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    rec.reconcile("ns", "train-1")
    for name in kube.pods:
        kube.set_pod(name, "Succeeded", node="n2", finish=NOW + timedelta(seconds=120))
    clock.now = NOW + timedelta(seconds=125)
    assert rec.reconcile("ns", "train-1") == "Succeeded"
    assert _job_series(rec.ctx.metrics) == 2
    kube.get_job = lambda namespace, name: None  # deleted
    assert rec.reconcile("ns", "train-1") is None
    assert _job_series(rec.ctx.metrics) == 0


@pytest.mark.parametrize(("code", "reason"), [(403, "CreateTrainingPodsForbidden"),
                                              (409, "CreateTrainingPodsConflict")])
def test_a_refused_pod_creation_is_a_condition_and_an_event_and_is_retried(code: int, reason: str) -> None:
    from kubernetes.client.exceptions import ApiException

    rec, kube, _, clock = make(job_body())
    create = kube.create_pod

    def refuse(body):
        e = ApiException(status=code, reason="Forbidden")
        e.body = json.dumps({"message": 'pods "train-1-a1-w0" is forbidden: exceeded quota: gpu-quota'})
        raise e

    kube.create_pod = refuse
    rec.reconcile("ns", "train-1")
    status = kube.job["status"]
    assert status["phase"] == "Predicted" and not kube.pods  # not Waiting: the launch is retried as it was
    api = next(c for c in status["conditions"] if c["type"] == "ApiAccepted")
    assert api["status"] == "False" and api["reason"] == reason and "exceeded quota" in api["message"]
    assert [e for e in kube.events if e[1] == reason] and "exceeded quota" in status["message"]
    events = len(kube.events)
    rec.reconcile("ns", "train-1")
    assert len(kube.events) == events  # the same refusal is not re-announced every resync

    kube.create_pod = create  # quota freed
    clock.now = NOW + timedelta(seconds=30)
    assert rec.reconcile("ns", "train-1") == "Waiting" and kube.pods
    api = next(c for c in kube.job["status"]["conditions"] if c["type"] == "ApiAccepted")
    assert api["status"] == "True"


@pytest.mark.parametrize("path", ["/etc/passwd", "/var/run/secrets/kubernetes.io/serviceaccount/token",
                                  "etc/hostname", "../../etc/passwd", "/tmp/config.json"])
def test_an_hf_config_path_is_an_invalid_model_source_and_never_read(path: str) -> None:
    read = []
    rec, kube, pred, _ = make(job_body(modelSource={"hfConfig": path}, seqLen=128),
                              extract=lambda spec, timeout: read.append(spec) or small_graph())
    assert rec.reconcile("ns", "train-1") == "Failed"
    status = kube.job["status"]
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["reason"] == "InvalidModelSource" and "never reads paths" in valid["message"]
    assert "root:" not in json.dumps(status) and "root:" not in json.dumps(kube.events)
    assert read == [] and pred.requests == [] and not kube.pods


def test_an_hf_preset_is_extracted_from_a_file_the_operator_wrote(tmp_path) -> None:
    from offpeak_operator.extraction import hf_config_text
    from offpeak_operator.jobspec import parse_spec, validate
    from offpeak_operator.podspecs import extract_args

    spec = parse_spec(job_body(modelSource={"hfConfig": "gpt2"}, seqLen=128)["spec"])
    assert validate(spec, job_name="j", resolve_gpu=None) == []
    assert json.loads(hf_config_text(spec) or "{}")["model_type"] == "gpt2"
    args = extract_args(spec, out="/o", hf_config_file=str(tmp_path / "gpt2" / "config.json"))
    assert args[args.index("--hf-config") + 1] == str(tmp_path / "gpt2" / "config.json")


def test_an_hf_config_map_in_the_jobs_namespace_is_extracted() -> None:
    seen = []
    rec, kube, pred, _ = make(job_body(modelSource={"hfConfigMap": {"name": "my-config"}}, seqLen=128),
                              extract=lambda spec, timeout: seen.append(spec) or small_graph())
    kube.configmaps["my-config"] = {"metadata": {"name": "my-config"},
                                    "data": {"config.json": json.dumps({"model_type": "gpt2", "n_layer": 2})}}
    assert rec.reconcile("ns", "train-1") == "Waiting"
    assert json.loads(seen[0].model_source.config_json)["n_layer"] == 2
    assert kube.job["status"]["prediction"]["source"] == "predictor"


def test_a_bad_hf_config_map_fails_the_job_without_quoting_it() -> None:
    rec, kube, _, _ = make(job_body(modelSource={"hfConfigMap": {"name": "my-config"}}, seqLen=128),
                           extract=lambda spec, timeout: small_graph())
    kube.configmaps["my-config"] = {"metadata": {"name": "my-config"}, "data": {"config.json": "SECRET-LINE not json"}}
    assert rec.reconcile("ns", "train-1") == "Failed"
    status = kube.job["status"]
    assert "InvalidModelSource" in [c["reason"] for c in status["conditions"]]
    assert "SECRET-LINE" not in json.dumps(status) and "SECRET-LINE" not in json.dumps(kube.events)


def test_the_hf_config_file_holds_the_preset_or_the_configmap_text(tmp_path) -> None:
    from dataclasses import replace

    from offpeak_operator.extraction import _write_hf_config
    from offpeak_operator.jobspec import parse_spec

    spec = parse_spec(job_body(modelSource={"hfConfig": "openai-community/gpt2-large"}, seqLen=128)["spec"])
    path = _write_hf_config(spec, tmp_path)
    assert path.startswith(str(tmp_path)) and json.loads(open(path).read())["model_type"] == "gpt2"
    cm_spec = parse_spec(job_body(modelSource={"hfConfigMap": {"name": "c"}}, seqLen=128)["spec"])
    cm_spec = replace(cm_spec, model_source=replace(cm_spec.model_source, config_json='{"model_type": "bert"}'))
    assert json.loads(open(_write_hf_config(cm_spec, tmp_path)).read()) == {"model_type": "bert"}


def test_a_reprediction_is_recorded_even_when_pods_may_not_be_patched() -> None:
    from kubernetes.client.exceptions import ApiException

    rec, kube, pred, clock = _waiting_with_fallback()

    def forbidden(namespace, name, annotations):
        raise ApiException(status=403, reason="Forbidden")

    kube.patch_pod_annotations = forbidden
    pred.fail = False
    clock.now = NOW + timedelta(seconds=16)
    assert rec.reconcile("ns", "train-1") == "Waiting"
    status = kube.job["status"]
    assert status["prediction"]["source"] == "predictor" and "may not patch pods" in status["message"]
    asked = len(pred.requests)
    clock.now += timedelta(seconds=600)
    rec.reconcile("ns", "train-1")
    assert len(pred.requests) == asked
