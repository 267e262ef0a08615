"""A TrainingJob queued in Kueue, through the reconciler over an in-memory API server: the Workload it makes, the
pods it holds back until Kueue admits it, where they go, and the quota it gives back (offpeak_operator.admission,
queueing). Kueue itself is played by the test (it reserves quota and admits by writing the Workload's status)."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes.client.exceptions import ApiException
from optestkit import job_body
from prometheus_client import CollectorRegistry
from test_op_reconciler import Clock, FakePredictor, MemoryKube

from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.reconciler import Context, Reconciler
from offpeak_operator.settings import OperatorSettings, RequeueSettings

QUEUE = "team-gpus"
WORKLOAD = "trainingjob-train-1-uid12"


class KueueKube(MemoryKube):
    """MemoryKube with Kueue's Workloads and ResourceFlavors; `conflicts` status patches fail with 409 first."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        self.workloads: dict[str, dict[str, Any]] = {}
        self.flavors = {"a100-pool": {"metadata": {"name": "a100-pool"},
                                      "spec": {"nodeLabels": {"pool": "a100"}}}}
        self.conflicts = 0
        self.annotated: list[tuple[str, dict[str, str]]] = []

    def get_kueue_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.workloads.get(name))

    def create_kueue_workload(self, body: dict[str, Any]) -> bool:
        if body["metadata"]["name"] in self.workloads:
            return False
        self.workloads[body["metadata"]["name"]] = {**copy.deepcopy(body), "status": {}}
        self.workloads[body["metadata"]["name"]]["metadata"]["resourceVersion"] = "1"
        return True

    def patch_kueue_workload_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        current = self.workloads[name]
        if self.conflicts or patch["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            self.conflicts = max(0, self.conflicts - 1)
            raise ApiException(status=409, reason="Conflict")
        for key, value in patch["status"].items():
            if value is None:
                current["status"].pop(key, None)
            else:
                current["status"][key] = copy.deepcopy(value)
        current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)

    def get_resource_flavor(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.flavors.get(name))

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.annotated.append((name, dict(annotations)))
        self.pods[name]["metadata"].setdefault("annotations", {}).update(annotations)

    # Kueue's side
    def admit(self) -> None:
        status = self.workloads[WORKLOAD]["status"]
        status["conditions"] = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                                {"type": "Admitted", "status": "True", "reason": "Admitted"}]
        status["admission"] = {"clusterQueue": "gpu-cq", "podSetAssignments": [
            {"name": "workers", "flavors": {"nvidia.com/gpu": "a100-pool"}, "count": 1}]}
        self._bump()

    def evict(self, reason: str = "Preempted") -> None:
        self.workloads[WORKLOAD]["status"]["conditions"].append(
            {"type": "Evicted", "status": "True", "reason": reason, "message": "preempted by a higher priority"})
        self._bump()

    def _bump(self) -> None:
        meta = self.workloads[WORKLOAD]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.workloads[WORKLOAD]["status"]["conditions"] if c["type"] == kind)


def make(*, kueue: bool = True, **spec: Any) -> tuple[Reconciler, KueueKube]:
    job = job_body(**spec)
    job["metadata"]["uid"] = "uid-12345"
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    kube = KueueKube(job)
    ctx = Context(settings=OperatorSettings(requeue=RequeueSettings(base_seconds=10), kueue=kueue), kube=kube,
                  predictor=FakePredictor(), metrics=OperatorMetrics(CollectorRegistry()), resolve_gpu=None,
                  clock=Clock())
    return Reconciler(ctx), kube


def test_a_queued_job_runs_only_once_kueue_admits_it_on_its_flavors_nodes_and_then_finishes_its_workload() -> None:
    rec, kube = make()
    assert rec.reconcile("ns", "train-1") == "Predicted"
    assert kube.pods == {} and set(kube.workloads) == {WORKLOAD}
    workload = kube.workloads[WORKLOAD]
    assert workload["spec"]["queueName"] == QUEUE and workload["metadata"]["ownerReferences"][0]["uid"] == "uid-12345"
    template = workload["spec"]["podSets"][0]["template"]
    assert "offpeak.io/predicted-job-seconds" in template["metadata"]["annotations"]  # the check judges this
    assert kube.job["status"]["reason"] == "QueuedInKueue"
    assert rec.reconcile("ns", "train-1") == "Predicted" and kube.pods == {}  # no quota yet: still held

    kube.admit()
    assert rec.reconcile("ns", "train-1") == "Waiting"
    pod = kube.pods["train-1-a1-w0"]
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}  # Kueue's flavor, as Kueue puts a Job's pods there
    suspended = next(c for c in kube.job["status"]["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "False"

    kube.set_pod("train-1-a1-w0", "Succeeded", finish=rec.ctx.clock.now)
    assert rec.reconcile("ns", "train-1") == "Succeeded"
    assert (kube.condition("Finished")["status"], kube.condition("Finished")["reason"]) == ("True", "Succeeded")


def test_kueue_evicting_the_workload_stops_the_pods_and_gives_the_quota_back() -> None:
    rec, kube = make()
    rec.reconcile("ns", "train-1")
    kube.admit()
    assert rec.reconcile("ns", "train-1") == "Waiting"
    kube.set_pod("train-1-a1-w0", "Running")
    rec.reconcile("ns", "train-1")
    kube.evict()
    kube.conflicts = 1  # Kueue writes the Workload between the operator's read and its patch
    rec.reconcile("ns", "train-1")
    assert kube.annotated == [("train-1-a1-w0", {"offpeak.io/eviction-reason": "EvictedByKueue"})]
    rec.reconcile("ns", "train-1")  # the marked pod is evicted: requeued, not counted, its quota given back
    assert "train-1-a1-w0" not in kube.pods and kube.job["status"]["plannedStops"] == 1
    assert ("Normal", "EvictedByKueue") in [(t, r) for t, r, _ in kube.events]
    # ... and, in the same pass, it waits in its queue again
    assert kube.job["status"]["phase"] == "Requeued" and kube.job["status"]["reason"] == "QueuedInKueue"
    status = kube.workloads[WORKLOAD]["status"]
    assert "admission" not in status and kube.condition("QuotaReserved")["status"] == "False"
    assert kube.condition("Requeued")["status"] == "True"
    assert rec.reconcile("ns", "train-1") == "Requeued" and kube.pods == {}  # queued again: held until admitted


def test_a_queue_label_without_kueue_in_the_operator_fails_the_job_saying_how_to_fix_it() -> None:
    rec, kube = make(kueue=False)
    assert rec.reconcile("ns", "train-1") == "Failed"
    assert kube.job["status"]["reason"] == "KueueNotEnabled" and "operator.kueue.enabled" in kube.job["status"][
        "message"]
    assert kube.workloads == {} and kube.pods == {}
