"""Kueue admission check "a forecast idle window fits": what a Workload asks and what offpeak answers. Pure.

A ClusterQueue that lists an AdmissionCheck whose `spec.controllerName` is offpeak's (`offpeak.io/window-fit`)
admits a workload only once its check is `Ready`. offpeak marks it Ready when the extender's filter, judging the
workload's pod template as it would judge the pod, passes enough nodes now for all of the workload's pods; until
then the check stays `Pending` with the reason in its message (what `kubectl get workload` shows). Kueue's
documented lifecycle (kueue.x-k8s.io/v1beta1): Kueue adds the check as Pending once quota is reserved, the check's
controller sets its state, and Kueue admits the workload (and unsuspends its Job) when every check is Ready.

The pod template comes from the owning batch/v1 Job when there is one: offpeak's operator writes the prediction
into the Job's template, and Kueue does not copy annotation changes into a Workload it already made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from offpeak_core.gpuproducts import GPU_TYPE_LABEL
from offpeak_core.jobkinds import PYTORCH_JOB
from offpeak_core.kueue import GROUP, VERSION, assigned_flavors, condition
from offpeak_core.model import FilterResult, NodeView, PodRequest

CONTROLLER_NAME = "offpeak.io/window-fit"
FIELD_MANAGER = "offpeak-window-fit"
JOB_STATE_ANNOTATION = "offpeak.io/state"  # what offpeak's operator decided about an opted-in Job
PENDING, READY = "Pending", "Ready"
MAX_REASONS = 3  # distinct reasons quoted in a Pending message, and nodes named for each


@dataclass(frozen=True)
class Verdict:
    """The state offpeak gives its check on one workload, and why (in the user's words)."""

    state: str
    message: str


@dataclass(frozen=True)
class PendingCheck:
    """One of offpeak's checks, Pending on a workload whose quota Kueue has reserved."""

    namespace: str
    workload: str
    check: str
    message: str  # what the check says now (unchanged verdicts are not written again)
    since: str  # its lastTransitionTime: kept while it stays Pending
    owner_job: str | None  # the batch/v1 Job the workload was made for, if any
    pod_sets: tuple[Mapping[str, Any], ...]
    owner_pytorch_job: str | None = None  # or the Kubeflow PyTorchJob
    flavors: tuple[str, ...] = ()  # the ResourceFlavors Kueue assigned to its (first) pod set


def our_checks(admission_checks: Iterable[Mapping[str, Any]], controller_name: str = CONTROLLER_NAME) -> list[str]:
    """Names of the AdmissionChecks that name offpeak's controller."""
    return [str(ac["metadata"]["name"]) for ac in admission_checks
            if (ac.get("spec") or {}).get("controllerName") == controller_name]


def active_patch(check: Mapping[str, Any], *, now: str) -> dict[str, Any] | None:
    """Status merge patch that marks an AdmissionCheck Active (Kueue keeps ClusterQueues that use an inactive check
    from admitting anything); None when it already is."""
    current = condition(check, "Active")
    if current is not None and current.get("status") == "True":
        return None
    others = [c for c in (check.get("status") or {}).get("conditions") or () if c.get("type") != "Active"]
    active = {"type": "Active", "status": "True", "reason": "Active", "lastTransitionTime": now,
              "message": "offpeak admits workloads once a forecast idle window fits them",
              "observedGeneration": (check.get("metadata") or {}).get("generation", 0)}
    return {"status": {"conditions": [*others, active]}}


def quota_reserved(workload: Mapping[str, Any]) -> bool:
    c = condition(workload, "QuotaReserved")
    return c is not None and c.get("status") == "True"


def _owner(workload: Mapping[str, Any], kind: str, api_group: str) -> str | None:
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == kind and str(ref.get("apiVersion", "")).startswith(api_group + "/"):
            return str(ref.get("name"))
    return None


def owner_job(workload: Mapping[str, Any]) -> str | None:
    """The name of the batch/v1 Job that owns the workload, if one does."""
    return _owner(workload, "Job", "batch")


def owner_pytorch_job(workload: Mapping[str, Any]) -> str | None:
    """The name of the Kubeflow PyTorchJob that owns the workload, if one does."""
    return _owner(workload, "PyTorchJob", "kubeflow.org")


def pending_checks(workload: Mapping[str, Any], ours: Sequence[str]) -> list[PendingCheck]:
    """offpeak's checks that wait for an answer on this workload: Pending, after Kueue reserved quota (before that
    the check is not asked: Kueue re-evaluates it after reservation)."""
    if not ours or not quota_reserved(workload):
        return []
    meta = workload.get("metadata") or {}
    pod_sets = tuple((workload.get("spec") or {}).get("podSets") or ())
    return [
        PendingCheck(str(meta.get("namespace") or "default"), str(meta["name"]), str(s["name"]),
                     str(s.get("message") or ""), str(s.get("lastTransitionTime") or ""), owner_job(workload), pod_sets,
                     owner_pytorch_job(workload), assigned_flavors(workload))
        for s in (workload.get("status") or {}).get("admissionChecks") or ()
        if s.get("name") in ours and s.get("state") == PENDING
    ]


def job_pod_set(job: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Job's own pod template (with offpeak's prediction) in the shape of a Workload pod set."""
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1) or 1)
    if pod_sets:
        count = int(pod_sets[0].get("count", count) or count)
    return {"name": "main", "count": count, "template": spec.get("template") or {}}


def pytorch_job_pod_set(job: Mapping[str, Any]) -> dict[str, Any]:
    """A PyTorchJob's Master template (with offpeak's prediction; every replica's carries the same) as one pod set
    of all its replicas (their GPUs per pod as the Master's)."""
    return {"name": "main", "count": PYTORCH_JOB.replicas(job), "template": PYTORCH_JOB.primary_template(job)}


def job_problem(job: Mapping[str, Any]) -> str | None:
    """Why offpeak will not place the Job, from the state offpeak's operator wrote on it (`Invalid: ...`)."""
    state = str(((job.get("metadata") or {}).get("annotations") or {}).get(JOB_STATE_ANNOTATION, ""))
    word, _, why = state.partition(": ")
    return f"offpeak cannot predict its Job: {why or word}" if word == "Invalid" else None


def pod_of(template: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A pod object from a pod template, as the extender's wire parser reads one."""
    meta = dict(template.get("metadata") or {})
    meta.setdefault("name", "")
    meta["namespace"] = namespace
    return {"metadata": meta, "spec": template.get("spec") or {}}


def allowed_gpu_types(template: Mapping[str, Any]) -> frozenset[str] | None:
    """The GPU types the template's required node affinity names by `offpeak.io/gpu-type` (what offpeak's operator
    writes); None when it names none (every type may do)."""
    affinity = ((template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or ()
    types = {str(v) for term in terms for e in term.get("matchExpressions") or ()
             if e.get("key") == GPU_TYPE_LABEL and e.get("operator") == "In" for v in e.get("values") or ()}
    return frozenset(types) or None


def decide(*, pod: PodRequest, managed: bool, count: int, result: FilterResult, views: Sequence[NodeView],
           allowed: frozenset[str] | None, flavor_nodes: frozenset[str] | None = None,
           flavors: Sequence[str] = ()) -> Verdict:
    """Ready when the nodes the extender's filter passes now can hold all `count` pods; else Pending, saying why.
    `flavor_nodes`: the nodes the assigned ResourceFlavors allow (None: any node), where Kueue will put the pods."""
    if not managed:
        return Verdict(PENDING, "waiting for offpeak's runtime prediction (the operator writes it into the Job)")
    if flavor_nodes is not None:
        views = [v for v in views if v.name in flavor_nodes]
        if not views:
            return Verdict(PENDING, f"no GPU node known to offpeak has the node labels of its ResourceFlavor(s) "
                                    f"{', '.join(flavors)}")
    by_name = {v.name: v for v in views}
    fitting = [by_name[n] for n in result.passed
               if n in by_name and (allowed is None or by_name[n].gpu_type in allowed)]
    per_pod = max(pod.gpus, 1)
    places = sum(v.gpus_free_now // per_pod for v in fitting)
    if places >= count:
        where = ", ".join(v.name for v in fitting[:MAX_REASONS]) + (" ..." if len(fitting) > MAX_REASONS else "")
        return Verdict(READY, f"a forecast idle window fits {count} pod(s) of {pod.gpus} GPU(s) now on {where}")
    if fitting:
        return Verdict(PENDING, f"windows fit {places} of {count} pods now; waiting for room for all of them")
    nodes_by_reason: dict[str, list[str]] = {}  # nodes share reasons (one a GPU type for a window too short)
    for name, why in result.failed.items():
        if (flavor_nodes is None or name in by_name) and (
                allowed is None or by_name.get(name) is None or by_name[name].gpu_type in allowed):
            nodes_by_reason.setdefault(why, []).append(name)
    reasons = [f"{why} ({_some(names)})" for why, names in list(nodes_by_reason.items())[:MAX_REASONS]]
    if not views:
        return Verdict(PENDING, "no GPU node known to offpeak yet")
    return Verdict(PENDING, "no forecast idle window fits now: " + ("; ".join(reasons) or "no node of its GPU types"))


def _some(names: list[str]) -> str:
    """The first few of `names`, and how many more."""
    more = len(names) - MAX_REASONS
    return ", ".join(names[:MAX_REASONS]) + (f" and {more} more" if more > 0 else "")


def check_state_apply(check: PendingCheck, verdict: Verdict, *, now: str) -> dict[str, Any]:
    """Server-side apply body for one check's state on the workload's status (a list keyed by name, so Kueue's
    other checks stay as they are). The transition time moves only when the state does."""
    since = check.since if verdict.state == PENDING and check.since else now
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
        "metadata": {"name": check.workload, "namespace": check.namespace},
        "status": {"admissionChecks": [{"name": check.check, "state": verdict.state, "message": verdict.message[:32768],
                                        "lastTransitionTime": since}]},
    }
