"""Scenario 4: bad input. Schema-invalid TrainingJobs are rejected by the API server; semantically bad ones (unknown
GPU type, a model source the extractor rejects) end Failed with a clear condition; nothing is left behind.

Failures that are not the user's (a hung analysis pod) fall back instead: e2e/tests/test_operator_analysis.py."""

from __future__ import annotations

import json
from typing import Any

from offpeak_e2e.harness import E2ECluster, trainingjob_manifest


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def _owned(cluster: E2ECluster, ns: str, name: str) -> list[str]:
    found = []
    for kind in ("pods", "configmaps"):
        items = cluster.get(kind, "-n", ns, "-l", f"offpeak.io/trainingjob={name}")["items"]
        found += [f"{kind}/{i['metadata']['name']}" for i in items if not i["metadata"].get("deletionTimestamp")]
    return found


def test_schema_rejects_invalid_trainingjobs(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    missing = trainingjob_manifest("no-gpu-types", sim_seconds=5)
    del missing["spec"]["gpuTypes"]
    proc = e2e_cluster.kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=json.dumps(missing), check=False)
    assert proc.returncode != 0
    assert "gpuTypes" in proc.stderr and "Required" in proc.stderr, proc.stderr

    both = trainingjob_manifest("steps-and-epochs", sim_seconds=5, extra_spec={"epochs": 2, "datasetSize": 100})
    proc = e2e_cluster.kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=json.dumps(both), check=False)
    assert proc.returncode != 0
    assert "either steps, or epochs" in proc.stderr, proc.stderr  # the CRD's CEL rule message

    negative = trainingjob_manifest("bad-batch", sim_seconds=5, batch_size=0)
    proc = e2e_cluster.kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=json.dumps(negative), check=False)
    assert proc.returncode != 0 and "batchSize" in proc.stderr, proc.stderr
    assert e2e_cluster.get("trainingjobs.offpeak.io", "-n", e2e_namespace)["items"] == []


def test_unknown_gpu_type_fails_with_a_clear_condition(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    ns = e2e_namespace
    job = trainingjob_manifest("unknown-gpu", sim_seconds=5, gpu_types=["NoSuchGPU-9000"], torchvision=None,
                               estimated_seconds=60)
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    done = e2e_cluster.wait_phase(ns, "unknown-gpu", ["Failed", "Succeeded"], timeout=90)
    status = done["status"]
    assert status["phase"] == "Failed", status
    text = json.dumps(status)
    assert "NoSuchGPU-9000" in text and "unknown GPU type" in text, status
    assert any(c["status"] == "False" for c in _conditions(status).values()), status
    assert _owned(e2e_cluster, ns, "unknown-gpu") == []  # never made a pod


def test_unknown_torchvision_model_fails_with_invalid_model_source(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """The extractor rejects the model source (exit 2): the job ends Failed, says why, and makes no training pod."""
    ns = e2e_namespace
    job = trainingjob_manifest("no-such-model", sim_seconds=5, torchvision="no_such_model_xyz",
                               gpu_types=["L4"], estimated_seconds=30)
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    status = e2e_cluster.wait_phase(ns, "no-such-model", ["Failed", "Succeeded", "Waiting", "Running"],
                                    timeout=180)["status"]
    assert status["phase"] == "Failed", status
    conds = _conditions(status)
    graph, finished = conds["GraphReady"], conds["Finished"]
    assert graph["status"] == "False" and graph["reason"] == "InvalidModelSource", graph
    assert "no_such_model_xyz" in graph["message"] and "\n" not in graph["message"], graph  # the extractor's line
    assert finished["status"] == "True" and finished["reason"] == "InvalidModelSource", finished  # it has ended
    assert conds["Failed"]["status"] == "True" and "Succeeded" not in conds, conds
    assert "prediction" not in status and not status.get("attempts"), status  # never predicted, never launched
    events = e2e_cluster.get("events", "-n", ns, "--field-selector", "involvedObject.name=no-such-model")["items"]
    warnings = [e for e in events if e["type"] == "Warning" and e["reason"] == "InvalidModelSource"]
    assert warnings and "no_such_model_xyz" in warnings[0]["message"], events
    assert _owned(e2e_cluster, ns, "no-such-model") == []  # no training pod, no graph ConfigMap

    e2e_cluster.kubectl("-n", ns, "delete", "trainingjob", "no-such-model", "--wait=true", timeout=90)
    assert _owned(e2e_cluster, ns, "no-such-model") == []
    assert e2e_cluster.get("trainingjobs.offpeak.io", "-n", ns)["items"] == []
