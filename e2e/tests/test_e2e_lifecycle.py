"""Scenario 1: a TrainingJob goes Analyzing -> Predicted -> Running (placed by offpeak-scheduler on a node of an
allowed GPU type) -> Succeeded with its measured seconds; `kubectl get tj` shows the printer columns."""

from __future__ import annotations

import time

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_e2e.harness import E2ECluster, trainingjob_manifest

SIM_SECONDS = 20


def test_trainingjob_lifecycle(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    ns = e2e_namespace
    t0 = time.monotonic()
    job = trainingjob_manifest("lifecycle", sim_seconds=SIM_SECONDS, gpu_types=["A100-SXM4-40GB", "L4"])
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=__import__("json").dumps(job))

    phases: list[str] = []

    def record_until_running() -> bool:
        p = e2e_cluster.phase(ns, "lifecycle")
        if p and (not phases or phases[-1] != p):
            phases.append(p)
        return p in ("Running", "Succeeded", "Failed")

    e2e_cluster.wait_for("TrainingJob lifecycle running", record_until_running, timeout=240, interval=0.3)
    print(f"[e2e] submitted -> running: {time.monotonic() - t0:.1f}s; phases {phases}")
    assert "Failed" not in phases, e2e_cluster.trainingjob(ns, "lifecycle").get("status")

    running = e2e_cluster.trainingjob(ns, "lifecycle")["status"]
    # the graph was extracted and the predictor (not a fallback) gave per-GPU predictions
    assert running.get("graph", {}).get("hash"), running
    assert running["prediction"]["source"] == "predictor", running["prediction"]
    conditions = {c["type"]: c for c in running.get("conditions") or []}
    assert conditions["Predicted"]["status"] == "True", conditions  # Predicted may pass too fast to poll as a phase
    predicted_types = {g["gpuType"] for g in running["prediction"]["gpus"]}
    assert predicted_types == {"A100-SXM4-40GB", "L4"}

    (pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=lifecycle,offpeak.io/workload=offline")
    assert pod["spec"]["schedulerName"] == "offpeak-scheduler"
    node = pod["spec"]["nodeName"]
    node_obj = e2e_cluster.get("node", node)
    # no offpeak.io/gpu-type label: the type comes from GPU feature discovery's product label
    assert "offpeak.io/gpu-type" not in node_obj["metadata"]["labels"]
    assert node_gpu_type(node_obj["metadata"]["labels"]) in {"A100-SXM4-40GB", "L4"}
    events = e2e_cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={pod['metadata']['name']}")
    scheduled = [e for e in events["items"] if e["reason"] == "Scheduled"]
    assert scheduled and (scheduled[0].get("reportingComponent") or scheduled[0]["source"].get("component")) \
        == "offpeak-scheduler"
    assert "offpeak.io/predicted-job-seconds" in pod["metadata"]["annotations"]

    done = e2e_cluster.wait_phase(ns, "lifecycle", ["Succeeded", "Failed"], timeout=SIM_SECONDS + 120)
    print(f"[e2e] submitted -> finished: {time.monotonic() - t0:.1f}s")
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["node"] == node
    # kwok completes the pod exactly SIM_SECONDS after it runs; allow for status-update latency
    assert SIM_SECONDS - 2 <= status["actualSeconds"] <= SIM_SECONDS + 30, status
    assert status["predictedSeconds"] > 0

    table = e2e_cluster.kubectl("-n", ns, "get", "tj").stdout
    header = table.splitlines()[0].split()
    for column in ("NAME", "PHASE", "GPUS", "PREDICTED", "ACTUAL", "NODE", "AGE"):
        assert column in header, table
    assert "lifecycle" in table and "Succeeded" in table and node in table
