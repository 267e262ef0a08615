"""Kueue's Workload API (kueue.x-k8s.io/v1beta1) as offpeak reads it. Pure; shared by the extender's admission
check (offpeak_extender.kueuecheck) and the operator's TrainingJob integration (offpeak_operator.admission)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the LocalQueue a job is queued in


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The status condition of type `kind` of a Kueue object, None when it has none."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return cast(Mapping[str, Any], c)
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c.get("status") == "True"


def assigned_flavors(workload: Mapping[str, Any]) -> tuple[str, ...]:
    """The ResourceFlavors Kueue assigned to the workload's first pod set when it reserved quota (one per resource,
    `status.admission.podSetAssignments[0].flavors`), distinct and sorted."""
    assignments = ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ()
    flavors = (assignments[0].get("flavors") or {}) if assignments else {}
    return tuple(sorted({str(f) for f in flavors.values() if f}))


def flavor_node_labels(flavors: Sequence[str], resource_flavors: Mapping[str, Mapping[str, Any]]
                       ) -> dict[str, str]:
    """The node labels the assigned flavors put on the workload's pods (Kueue adds each flavor's `spec.nodeLabels`
    to their node selector on admission)."""
    labels: dict[str, str] = {}
    for name in flavors:
        labels.update(((resource_flavors.get(name) or {}).get("spec") or {}).get("nodeLabels") or {})
    return labels


def flavor_tolerations(flavors: Sequence[str], resource_flavors: Mapping[str, Mapping[str, Any]]
                       ) -> list[dict[str, Any]]:
    """The tolerations the assigned flavors give the workload's pods (each flavor's `spec.tolerations`)."""
    out: list[dict[str, Any]] = []
    for name in flavors:
        for toleration in ((resource_flavors.get(name) or {}).get("spec") or {}).get("tolerations") or ():
            if dict(toleration) not in out:
                out.append(dict(toleration))
    return out
