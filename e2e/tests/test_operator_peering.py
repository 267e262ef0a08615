"""HA: two operators with kopf peering on the same namespace; the lower priority one pauses, the job runs once."""

from __future__ import annotations

import json
from pathlib import Path

from test_operator_lifecycle import RunningOperator, _apply, _job, operator_service_paused  # noqa: F401 - fixture

from offpeak_e2e.harness import E2ECluster

PEERING_CRDS = Path(__file__).resolve().parents[2] / "crds" / "kopf-peering.yaml"


def test_peered_operators_work_one_at_a_time(e2e_cluster: E2ECluster, e2e_namespace: str,
                                             operator_service_paused: None) -> None:  # noqa: F811
    ns = e2e_namespace
    e2e_cluster.kubectl("apply", "-f", str(PEERING_CRDS))
    e2e_cluster.kubectl("wait", "--for=condition=established", "crd/kopfpeerings.kopf.dev", "--timeout=60s")
    e2e_cluster.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                       "metadata": {"name": "offpeak-operator", "namespace": ns}})
    # no --standalone: the operator detects the peering CRDs and uses the `offpeak-operator` peering object
    high = RunningOperator(e2e_cluster, ns, kopf_args=("--priority", "20"))
    low = RunningOperator(e2e_cluster, ns, kopf_args=("--priority", "10"))
    high.start()
    low.start()
    try:
        def both_registered() -> bool:
            status = e2e_cluster.get("kopfpeerings.kopf.dev", "offpeak-operator", "-n", ns).get("status") or {}
            return sorted(p.get("priority") for p in status.values()) == [10, 20]

        e2e_cluster.wait_for("both operators in the peering object", both_registered, timeout=60)
        _apply(e2e_cluster, ns, _job("peered", sim_seconds=3, modelSource=None, estimatedSeconds=60))
        done = e2e_cluster.wait_phase(ns, "peered", ["Succeeded", "Failed"], timeout=120)["status"]
        assert done["phase"] == "Succeeded" and done["attempts"] == 1, done
        pods = e2e_cluster.pods(ns, "offpeak.io/trainingjob=peered")
        assert [p["metadata"]["name"] for p in pods] == ["peered-a1-w0"], json.dumps(pods)[:500]
    finally:
        low.stop()
        high.stop()
    assert "Pausing operations in favour of" in low.output
    assert "Pausing operations" not in high.output
