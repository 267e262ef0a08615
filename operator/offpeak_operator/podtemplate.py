"""The user's pod template (`spec.template`) and the parts of a training pod the operator owns. Pure.

A TrainingJob gives its pod either as a full PodTemplateSpec (`spec.template`, as batch/v1 Job and the training
operators do) or in the short form (`image`, `command`, `env`, `resources`, ...), which `JobSpec.pod_template` turns
into the same template, so one builder makes every training pod. The operator owns a few parts of every training
pod: scheduler, restart policy, GPU requests, its labels, annotations and environment, the worker's hostname.
`template_conflicts` names each place where a template sets one of them, so a job fails with one clear message
instead of running other than written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from offpeak_operator import names
from offpeak_operator.livereports import STATUS_DIR, STATUS_ENV, STATUS_VOLUME

# torchrun's and torch.distributed's rendezvous environment, which the operator sets on every worker
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_WORLD_SIZE")
RESERVED_ENV_PREFIXES = ("OFFPEAK_", "PET_")  # offpeak's own, and torchrun's PET_* options
# short-form fields that describe the pod: with a template they belong in it (one place for each setting)
SHORTHAND_POD_FIELDS = ("command", "args", "env", "workingDir", "resources", "serviceAccountName", "nodeSelector",
                        "tolerations", "priorityClassName", "podAnnotations", "podLabels")
CHECKPOINT_VOLUME = "offpeak-checkpoint"


def train_container_index(containers: Sequence[Mapping[str, Any]]) -> int | None:
    """The training container: the one named `train`, else the only one (None: ambiguous)."""
    for i, c in enumerate(containers):
        if c.get("name") == names.TRAIN_CONTAINER:
            return i
    return 0 if len(containers) == 1 else None


def reserved_env(name: str) -> bool:
    return name in RENDEZVOUS_ENV or name in STATUS_ENV or name.startswith(RESERVED_ENV_PREFIXES)


def template_conflicts(template: Mapping[str, Any], *, spec: Mapping[str, Any],
                       checkpoint_path: str | None) -> list[str]:
    """Every place where the user's template (or the spec beside it) sets what the operator owns; empty: none."""
    out: list[str] = []
    meta = template.get("metadata") or {}
    pod = template.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(pod, Mapping):
        return ["spec.template needs metadata (optional) and spec objects, as a PodTemplateSpec"]
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, Mapping) for c in containers):
        return ["spec.template.spec.containers must list at least one container"]
    given = [f for f in SHORTHAND_POD_FIELDS if spec.get(f) not in (None, [], {}, "")]
    if given:
        out.append(f"spec.{', spec.'.join(given)} belong(s) in spec.template when a template is given")
    index = train_container_index(containers)
    if index is None:
        out.append(f"spec.template has {len(containers)} containers: name the training one "
                   f"{names.TRAIN_CONTAINER!r}")
        return out
    train = containers[index]
    image = spec.get("image")
    if image and train.get("image") and train["image"] != image:
        out.append(f"spec.image {image!r} differs from the training container's image {train['image']!r}")
    if not image and not train.get("image"):
        out.append("the training container has no image (set it in the template or in spec.image)")
    for key, allowed in (("schedulerName", names.SCHEDULER_NAME), ("restartPolicy", "Never")):
        if pod.get(key) not in (None, allowed):
            out.append(f"spec.template.spec.{key} must be {allowed!r} or unset (the operator sets it)")
    for key in ("nodeName", "hostname", "subdomain"):
        if pod.get(key):
            out.append(f"spec.template.spec.{key} must be unset (the operator places and names the workers)")
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for kind, given_keys, reserved in (("labels", labels, names.RESERVED_POD_LABELS),
                                       ("annotations", annotations, names.RESERVED_POD_ANNOTATIONS)):
        taken = sorted(set(given_keys) & reserved)
        if taken:
            out.append(f"spec.template.metadata.{kind} must not set {', '.join(taken)} (the operator writes them)")
    where = f"spec.template.spec.containers[{index}]"
    for section in ("requests", "limits"):
        if names.GPU_RESOURCE in ((train.get("resources") or {}).get(section) or {}):
            out.append(f"{where}.resources.{section} must not set {names.GPU_RESOURCE}; use spec.gpusPerWorker")
    env = sorted({e.get("name", "") for e in train.get("env") or [] if isinstance(e, Mapping)
                  and reserved_env(str(e.get("name", "")))})
    if env:
        out.append(f"{where}.env must not set {', '.join(env)} (the operator sets the rendezvous, the progress channel's "
                   "and offpeak's own variables)")
    path = train.get("terminationMessagePath")
    if path not in (None, names.TERMINATION_LOG):
        out.append(f"{where}.terminationMessagePath must be {names.TERMINATION_LOG} or unset (progress reports)")
    if any(v.get("name") == STATUS_VOLUME for v in pod.get("volumes") or [] if isinstance(v, Mapping)):
        out.append(f"spec.template.spec.volumes must not name a volume {STATUS_VOLUME!r} (the progress channel's)")
    if any(m.get("mountPath") == STATUS_DIR for m in train.get("volumeMounts") or [] if isinstance(m, Mapping)):
        out.append(f"{where}.volumeMounts mounts something else at {STATUS_DIR} (the progress channel's token "
                   "and CA)")
    if checkpoint_path is not None:
        if any(v.get("name") == CHECKPOINT_VOLUME for v in pod.get("volumes") or [] if isinstance(v, Mapping)):
            out.append(f"spec.template.spec.volumes must not name a volume {CHECKPOINT_VOLUME!r}")
        if any(m.get("mountPath") == checkpoint_path for m in train.get("volumeMounts") or []
               if isinstance(m, Mapping)):
            out.append(f"{where}.volumeMounts mounts something else at the checkpoint path {checkpoint_path}")
    return out


def merge_node_terms(user: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Required node-selector terms that hold where the user's do AND ours do (terms are ORed, expressions
    inside a term ANDed, so the product of both lists)."""
    if not user:
        return [dict(t) for t in ours]
    out: list[dict[str, Any]] = []
    for u in user:
        for o in ours:
            term: dict[str, Any] = {"matchExpressions": [*(u.get("matchExpressions") or []),
                                                         *(o.get("matchExpressions") or [])]}
            if u.get("matchFields"):
                term["matchFields"] = list(u["matchFields"])
            out.append(term)
    return out
