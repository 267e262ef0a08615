"""Faults (a cluster of its own: these tests kill and stop offpeak's services, which every other scenario shares):
the operator SIGKILLed mid-flight makes no duplicate pod; with the predictor down a job gets a stated fallback
prediction, and once the predictor is back the waiting job is predicted again; with the extender down, GPU pods on
offpeak-scheduler still schedule (the extender is `ignorable`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from offpeak_e2e import procs
from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import (
    E2ECluster, graph_configmap, mlp_graph, own_cluster, session_cluster_name, trainingjob_manifest,
)
from offpeak_e2e.lanes import A100, H100, L4



@pytest.fixture(scope="module")
def faults_cluster() -> Iterator[E2ECluster]:
    """Two nodes, no online load and no history: nothing here depends on a forecast."""
    settings = ClusterSettings(
        control_plane=ControlPlaneSettings(name=session_cluster_name("pytest-faults"), nodes=2, gpu_types=(A100, L4),
                                           build_missing=False),
        online_load=False, history_days=0,
    )
    yield from own_cluster(settings, "faults")


@pytest.fixture
def ns(faults_cluster: E2ECluster) -> Iterator[str]:
    namespace = faults_cluster.new_namespace("faults")
    yield namespace
    for name in ("predictor", "extender", "operator"):  # whatever a test stopped runs again afterwards
        proc = faults_cluster.cluster.sup.get(name)
        if proc is None or not procs.alive(proc):
            faults_cluster.start_service(name)


def test_operator_crash_mid_flight_makes_no_duplicate_pods(faults_cluster: E2ECluster, ns: str) -> None:
    c = faults_cluster
    job = trainingjob_manifest("crashy", sim_seconds=25, gpu_types=[H100, A100], estimated_seconds=40)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    c.wait_phase(ns, "crashy", ["Running"], timeout=120)
    t = time.monotonic()
    c.kill_service("operator")  # SIGKILL: no graceful shutdown
    time.sleep(5)
    c.start_service("operator")
    print(f"[e2e] operator down and back: {time.monotonic() - t:.1f}s")
    done = c.wait_phase(ns, "crashy", ["Succeeded", "Failed"], timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"].get("attempts", 1) == 1
    pods = c.pods(ns, "offpeak.io/trainingjob=crashy,offpeak.io/workload=offline")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]


def test_predictor_down_gives_a_fallback_prediction_and_the_predictor_back_predicts_again(
        faults_cluster: E2ECluster, ns: str) -> None:
    """The job has a model graph (so only the predictor can predict it) and must wait (its node is cordoned): the
    fallback says why, and the waiting job is predicted again once the predictor answers."""
    c = faults_cluster
    node = c.node_of_type(L4)
    c.stop_service("predictor")
    c.kubectl("cordon", node)
    try:
        c.apply(graph_configmap("faults-graph", ns, mlp_graph(width=640)))
        job = trainingjob_manifest("no-predictor", sim_seconds=5, gpu_types=[L4], estimated_seconds=300, extra_spec={
            "modelSource": {"graphConfigMap": {"name": "faults-graph"}}})
        c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
        c.wait_for("a prediction on no-predictor", lambda: bool(
            (c.trainingjob(ns, "no-predictor").get("status") or {}).get("prediction")), timeout=180)
        status = c.trainingjob(ns, "no-predictor")["status"]
        assert status["prediction"]["source"] == "user-estimate", status["prediction"]
        predicted = {x["type"]: x for x in status.get("conditions") or []}.get("Predicted")
        assert predicted is not None and "predictor" in predicted["message"].lower(), status  # says why it fell back

        c.start_service("predictor")
        c.wait_for("the waiting job predicted again by the predictor", lambda: (
            c.trainingjob(ns, "no-predictor").get("status") or {}).get("prediction", {}).get("source") == "predictor",
            timeout=120)
    finally:
        c.kubectl("uncordon", node)
    done = c.wait_phase(ns, "no-predictor", ["Succeeded", "Failed"], timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_extender_down_pods_still_schedule(faults_cluster: E2ECluster, ns: str) -> None:
    c = faults_cluster
    c.stop_service("extender")
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain-gpu-pod", "namespace": ns},
        "spec": {
            "schedulerName": "offpeak-scheduler",
            "containers": [{"name": "c", "image": "registry.local/x:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    t = time.monotonic()
    c.apply(pod)

    def scheduled() -> bool:
        p = c.get("pod", "plain-gpu-pod", "-n", ns)
        return bool(p["spec"].get("nodeName")) and p["status"].get("phase") == "Running"

    c.wait_for("plain-gpu-pod scheduled while the extender is down", scheduled, timeout=60)
    print(f"[e2e] scheduled without extender: {time.monotonic() - t:.1f}s")
    events = c.get("events", "-n", ns, "--field-selector", "involvedObject.name=plain-gpu-pod")["items"]
    assert any(e["reason"] == "Scheduled" for e in events)
