"""Scenario 3: an online surge on a node evicts its offline pods within the grace period; the TrainingJob is
Requeued and later finishes on another node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from offpeak_e2e.harness import E2ECluster, trainingjob_manifest


@pytest.fixture
def online_reset(e2e_cluster: E2ECluster) -> Iterator[None]:
    yield
    for node in e2e_cluster.nodes:
        e2e_cluster.scale_online(node, 0)


def test_online_surge_evicts_and_requeues(e2e_cluster: E2ECluster, e2e_namespace: str, online_reset: None) -> None:
    ns = e2e_namespace
    grace = e2e_cluster.cluster.settings.eviction_grace_s
    first, other = e2e_cluster.node_of_type("V100-SXM2-16GB"), e2e_cluster.node_of_type("L4")
    e2e_cluster.scale_online(other, 8)  # the L4 node is full of online work, so the job lands on the V100 node
    e2e_cluster.wait_for(f"8 online pods running on {other}", lambda: len([
        p for p in e2e_cluster.pods("online", f"app=online-{other}") if p["status"].get("phase") == "Running"
    ]) == 8, timeout=60)

    job = trainingjob_manifest("surge", sim_seconds=60, gpu_types=["V100-SXM2-16GB", "L4"], torchvision=None,
                               estimated_seconds=60, extra_spec={"gpusPerWorker": 4, "checkpointing": True})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    running = e2e_cluster.wait_phase(ns, "surge", ["Running"], timeout=120)
    assert running["status"]["node"] == first, running["status"]
    (pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=surge,offpeak.io/workload=offline")
    pod_name = pod["metadata"]["name"]

    t = time.monotonic()
    e2e_cluster.scale_online(first, 6)  # 6 online + 4 offline > 8 GPUs
    e2e_cluster.scale_online(other, 0)  # ... while the L4 node frees up

    def evicted() -> bool:
        p = e2e_cluster.kubectl("-n", ns, "get", "pod", pod_name, "-o", "json", check=False)
        if p.returncode != 0:
            return True
        return bool(json.loads(p.stdout)["metadata"].get("deletionTimestamp"))

    e2e_cluster.wait_for(f"offline pod {pod_name} evicted", evicted, timeout=grace + 30, interval=0.5)
    took = time.monotonic() - t
    print(f"[e2e] surge -> eviction: {took:.1f}s (grace {grace}s)")
    assert took <= grace + 30

    phases: list[str] = []

    def finished() -> bool:
        ph = e2e_cluster.phase(ns, "surge")
        if ph and (not phases or phases[-1] != ph):
            phases.append(ph)
        return ph in ("Succeeded", "Failed")

    e2e_cluster.wait_for("surge job finished after requeue", finished, timeout=240, interval=0.5)
    status = e2e_cluster.trainingjob(ns, "surge")["status"]
    print(f"[e2e] phases after eviction: {phases}")
    assert status["phase"] == "Succeeded", status
    assert status["attempts"] >= 2, status
    assert status["node"] == other, status  # finished elsewhere
