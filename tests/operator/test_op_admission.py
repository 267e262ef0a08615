"""spec.suspend and Kueue's admission of a queued TrainingJob (offpeak_operator.admission), on plain data: what
the operator reads from a Workload, when it holds or stops a job, and what it writes to Kueue."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
from optestkit import NOW, job_body

from offpeak_operator import admission
from offpeak_operator.jobspec import parse_spec
from offpeak_operator.podspecs import training_pod

QUEUE = "team-gpus"
FLAVORS = {"a100-pool": {"spec": {"nodeLabels": {"pool": "a100"},
                                  "tolerations": [{"key": "pool", "operator": "Equal", "value": "a100",
                                                   "effect": "NoSchedule"}]}},
           "default": {"spec": {"nodeLabels": {"zone": "z1"}}}}


def workload(*conditions: tuple[str, str, str], flavors: dict[str, str] | None = None) -> dict[str, Any]:
    """A Workload as Kueue leaves it: (type, status, reason) conditions and the flavors of its admission."""
    status: dict[str, Any] = {"conditions": [{"type": t, "status": s, "reason": r, "message": f"{t} {r}",
                                              "lastTransitionTime": "2026-11-21T05:00:00Z"} for t, s, r in conditions]}
    if flavors is not None:
        status["admission"] = {"clusterQueue": "gpu-cq", "podSetAssignments": [
            {"name": "workers", "flavors": flavors, "count": 2}]}
    return {"metadata": {"name": "trainingjob-train-1-uid12", "namespace": "ns", "resourceVersion": "41",
                         "generation": 1}, "status": status}


ADMITTED = workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
                    flavors={"nvidia.com/gpu": "a100-pool", "cpu": "default"})


def view(obj: dict[str, Any] | None) -> admission.WorkloadView:
    return admission.workload_view(obj, name="trainingjob-train-1-uid12", resource_flavors=FLAVORS)


def test_an_admitted_workload_places_the_pods_on_its_flavors_nodes() -> None:
    seen = view(ADMITTED)
    assert seen.admitted and seen.quota_reserved and not seen.evicted and seen.cluster_queue == "gpu-cq"
    assert seen.flavors == ("a100-pool", "default")
    where = admission.placement(seen)
    assert where.node_selector == {"pool": "a100", "zone": "z1"}
    assert where.tolerations == ({"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},)
    assert admission.placement(view(workload(("QuotaReserved", "True", "QuotaReserved")))) == admission.Placement()
    assert admission.launch_gate(suspend=False, queue=QUEUE, workload=seen) is None
    assert admission.stop_reason(suspend=False, queue=QUEUE, workload=seen) is None


def test_a_queued_job_waits_for_its_workload_then_its_quota_then_its_checks() -> None:
    missing = admission.launch_gate(suspend=False, queue=QUEUE, workload=view(None))
    assert missing is not None and missing.create_workload and missing.reason == admission.QUEUED
    pending = admission.launch_gate(suspend=False, queue=QUEUE, workload=view(workload()))
    assert pending is not None and not pending.create_workload and "waiting for quota" in pending.message
    reserved = admission.launch_gate(suspend=False, queue=QUEUE,
                                     workload=view(workload(("QuotaReserved", "True", "QuotaReserved"),
                                                            flavors={"nvidia.com/gpu": "a100-pool"})))
    assert reserved is not None and "gpu-cq" in reserved.message and "admission checks" in reserved.message
    # a job in no queue is held only by its own spec.suspend
    assert admission.launch_gate(suspend=False, queue=None, workload=None) is None
    suspended = admission.launch_gate(suspend=True, queue=None, workload=None)
    assert suspended is not None and suspended.reason == admission.SUSPENDED
    assert admission.launch_gate(suspend=True, queue=QUEUE, workload=view(ADMITTED)).reason == admission.SUSPENDED


def test_running_pods_stop_when_suspended_or_when_kueue_takes_the_admission_back() -> None:
    evicted = view(workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
                            ("Evicted", "True", "Preempted"), flavors={"nvidia.com/gpu": "a100-pool"}))
    assert evicted.evicted and evicted.evicted_reason == "Preempted"
    assert admission.stop_reason(suspend=False, queue=QUEUE, workload=evicted) == admission.EVICTED_BY_KUEUE
    assert admission.stop_reason(suspend=False, queue=QUEUE, workload=view(None)) == admission.EVICTED_BY_KUEUE
    assert admission.stop_reason(suspend=True, queue=None, workload=None) == admission.SUSPENDED
    assert admission.stop_reason(suspend=False, queue=None, workload=None) is None
    # once its pods are gone the evicted workload's quota goes back (and it queues again)
    gate = admission.launch_gate(suspend=False, queue=QUEUE, workload=evicted)
    assert gate is not None and gate.release_quota and gate.reason == admission.EVICTED_BY_KUEUE


def test_an_ended_jobs_workload_is_finished_once() -> None:
    assert admission.needs_finish(queue=QUEUE, workload=view(ADMITTED))
    done = view(workload(("Finished", "True", "Succeeded")))
    assert not admission.needs_finish(queue=QUEUE, workload=done)
    assert not admission.needs_finish(queue=QUEUE, workload=view(None))
    assert not admission.needs_finish(queue=None, workload=view(ADMITTED))


def test_the_workload_is_the_jobs_own_with_its_training_pod_as_the_pod_set() -> None:
    body_job = job_body(workers=2, gpusPerWorker=4, checkpointing=True)
    spec = parse_spec(body_job["spec"])
    pod = training_pod(body_job, spec, attempt=1, worker=0, gpu_types=("A100-SXM4-40GB",),
                       remaining={"A100-SXM4-40GB": {"p50": 600.0, "p90": 900.0}}, completed_steps=0)
    wl = admission.workload_body(body_job, queue=QUEUE, workers=2, pod=pod)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1" and wl["kind"] == "Workload"
    assert wl["metadata"]["name"] == admission.workload_name(body_job) == "trainingjob-train-1-uid12"
    (owner,) = wl["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob", "name": "train-1",
                     "uid": "uid-123", "controller": True, "blockOwnerDeletion": True}
    assert wl["spec"]["queueName"] == QUEUE
    (pod_set,) = wl["spec"]["podSets"]
    assert pod_set["name"] == "workers" and pod_set["count"] == 2 and "minCount" not in pod_set  # all or none
    template = pod_set["template"]
    # what offpeak's admission check judges: offline work, with its prediction and its gang
    assert template["metadata"]["labels"]["offpeak.io/offline"] == "true"
    assert "offpeak.io/predicted-job-seconds" in template["metadata"]["annotations"]
    assert template["metadata"]["annotations"]["offpeak.io/gang-size"] == "2"
    assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"  # Kueue's quota
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                  "template": template}, "1.32", strict=True)
    again = job_body(workers=2)
    again["metadata"]["uid"] = "uid-999"  # the same name again, after the first was deleted
    assert admission.workload_name(again) != admission.workload_name(body_job)


def test_finishing_marks_the_workload_finished_guarded_by_its_resource_version() -> None:
    patch = admission.finished_patch(ADMITTED, succeeded=False, message="no attempts left", now=NOW)
    assert patch["metadata"]["resourceVersion"] == "41"
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conditions["Finished"]["status"] == "True" and conditions["Finished"]["reason"] == "Failed"
    assert conditions["Admitted"]["status"] == "True"  # Kueue's own conditions stay


def test_releasing_an_evicted_workload_gives_its_quota_back_as_kueue_expects() -> None:
    preempted = workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
                         ("Evicted", "True", "Preempted"), flavors={"nvidia.com/gpu": "a100-pool"})
    patch = admission.release_patch(preempted, now=NOW)
    assert patch["status"]["admission"] is None and patch["metadata"]["resourceVersion"] == "41"
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (conditions["QuotaReserved"]["status"], conditions["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert conditions["Admitted"]["status"] == "False"
    assert (conditions["Requeued"]["status"], conditions["Requeued"]["reason"]) == ("True", "Preempted")
    assert conditions["Evicted"]["status"] == "True"  # Kueue clears it when it admits the workload again
    rejected = workload(("QuotaReserved", "True", "QuotaReserved"), ("Evicted", "True", "AdmissionCheck"),
                        flavors={"nvidia.com/gpu": "a100-pool"})
    requeued = {c["type"]: c for c in admission.release_patch(rejected, now=NOW)["status"]["conditions"]}
    assert requeued["Requeued"]["status"] == "False"  # only a preemption requeues at once; Kueue decides the rest


def test_a_queue_label_needs_an_operator_that_manages_kueue_workloads() -> None:
    labelled = job_body()
    labelled["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    assert admission.queue_name(labelled) == QUEUE and admission.queue_name(job_body()) is None
    (problem,) = admission.queue_problems(queue=QUEUE, kueue_enabled=False)
    assert "--kueue" in problem and "operator.kueue.enabled" in problem
    assert admission.queue_problems(queue=QUEUE, kueue_enabled=True) == []
    assert admission.queue_problems(queue=None, kueue_enabled=False) == []


def test_offpeaks_admission_check_judges_the_workloads_pod_set_as_the_pods_will_be_judged() -> None:
    """The extender's check (offpeak_extender.kueuecheck) takes a Workload not owned by a Job or PyTorchJob on its
    own pod set: a TrainingJob's reads as offline work with its prediction, GPU types and gang."""
    from offpeak_core.jobkinds import template_opted_in
    from offpeak_extender import kueuecheck
    from offpeak_extender.wire import parse_pod

    body_job = job_body(workers=2, gpusPerWorker=2)
    spec = parse_spec(body_job["spec"])
    pod = training_pod(body_job, spec, attempt=1, worker=0, gpu_types=("A100-SXM4-40GB", "T4"),
                       remaining={"A100-SXM4-40GB": {"p50": 600.0, "p90": 900.0},
                                  "T4": {"p50": 1800.0, "p90": 2700.0}}, completed_steps=0)
    wl = admission.workload_body(body_job, queue=QUEUE, workers=2, pod=pod)
    wl["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                    "admissionChecks": [{"name": "offpeak-window", "state": "Pending"}]}
    (pending,) = kueuecheck.pending_checks(wl, ["offpeak-window"])
    assert pending.owner_job is None and pending.owner_pytorch_job is None
    (pod_set,) = pending.pod_sets
    template = pod_set["template"]
    assert template_opted_in(template) and pod_set["count"] == 2
    request, managed, error = parse_pod(kueuecheck.pod_of(template, "ns"))
    assert managed and not error and request.gpus == 2
    assert request.predicted["A100-SXM4-40GB"].p90 == 900.0
    assert kueuecheck.allowed_gpu_types(template) == frozenset({"A100-SXM4-40GB", "T4"})
