"""Scenario 4: bad input. Schema-invalid TrainingJobs are rejected by the API server; semantically bad ones end with
a clear condition; deleting them leaves nothing behind."""

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


def test_unextractable_model_reports_graph_condition_and_cleans_up(
    e2e_cluster: E2ECluster, e2e_namespace: str
) -> None:
    ns = e2e_namespace
    job = trainingjob_manifest("no-such-model", sim_seconds=5, torchvision="no_such_model_xyz",
                               gpu_types=["L4"], estimated_seconds=30)
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))

    def graph_condition() -> bool:
        st = e2e_cluster.trainingjob(ns, "no-such-model").get("status") or {}
        return _conditions(st).get("GraphReady", {}).get("status") == "False"

    e2e_cluster.wait_for("GraphReady=False on no-such-model", graph_condition, timeout=180)
    status = e2e_cluster.trainingjob(ns, "no-such-model")["status"]
    graph = _conditions(status)["GraphReady"]
    assert graph["reason"] == "ExtractionFailed" and "no_such_model_xyz" in graph["message"], graph
    # the job does not guess silently: its prediction says it is a fallback
    e2e_cluster.wait_for("a fallback prediction", lambda: bool(
        (e2e_cluster.trainingjob(ns, "no-such-model").get("status") or {}).get("prediction")), timeout=60)
    prediction = e2e_cluster.trainingjob(ns, "no-such-model")["status"]["prediction"]
    assert prediction["source"] in ("user-estimate", "default"), prediction

    e2e_cluster.kubectl("-n", ns, "delete", "trainingjob", "no-such-model", "--wait=true", timeout=90)
    e2e_cluster.wait_for("no pods/ConfigMaps left for no-such-model",
                         lambda: _owned(e2e_cluster, ns, "no-such-model") == [], timeout=60)
