"""The workload kinds a team may keep and opt in to offpeak: where each keeps its pod templates, how it is suspended,
how it ends, and how its pods are labelled. Pure; shared by the operator (which predicts and admits them alike,
`offpeak_operator.workloads`) and the extender's Kueue admission check (which judges their templates).

A workload opts in by the label `offpeak.io/offline: "true"` on its (a PyTorchJob's Master's) pod template. Only
these facts differ between the kinds:

* batch/v1 Job: one template (`spec.template`), `spec.suspend`, conditions Complete / Failed, pods labelled
  `batch.kubernetes.io/job-name`; parallel pods are timed alone.
* Kubeflow PyTorchJob (kubeflow.org/v1, run by training-operator): a template per replica type
  (`spec.pytorchReplicaSpecs.{Master,Worker}.template`), `spec.runPolicy.suspend`, conditions Succeeded / Failed,
  pods labelled `training.kubeflow.org/job-name`; its replicas train one model data-parallel, so the prediction is
  for all of them together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


OPT_IN_LABEL = "offpeak.io/offline"


def template_opted_in(template: Mapping[str, Any]) -> bool:
    """Whether a pod template carries `offpeak.io/offline: "true"`."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    return str(labels.get(OPT_IN_LABEL, "")).lower() == "true"


@dataclass(frozen=True)
class JobKind:
    """One opt-in workload kind."""

    kind: str
    group: str  # "" for the core groups' batch/v1 (read through BatchV1Api)
    version: str
    plural: str
    pod_label: str  # the label its controller puts on the pods, valued with the workload's name
    replica_specs: str | None  # the spec field holding one template per replica type; None: spec.template
    done_condition: str  # the condition type that says it succeeded

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else f"batch/{self.version}"

    def templates(self, obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """Pod templates by replica type ("" for a Job's one), Master first."""
        spec = obj.get("spec") or {}
        if self.replica_specs is None:
            return {"": spec.get("template") or {}}
        replicas = spec.get(self.replica_specs) or {}
        order = sorted(replicas, key=lambda r: (r != "Master", r))
        return {r: (replicas[r] or {}).get("template") or {} for r in order}

    def primary_template(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """The template whose annotations say what the workload trains (a Job's, a PyTorchJob's Master's)."""
        return next(iter(self.templates(obj).values()), {})

    def replicas(self, obj: Mapping[str, Any]) -> int:
        """Pods that run at once: a Job's parallelism is not offpeak's to gang (1), a PyTorchJob's replicas are."""
        if self.replica_specs is None:
            return 1
        specs = (obj.get("spec") or {}).get(self.replica_specs) or {}
        return sum(int((s or {}).get("replicas", 1) or 0) for s in specs.values()) or 1

    def gang_size(self, obj: Mapping[str, Any]) -> int:
        """Pods placed all or none: a PyTorchJob's replicas (one data-parallel run waits for all of them), none of
        a Job's (1: its parallel pods are independent)."""
        return 1 if self.replica_specs is None else self.replicas(obj)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        spec = obj.get("spec") or {}
        if self.replica_specs is None:
            return bool(spec.get("suspend"))
        return bool((spec.get("runPolicy") or {}).get("suspend"))

    def unsuspend_patch(self) -> dict[str, Any]:
        if self.replica_specs is None:
            return {"spec": {"suspend": False}}
        return {"spec": {"runPolicy": {"suspend": False}}}

    def templates_patch(self, per_template: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """A merge patch that applies each template's patch (keyed as `templates` keys them) to that template only:
        a replica type the workload does not have is never created."""
        if self.replica_specs is None:
            return {"spec": {"template": dict(per_template[""])}}
        return {"spec": {self.replica_specs: {r: {"template": dict(p)} for r, p in per_template.items()}}}


BATCH_JOB = JobKind("Job", "", "v1", "jobs", "batch.kubernetes.io/job-name", None, "Complete")
PYTORCH_JOB = JobKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "training.kubeflow.org/job-name",
                      "pytorchReplicaSpecs", "Succeeded")
