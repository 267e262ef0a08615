"""A TrainingJob's life on the real control plane (lane `basic`): apply -> Analyzing -> Predicted -> Running
(placed by offpeak-scheduler on a node of an allowed GPU type) -> Succeeded with its measured seconds, as
`kubectl get tj` and `kubectl wait` show it; bad input refused by the API server or ending Failed with a clear
condition and nothing left behind; an analysis pod that never ends falls back to a stated prediction."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_core.humanize import duration
from offpeak_e2e.harness import E2ECluster, offline_job_manifest, offline_template, trainingjob_manifest
from offpeak_e2e.lanes import A100, ANALYSIS_TIMEOUT_S, BASIC, H100, L4


SIM_SECONDS = 20


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def _owned(cluster: E2ECluster, ns: str, name: str) -> list[str]:
    found = []
    for kind in ("pods", "configmaps"):
        items = cluster.get(kind, "-n", ns, "-l", f"offpeak.io/trainingjob={name}")["items"]
        found += [f"{kind}/{i['metadata']['name']}" for i in items if not i["metadata"].get("deletionTimestamp")]
    return found


def _operator_sample(cluster: E2ECluster, metric: str, labels: dict[str, str]) -> float | None:
    """A sample of the cluster operator's own /metrics (what Prometheus scrapes)."""
    text = urllib.request.urlopen(f"{cluster.state.urls['operator']}/metrics", timeout=10).read().decode()  # noqa: S310
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def test_trainingjob_lifecycle(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """The README's path: a torchvision model extracted by the operator, predicted by the predictor, placed, run,
    measured, shown by kubectl and the operator's metrics, and deleted with everything it made."""
    c, ns = e2e_cluster, e2e_namespace
    t0 = time.monotonic()
    job = trainingjob_manifest("lifecycle", sim_seconds=SIM_SECONDS, gpu_types=[A100, L4], torchvision="resnet18",
                               lane=BASIC)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))

    phases: list[str] = []

    def record_until_running() -> bool:
        p = c.phase(ns, "lifecycle")
        if p and (not phases or phases[-1] != p):
            phases.append(p)
        return p in ("Running", "Succeeded", "Failed")

    c.wait_for("TrainingJob lifecycle running", record_until_running, timeout=240, interval=0.3)
    print(f"[e2e] submitted -> running: {time.monotonic() - t0:.1f}s; phases {phases}")
    assert "Failed" not in phases, c.trainingjob(ns, "lifecycle").get("status")

    running = c.trainingjob(ns, "lifecycle")
    status = running["status"]
    # the graph was extracted and the predictor (not a fallback) gave per-GPU predictions
    assert status.get("graph", {}).get("hash"), status
    assert status["prediction"]["source"] == "predictor", status["prediction"]
    conditions = _conditions(status)
    assert conditions["Predicted"]["status"] == "True", conditions  # Predicted may pass too fast to poll as a phase
    assert conditions["Valid"]["status"] == "True", conditions
    assert {g["gpuType"] for g in status["prediction"]["gpus"]} == {A100, L4}
    assert not running["metadata"].get("finalizers"), running["metadata"]  # deletion never waits for the operator

    (pod,) = c.pods(ns, "offpeak.io/trainingjob=lifecycle,offpeak.io/workload=offline")
    meta = pod["metadata"]
    assert meta["name"] == "lifecycle-a1-w0" and pod["spec"]["schedulerName"] == "offpeak-scheduler"
    assert meta["ownerReferences"][0]["kind"] == "TrainingJob"
    assert set(json.loads(meta["annotations"]["offpeak.io/predicted-job-seconds"])) == {A100, L4}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    node = pod["spec"]["nodeName"]
    node_labels = c.get("node", node)["metadata"]["labels"]
    # no offpeak.io/gpu-type label: the type comes from GPU feature discovery's product label
    assert "offpeak.io/gpu-type" not in node_labels and node_gpu_type(node_labels) in {A100, L4}
    events = c.get("events", "-n", ns, "--field-selector", f"involvedObject.name={meta['name']}")["items"]
    scheduled = [e for e in events if e["reason"] == "Scheduled"]
    assert scheduled and (scheduled[0].get("reportingComponent") or scheduled[0]["source"].get("component")) \
        == "offpeak-scheduler"

    done = c.wait_phase(ns, "lifecycle", ["Succeeded", "Failed"], timeout=SIM_SECONDS + 120)["status"]
    print(f"[e2e] submitted -> finished: {time.monotonic() - t0:.1f}s")
    assert done["phase"] == "Succeeded", done
    assert done["node"] == node and done["gpuType"] == node_gpu_type(node_labels)
    # kwok completes the pod exactly SIM_SECONDS after it runs; allow for status-update latency
    assert SIM_SECONDS - 2 <= done["actualSeconds"] <= SIM_SECONDS + 30, done
    assert done["predictedSeconds"] > 0
    assert _conditions(done)["Finished"]["reason"] == "Succeeded"
    reasons = {e["reason"] for e in c.get("events", "-n", ns, "--field-selector",
                                          "involvedObject.name=lifecycle")["items"]}
    assert {"Accepted", "Running", "Succeeded"} <= reasons, reasons

    table = c.kubectl("-n", ns, "get", "tj").stdout
    header = table.splitlines()[0].split()
    for column in ("NAME", "PHASE", "GPUS", "PREDICTED", "ACTUAL", "NODE", "AGE"):
        assert column in header, table
    assert "lifecycle" in table and "Succeeded" in table and node in table
    labels = {"trainingjob": "lifecycle", "job_namespace": ns, "gpu_type": done["gpuType"]}
    c.wait_for("the job's actual seconds on the operator's /metrics",
               lambda: _operator_sample(c, "offpeak_job_actual_seconds", labels) == done["actualSeconds"], timeout=30)

    c.kubectl("-n", ns, "delete", "trainingjob", "lifecycle", "--wait=true", timeout=90)
    c.wait_for("what the job made garbage-collected", lambda: _owned(c, ns, "lifecycle") == [], timeout=90)


def test_kubectl_wait_returns_for_a_succeeded_and_a_failed_job(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    types = [A100, H100]
    ok = trainingjob_manifest("waits-ok", sim_seconds=3, gpu_types=types, estimated_seconds=30, lane=BASIC)
    bad = trainingjob_manifest("waits-bad", sim_seconds=3, gpu_types=types, estimated_seconds=30, lane=BASIC,
                               extra_spec={"maxAttempts": 1, "podAnnotations": {
                                   "offpeak.io/sim-runtime": "3000ms", "offpeak.io/sim-exit-code": "3"}})
    for job in (ok, bad):
        c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    t = time.monotonic()
    c.kubectl("-n", ns, "wait", "--for=condition=Succeeded", "tj/waits-ok", "--timeout=240s", timeout=250)
    c.kubectl("-n", ns, "wait", "--for=condition=Failed", "tj/waits-bad", "--timeout=240s", timeout=250)
    print(f"[e2e] kubectl wait returned for both endings after {time.monotonic() - t:.1f}s")

    done = c.trainingjob(ns, "waits-ok")
    status = done["status"]
    assert status["phase"] == "Succeeded" and status["reason"] == "Succeeded", status
    assert _conditions(status)["Finished"]["status"] == "True" and "Failed" not in _conditions(status)
    assert status["observedGeneration"] == done["metadata"]["generation"]
    assert status["predicted"] == duration(status["predictedSeconds"]) and status["actual"].endswith("s")
    failed = c.trainingjob(ns, "waits-bad")["status"]
    assert failed["phase"] == "Failed" and failed["reason"] == "MaxAttemptsReached", failed
    assert _conditions(failed)["Finished"] == {**_conditions(failed)["Finished"], "status": "True",
                                                "reason": "MaxAttemptsReached"}
    assert "Succeeded" not in _conditions(failed)
    table = c.kubectl("-n", ns, "get", "tj").stdout
    assert "REASON" in table.splitlines()[0] and "MaxAttemptsReached" in table and status["predicted"] in table, table


def test_schema_refuses_what_it_can(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """The API server refuses schema-invalid TrainingJobs, saying which field, and fills in the defaults."""
    c, ns = e2e_cluster, e2e_namespace

    def refused(job: dict[str, Any]) -> str:
        proc = c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job), check=False)
        assert proc.returncode != 0, proc.stdout
        return proc.stderr

    missing = trainingjob_manifest("no-gpu-types", sim_seconds=5)
    del missing["spec"]["gpuTypes"]
    said = refused(missing)
    assert "gpuTypes" in said and "Required" in said, said
    said = refused(trainingjob_manifest("steps-and-epochs", sim_seconds=5, extra_spec={"epochs": 2,
                                                                                      "datasetSize": 100}))
    assert "either steps, or epochs together with datasetSize" in said, said  # the CRD's CEL rule message
    said = refused(trainingjob_manifest("zero", sim_seconds=5, batch_size=0, extra_spec={"precision": "fp8"}))
    assert "batchSize" in said and "precision" in said, said
    assert c.get("trainingjobs.offpeak.io", "-n", ns)["items"] == []

    defaulted = json.dumps(trainingjob_manifest("defaults", sim_seconds=1))
    out = json.loads(c.kubectl("-n", ns, "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=defaulted).stdout)
    assert (out["spec"]["precision"], out["spec"]["maxAttempts"], out["spec"]["workers"]) == ("fp32", 3, 1)


def test_unknown_gpu_type_fails_with_a_clear_condition(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    job = trainingjob_manifest("unknown-gpu", sim_seconds=5, gpu_types=[A100, "NoSuchGPU-9000"],
                               estimated_seconds=60, lane=BASIC)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    status = c.wait_phase(ns, "unknown-gpu", ["Failed", "Succeeded"], timeout=90)["status"]
    assert status["phase"] == "Failed", status
    valid = _conditions(status)["Valid"]
    assert valid["status"] == "False" and valid["reason"] == "UnknownGPUType", valid
    assert "NoSuchGPU-9000" in valid["message"] and "unknown GPU type" in json.dumps(status), status
    warnings = [e for e in c.get("events", "-n", ns, "--field-selector", "involvedObject.name=unknown-gpu")["items"]
                if e["type"] == "Warning"]
    assert any(e["reason"] == "UnknownGPUType" for e in warnings), warnings
    assert _owned(c, ns, "unknown-gpu") == []  # never made a pod


def test_unknown_torchvision_model_fails_with_invalid_model_source(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """The extractor rejects the model source (exit 2): the job ends Failed, says why, and makes no training pod."""
    c, ns = e2e_cluster, e2e_namespace
    job = trainingjob_manifest("no-such-model", sim_seconds=5, torchvision="no_such_model_xyz", gpu_types=[L4],
                               estimated_seconds=30, lane=BASIC)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    status = c.wait_phase(ns, "no-such-model", ["Failed", "Succeeded", "Waiting", "Running"], timeout=180)["status"]
    assert status["phase"] == "Failed", status
    conds = _conditions(status)
    graph, finished = conds["GraphReady"], conds["Finished"]
    assert graph["status"] == "False" and graph["reason"] == "InvalidModelSource", graph
    assert "no_such_model_xyz" in graph["message"] and "\n" not in graph["message"], graph  # the extractor's line
    assert finished["status"] == "True" and finished["reason"] == "InvalidModelSource", finished  # it has ended
    assert conds["Failed"]["status"] == "True" and "Succeeded" not in conds, conds
    assert "prediction" not in status and not status.get("attempts"), status  # never predicted, never launched
    events = c.get("events", "-n", ns, "--field-selector", "involvedObject.name=no-such-model")["items"]
    warnings = [e for e in events if e["type"] == "Warning" and e["reason"] == "InvalidModelSource"]
    assert warnings and "no_such_model_xyz" in warnings[0]["message"], events
    assert _owned(c, ns, "no-such-model") == []  # no training pod, no graph ConfigMap


def test_hung_analysis_pod_times_out_into_a_fallback(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """An entry-point model is analysed in the user's own image; kwok never runs the analysis pod, so this proves
    the API server accepts the pod as built, and that a hung analysis times out into a stated fallback."""
    c, ns = e2e_cluster, e2e_namespace
    job = trainingjob_manifest("user-model", sim_seconds=3, estimated_seconds=120, lane=BASIC, extra_spec={
        "inputShape": [3, 64, 64], "modelSource": {"entrypoint": "mypkg.model:build"}})
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    c.wait_for("the analysis pod", lambda: bool(c.pods(ns, "offpeak.io/role=analysis")), timeout=60)
    (pod,) = c.pods(ns, "offpeak.io/role=analysis")
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "user-model-analysis"
    assert spec["activeDeadlineSeconds"] == ANALYSIS_TIMEOUT_S
    assert [x["name"] for x in spec["initContainers"]] == ["bundle", "extract"]
    assert spec["initContainers"][1]["image"] == "registry.local/offpeak-e2e/train:1"
    assert "--entrypoint" in spec["initContainers"][1]["command"]
    assert spec["initContainers"][1]["terminationMessagePolicy"] == "FallbackToLogsOnError"  # exit message kept
    assert "nvidia.com/gpu" not in str(spec)
    # the operator records the phase just after it creates the pod
    c.wait_for("the phase Analyzing", lambda: c.phase(ns, "user-model") == "Analyzing", timeout=30)
    done = c.wait_phase(ns, "user-model", ["Succeeded", "Failed"], timeout=120)["status"]
    assert done["phase"] == "Succeeded", done
    graph = _conditions(done)["GraphReady"]
    assert graph["status"] == "False" and graph["reason"] == "AnalysisTimeout", graph
    assert done["prediction"]["source"] == "user-estimate"
    c.wait_for("the hung analysis pod removed", lambda: not [
        p for p in c.pods(ns, "offpeak.io/role=analysis") if not p["metadata"].get("deletionTimestamp")], timeout=30)


def test_a_labelled_jobs_entry_point_is_analysed_in_its_own_image_and_a_hung_analysis_falls_back(
        e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    template = offline_template(gpus=1, image="registry.local/team/ddp-train:7", lane=BASIC, annotations={
        "offpeak.io/model-source": "entrypoint:team.models:build", "offpeak.io/input-shape": "3,64,64",
        "offpeak.io/batch-size": "16", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "120",
        "offpeak.io/gpu-types": "A100", "offpeak.io/sim-runtime": "2000ms"})
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(offline_job_manifest("entry", template=template)))

    def state() -> str:
        return str(c.get("job", "-n", ns, "entry")["metadata"].get("annotations", {}).get("offpeak.io/state", ""))

    c.wait_for("the Job's analysis pod", lambda: bool(c.pods(ns, "offpeak.io/role=analysis")), timeout=60)
    (pod,) = c.pods(ns, "offpeak.io/role=analysis")
    uid = c.get("job", "-n", ns, "entry")["metadata"]["uid"]
    assert pod["metadata"]["name"] == "job-entry-analysis"
    assert pod["metadata"]["labels"]["offpeak.io/workload-name"] == "entry"
    assert pod["spec"]["initContainers"][1]["image"] == "registry.local/team/ddp-train:7"
    assert "team.models:build" in pod["spec"]["initContainers"][1]["command"]
    # the operator records the state just after it creates the pod
    c.wait_for("the Job's state Analyzing", lambda: state().startswith("Analyzing:"), timeout=30)
    assert c.get("job", "-n", ns, "entry")["spec"]["suspend"] is True
    # the Job controller leaves the pod alone: it keeps its (non-controller) owner reference, and is not counted
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "entry",
                                                  "uid": uid}]
    assert not (c.get("job", "-n", ns, "entry").get("status") or {}).get("active")
    c.wait_for("the hung analysis ended into a prediction", lambda: state().startswith("Predicted"), timeout=90)
    assert f"(no graph after {ANALYSIS_TIMEOUT_S}s of analysis)" in state(), state()
    assert c.get("job", "-n", ns, "entry")["spec"]["suspend"] is False
    c.wait_for("the hung analysis pod removed", lambda: not [
        p for p in c.pods(ns, "offpeak.io/role=analysis") if not p["metadata"].get("deletionTimestamp")], timeout=30)
