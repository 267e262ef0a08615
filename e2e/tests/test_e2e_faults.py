"""Scenario 5: faults. Operator crash mid-flight, predictor down, extender down."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from offpeak_e2e.harness import E2ECluster, trainingjob_manifest


@pytest.fixture
def restore_services(e2e_cluster: E2ECluster) -> Iterator[None]:
    """Whatever a test stops is running again afterwards (the cluster is shared by the session)."""
    yield
    for name in ("predictor", "extender", "operator"):
        proc = e2e_cluster.cluster.sup.get(name)
        from offpeak_e2e import procs

        if proc is None or not procs.alive(proc):
            e2e_cluster.start_service(name)


def test_operator_crash_mid_flight_makes_no_duplicate_pods(
    e2e_cluster: E2ECluster, e2e_namespace: str, restore_services: None
) -> None:
    ns = e2e_namespace
    job = trainingjob_manifest("crashy", sim_seconds=25, gpu_types=["H100-SXM5-80GB", "A100-SXM4-40GB"],
                               torchvision=None, estimated_seconds=40)
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    e2e_cluster.wait_phase(ns, "crashy", ["Running"], timeout=120)
    t = time.monotonic()
    e2e_cluster.kill_service("operator")  # SIGKILL: no graceful shutdown
    time.sleep(5)
    e2e_cluster.start_service("operator")
    print(f"[e2e] operator down and back: {time.monotonic() - t:.1f}s")
    done = e2e_cluster.wait_phase(ns, "crashy", ["Succeeded", "Failed"], timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"].get("attempts", 1) == 1
    pods = e2e_cluster.pods(ns, "offpeak.io/trainingjob=crashy,offpeak.io/workload=offline")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]


def test_predictor_down_gives_a_fallback_prediction_with_a_condition(
    e2e_cluster: E2ECluster, e2e_namespace: str, restore_services: None
) -> None:
    ns = e2e_namespace
    e2e_cluster.stop_service("predictor")
    job = trainingjob_manifest("no-predictor", sim_seconds=5, gpu_types=["L4"], estimated_seconds=300)
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    e2e_cluster.wait_for("a prediction on no-predictor", lambda: bool(
        (e2e_cluster.trainingjob(ns, "no-predictor").get("status") or {}).get("prediction")), timeout=180)
    status = e2e_cluster.trainingjob(ns, "no-predictor")["status"]
    assert status["prediction"]["source"] == "user-estimate", status["prediction"]
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    predicted = conditions.get("Predicted")
    assert predicted is not None, status
    assert "predictor" in predicted["message"].lower(), predicted  # says why it fell back
    e2e_cluster.start_service("predictor")
    done = e2e_cluster.wait_phase(ns, "no-predictor", ["Succeeded", "Failed"], timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_extender_down_pods_still_schedule(
    e2e_cluster: E2ECluster, e2e_namespace: str, restore_services: None
) -> None:
    ns = e2e_namespace
    e2e_cluster.stop_service("extender")
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain-gpu-pod", "namespace": ns},
        "spec": {
            "schedulerName": "offpeak-scheduler",
            "containers": [{"name": "c", "image": "registry.local/x:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    t = time.monotonic()
    e2e_cluster.apply(pod)

    def scheduled() -> bool:
        p = e2e_cluster.get("pod", "plain-gpu-pod", "-n", ns)
        return bool(p["spec"].get("nodeName")) and p["status"].get("phase") == "Running"

    e2e_cluster.wait_for("plain-gpu-pod scheduled while the extender is down", scheduled, timeout=60)
    print(f"[e2e] scheduled without extender: {time.monotonic() - t:.1f}s")
    events = e2e_cluster.get("events", "-n", ns, "--field-selector", "involvedObject.name=plain-gpu-pod")["items"]
    assert any(e["reason"] == "Scheduled" for e in events)
