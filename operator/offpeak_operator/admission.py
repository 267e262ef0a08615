"""Who may start a TrainingJob's training pods besides the idle-window scheduler: its own `spec.suspend`, and Kueue's
quotas for a job queued with the `kueue.x-k8s.io/queue-name` label. Pure.

The operator integrates TrainingJob with Kueue the way Kueue expects an external framework to (Kueue's
`integrations.externalFrameworks`: "TrainingJob.v1alpha1.offpeak.io"): it creates a Workload for the job, owned by
it, with one pod set of the job's workers; it starts training pods only while Kueue has admitted that Workload
(quota reserved and every admission check Ready, offpeak's window check included), on the nodes of the
ResourceFlavors Kueue assigned; when Kueue evicts the Workload (preemption, a rejected check) it stops the pods and,
once they are gone, gives the quota back so the Workload queues again; and when the job ends it marks the
Workload Finished, which releases the quota. These are the duties of Kueue's jobframework reconciler
(kueue.x-k8s.io/v1beta1 in Kueue v0.10), done here without it. The reconciler carries out what this module
decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from offpeak_core.jobkinds import OPT_IN_LABEL
from offpeak_core.kueue import GROUP, QUEUE_LABEL, VERSION, assigned_flavors, condition, condition_true
from offpeak_core.kueue import flavor_node_labels, flavor_tolerations

from offpeak_operator import names
from offpeak_operator.conditions import rfc3339

POD_SET = "workers"
# Why a TrainingJob's pods may not start, or must stop (status.reason, the Suspended condition's reason, and the
# eviction reason the operator writes on pods it stops).
SUSPENDED = "Suspended"  # spec.suspend is true
QUEUED = "QueuedInKueue"  # its Workload waits for Kueue's admission
EVICTED_BY_KUEUE = "EvictedByKueue"  # Kueue took the admission back (preemption, a rejected check, ...)
GATE_REASONS = frozenset({SUSPENDED, QUEUED, EVICTED_BY_KUEUE})
PREEMPTED = "Preempted"  # Kueue's eviction reason after which the workload is requeued at once


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """What the operator needs to know about the Kueue Workload of one TrainingJob."""

    name: str
    exists: bool = True
    quota_reserved: bool = False
    admitted: bool = False  # quota reserved and every admission check Ready
    evicted: bool = False
    evicted_reason: str = ""
    evicted_message: str = ""
    finished: bool = False
    cluster_queue: str = ""
    flavors: tuple[str, ...] = ()  # the ResourceFlavors of its pod set's admission
    # where Kueue's admission puts the pods: the assigned flavors' node labels and tolerations
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """What an admission adds to the training pods (nothing without Kueue)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Gate:
    """Why a job's training pods may not start now, and what to do about it."""

    reason: str  # SUSPENDED | QUEUED | EVICTED_BY_KUEUE
    message: str
    create_workload: bool = False
    release_quota: bool = False  # an evicted Workload whose pods are gone: give its quota back (it queues again)


def workload_view(workload: Mapping[str, Any] | None, *, name: str,
                  resource_flavors: Mapping[str, Mapping[str, Any]] | None = None) -> WorkloadView:
    """A Workload object (None: not there) as the state machine sees it; `resource_flavors` by name, those of its
    admission, for the node labels and tolerations its pods get."""
    if workload is None:
        return WorkloadView(name=name, exists=False)
    evicted = condition(workload, "Evicted") or {}
    flavors = assigned_flavors(workload)
    known = resource_flavors or {}
    admission = (workload.get("status") or {}).get("admission") or {}
    return WorkloadView(
        name=name, quota_reserved=condition_true(workload, "QuotaReserved"),
        admitted=condition_true(workload, "Admitted"), evicted=evicted.get("status") == "True",
        evicted_reason=str(evicted.get("reason") or ""), evicted_message=str(evicted.get("message") or ""),
        finished=condition_true(workload, "Finished"), cluster_queue=str(admission.get("clusterQueue") or ""),
        flavors=flavors, node_selector=flavor_node_labels(flavors, known),
        tolerations=tuple(flavor_tolerations(flavors, known)))


def queue_name(job: Mapping[str, Any]) -> str | None:
    """The LocalQueue a TrainingJob is queued in (its `kueue.x-k8s.io/queue-name` label), None when it is not."""
    value = ((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    return str(value) if value else None


def launch_gate(*, suspend: bool, queue: str | None, workload: WorkloadView | None) -> Gate | None:
    """Why the next attempt's pods may not be created now (None: they may)."""
    if queue is not None and workload is not None and workload.evicted and workload.quota_reserved:
        return Gate(EVICTED_BY_KUEUE, f"Kueue evicted workload {workload.name} ({workload.evicted_reason}: "
                                      f"{workload.evicted_message}); its quota goes back and it queues again",
                    release_quota=True)
    if suspend:
        return Gate(SUSPENDED, "suspended (spec.suspend: true): no training pod runs until it is false")
    if queue is None:
        return None
    if workload is None or not workload.exists:
        return Gate(QUEUED, f"queued in Kueue's LocalQueue {queue}: creating its Workload", create_workload=True)
    if workload.admitted:
        return None
    if workload.quota_reserved:
        return Gate(QUEUED, f"Kueue reserved quota in ClusterQueue {workload.cluster_queue} for workload "
                            f"{workload.name}; waiting for its admission checks")
    return Gate(QUEUED, f"queued in Kueue's LocalQueue {queue} (workload {workload.name}): waiting for quota")


def stop_reason(*, suspend: bool, queue: str | None, workload: WorkloadView | None) -> str | None:
    """Why the running attempt's pods must stop now (None: they go on): the job was suspended, or Kueue no longer
    admits its Workload."""
    if suspend:
        return SUSPENDED
    if queue is not None and workload is not None and (workload.evicted or not workload.admitted):
        return EVICTED_BY_KUEUE
    return None


def placement(workload: WorkloadView | None) -> Placement:
    """What the admission adds to the training pods: the assigned flavors' node labels and tolerations."""
    if workload is None or not workload.admitted:
        return Placement()
    return Placement(node_selector=dict(workload.node_selector), tolerations=workload.tolerations)


def needs_finish(*, queue: str | None, workload: WorkloadView | None) -> bool:
    """Whether an ended job's Workload still holds Kueue's quota (it is released once marked Finished)."""
    return queue is not None and workload is not None and workload.exists and not workload.finished


def workload_name(job: Mapping[str, Any]) -> str:
    """`trainingjob-<name>-<uid prefix>`: one Workload per incarnation of a job name (an old one being garbage
    collected never collides with the new one's)."""
    meta = job["metadata"]
    return f"{names.KIND.lower()}-{meta['name']}-{str(meta['uid']).replace('-', '')[:5]}"


def workload_body(job: Mapping[str, Any], *, queue: str, workers: int, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload of a queued TrainingJob: owned by it (its controller), one pod set of its workers whose
    template is a training pod's, the prediction included, and labelled offline work, so offpeak's own admission
    check (offpeak_extender.kueuecheck) judges it against the forecast windows. No `minCount`: Kueue admits all
    the workers or none (an elastic job's narrower start is offpeak's, within the quota of all of them)."""
    meta = job["metadata"]
    pod_meta = pod.get("metadata") or {}
    template = {"metadata": {"labels": {**(pod_meta.get("labels") or {}), OPT_IN_LABEL: "true"},
                             "annotations": dict(pod_meta.get("annotations") or {})},
                "spec": pod["spec"]}
    pod_set: dict[str, Any] = {"name": POD_SET, "count": workers, "template": template}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
        "metadata": {"name": workload_name(job), "namespace": meta["namespace"],
                     "labels": {names.LABEL_JOB: meta["name"]},
                     "ownerReferences": [{"apiVersion": names.API_VERSION, "kind": names.KIND, "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"queueName": queue, "podSets": [pod_set]},
    }


def _conditions_with(workload: Mapping[str, Any], update: Mapping[str, Any]) -> list[dict[str, Any]]:
    others = [dict(c) for c in (workload.get("status") or {}).get("conditions") or ()
              if c.get("type") != update["type"]]
    return [*others, dict(update)]


def finished_patch(workload: Mapping[str, Any], *, succeeded: bool, message: str, now: datetime) -> dict[str, Any]:
    """Status merge patch that marks the Workload Finished (Kueue then releases its quota), guarded by its
    resourceVersion so a concurrent change by Kueue is not overwritten."""
    finished = {"type": "Finished", "status": "True", "reason": "Succeeded" if succeeded else "Failed",
                "message": message[:32768], "lastTransitionTime": rfc3339(now),
                "observedGeneration": (workload.get("metadata") or {}).get("generation", 0)}
    return {"metadata": {"resourceVersion": (workload.get("metadata") or {}).get("resourceVersion")},
            "status": {"conditions": _conditions_with(workload, finished)}}


def release_patch(workload: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """Status merge patch that gives an evicted Workload's quota back once its pods are gone, as Kueue's own job
    reconciler does: QuotaReserved False (reason Pending), no admission, Admitted False, and Requeued (True only
    after a preemption: Kueue requeues it at once; otherwise Kueue's own backoff decides)."""
    generation = (workload.get("metadata") or {}).get("generation", 0)
    evicted = condition(workload, "Evicted") or {}
    reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "evicted")
    conditions: list[dict[str, Any]] = [dict(c) for c in (workload.get("status") or {}).get("conditions") or ()]
    for update in (
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message},
        {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "The workload has no reservation"},
        {"type": "Requeued", "status": "True" if reason == PREEMPTED else "False", "reason": reason,
         "message": message},
    ):
        current = next((c for c in conditions if c.get("type") == update["type"]), {})
        since = current.get("lastTransitionTime") if current.get("status") == update["status"] else None
        entry = {**update, "observedGeneration": generation, "lastTransitionTime": since or rfc3339(now)}
        conditions = [*(c for c in conditions if c.get("type") != update["type"]), entry]
    return {"metadata": {"resourceVersion": (workload.get("metadata") or {}).get("resourceVersion")},
            "status": {"admission": None, "conditions": conditions}}


def queue_problems(*, queue: str | None, kueue_enabled: bool) -> list[str]:
    """What is wrong with a job's queue label, before anything is made for it."""
    if queue is not None and not kueue_enabled:
        return [f"the job is queued in Kueue ({QUEUE_LABEL}: {queue}) but this operator does not manage Kueue "
                "workloads: run it with --kueue (chart: operator.kueue.enabled) or drop the label"]
    return []
