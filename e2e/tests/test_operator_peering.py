"""HA on the real control plane (lane `ownop`): two operators with kopf peering on one namespace; the lower priority
one pauses, the job runs once. Both run in this test process (kopf.testing.KopfRunner) on a namespace the
cluster's own operator leaves alone (`own-*`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner
from prometheus_client import CollectorRegistry

from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.lanes import OWN_OPERATOR, OWN_OPERATOR_PREFIX
from offpeak_operator.settings import OperatorSettings, PredictorSettings, RequeueSettings
from offpeak_operator.wiring import Operator, build_operator


PEERING_CRDS = Path(__file__).resolve().parents[2] / "crds" / "kopf-peering.yaml"


class RunningOperator:
    """The real operator in this process for one namespace (kopf.testing.KopfRunner)."""

    def __init__(self, cluster: E2ECluster, namespace: str, *, kopf_args: tuple[str, ...]) -> None:
        self.cluster, self.namespace, self.kopf_args = cluster, namespace, kopf_args
        self.output = ""
        self.op: Operator | None = None
        self.runner: KopfRunner | None = None

    def start(self) -> Operator:
        settings = OperatorSettings(
            predictor=PredictorSettings(url=self.cluster.state.urls["predictor"], timeout_seconds=5),
            requeue=RequeueSettings(base_seconds=2), resync_seconds=1.0)
        self.op = build_operator(settings, kubeconfig=str(self.cluster.kubeconfig), metrics_registry=CollectorRegistry())
        self.runner = KopfRunner(["run", *self.kopf_args, "--namespace", self.namespace], registry=self.op.registry,
                                 settings=self.op.kopf_settings, timeout=60)
        self.runner.__enter__()
        return self.op

    def stop(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            runner.__exit__(None, None, None)
            self.output += runner.output


def test_peered_operators_work_one_at_a_time(e2e_cluster: E2ECluster) -> None:
    c = e2e_cluster
    ns = c.new_namespace(f"{OWN_OPERATOR_PREFIX}peer")
    c.kubectl("apply", "-f", str(PEERING_CRDS))
    c.kubectl("wait", "--for=condition=established", "crd/kopfpeerings.kopf.dev", "--timeout=60s")
    c.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "offpeak-operator", "namespace": ns}})
    # no --standalone: the operator detects the peering CRDs and uses the `offpeak-operator` peering object
    high = RunningOperator(c, ns, kopf_args=("--priority", "20"))
    low = RunningOperator(c, ns, kopf_args=("--priority", "10"))
    high.start()
    low.start()
    try:
        def both_registered() -> bool:
            status: dict[str, Any] = c.get("kopfpeerings.kopf.dev", "offpeak-operator", "-n", ns).get("status") or {}
            return sorted(p.get("priority") for p in status.values()) == [10, 20]

        c.wait_for("both operators in the peering object", both_registered, timeout=60)
        job = trainingjob_manifest("peered", sim_seconds=3, estimated_seconds=60, lane=OWN_OPERATOR)
        c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
        done = c.wait_phase(ns, "peered", ["Succeeded", "Failed"], timeout=120)["status"]
        assert done["phase"] == "Succeeded" and done["attempts"] == 1, done
        pods = c.pods(ns, "offpeak.io/trainingjob=peered")
        assert [p["metadata"]["name"] for p in pods] == ["peered-a1-w0"], json.dumps(pods)[:500]
    finally:
        low.stop()
        high.stop()
        c.delete_namespace(ns)
    assert "Pausing operations in favour of" in low.output
    assert "Pausing operations" not in high.output
