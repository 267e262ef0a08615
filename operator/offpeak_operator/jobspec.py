"""The TrainingJob spec as typed data, with the checks the OpenAPI schema cannot express.

`parse_spec` turns the raw custom-resource spec into a `JobSpec` (applying the CRD's defaults, so a spec that
skipped the API server's defaulting still works); `validate` returns every problem at once so the user fixes
them in one go. Both are pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from offpeak_graph.hf_presets import preset, preset_names
from offpeak_graph.schema import PRECISIONS

from offpeak_operator import names, podtemplate

SourceKind = Literal["entrypoint", "graphConfigMap", "torchvision", "hfConfig", "hfConfigMap", "none"]
SOURCE_KINDS: tuple[str, ...] = ("entrypoint", "graphConfigMap", "torchvision", "hfConfig", "hfConfigMap")
HF_CONFIG_KEY = "config.json"  # default key of modelSource.hfConfigMap
DEFAULT_CHECKPOINT_PATH = "/checkpoints"
OPTIMIZERS = ("sgd", "adam", "adamw")
_ENTRYPOINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# A resolver maps a user's GPU name to the catalogue's canonical name, raising LookupError/ValueError if unknown.
GpuResolver = Callable[[str], str]


class SpecError(ValueError):
    """The spec cannot even be parsed (wrong types); the message names the field."""


@dataclass(frozen=True, slots=True)
class ModelSource:
    kind: SourceKind
    value: str = ""  # entrypoint, ConfigMap name, torchvision or HF preset name
    key: str = names.GRAPH_KEY  # ConfigMap key for graphConfigMap / hfConfigMap
    config_json: str = ""  # hfConfigMap: the config text the operator read from the ConfigMap (never a path)

    @property
    def in_process(self) -> bool:
        """A source offpeak's extractor builds without the user's code (torchvision/HF): in the operator's own
        process, or in an analysis pod running the extract image (`statemachine.analysed_in_pod`)."""
        return self.kind in ("torchvision", "hfConfig", "hfConfigMap")


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    """Where a job's checkpoints live (a claim every attempt mounts) and how often the training code writes one."""

    path: str = DEFAULT_CHECKPOINT_PATH
    interval_seconds: float = 600.0  # how much work an eviction may lose, at most
    grace_period_seconds: int = 60  # SIGTERM -> SIGKILL on eviction: time to write the last checkpoint
    claim_name: str = ""  # an existing PersistentVolumeClaim of the job's namespace
    claim_template: dict[str, Any] | None = None  # or a claim the operator makes once per job: {metadata?, spec}

    def claim(self, job_name: str) -> str:
        return self.claim_name or names.checkpoint_claim_name(job_name)


@dataclass(frozen=True, slots=True)
class JobSpec:
    image: str
    batch_size: int
    gpu_types: tuple[str, ...]
    model_source: ModelSource = ModelSource("none")
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[dict[str, Any], ...] = ()
    working_dir: str = ""
    image_pull_policy: str = "IfNotPresent"
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    service_account: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class: str = ""
    seq_len: int | None = None
    input_shape: tuple[int, ...] = ()
    precision: str = "fp32"
    optimizer: str = "adam"
    steps: int | None = None
    epochs: int | None = None
    dataset_size: int | None = None
    workers: int = 1
    gpus_per_worker: int = 1
    min_workers: int | None = None  # elastic: the job may run on min_workers..workers workers (None: all of them)
    estimated_seconds: float | None = None
    startup_seconds: float | None = None  # None: the predictor's default start-up
    preemptible: bool = True
    checkpointing: bool = False
    max_attempts: int = 3
    pod_annotations: dict[str, str] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    template: dict[str, Any] | None = None  # spec.template as the user wrote it (None: the short form)
    template_conflicts: tuple[str, ...] = ()  # where the template sets what the operator owns
    image_pull_secrets: tuple[dict[str, Any], ...] = ()  # from the template: the analysis pod pulls the image too
    checkpoint: CheckpointSpec | None = None
    suspend: bool = False  # no training pod runs while true (a running attempt is stopped, not counted)

    def pod_template(self) -> dict[str, Any]:
        """The user's PodTemplateSpec: spec.template, or the one the short form means (one container `train`)."""
        if self.template is not None:
            return self.template
        container: dict[str, Any] = {"name": names.TRAIN_CONTAINER, "image": self.image,
                                     "imagePullPolicy": self.image_pull_policy}
        for key, value in (("command", list(self.command)), ("args", list(self.args)),
                           ("workingDir", self.working_dir)):
            if value:
                container[key] = value
        container["env"] = [dict(e) for e in self.env]
        container["resources"] = {k: dict(v) for k, v in self.resources.items()}
        pod: dict[str, Any] = {"containers": [container]}
        for key, pod_value in (("nodeSelector", dict(self.node_selector)),
                               ("tolerations", [dict(t) for t in self.tolerations]),
                               ("serviceAccountName", self.service_account),
                               ("priorityClassName", self.priority_class)):
            if pod_value:
                pod[key] = pod_value
        return {"metadata": {"labels": dict(self.pod_labels), "annotations": dict(self.pod_annotations)},
                "spec": pod}

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole job: `steps`, or epochs * ceil(datasetSize / global batch)."""
        if self.steps is not None:
            return self.steps
        if self.epochs is None or self.dataset_size is None:
            return 0
        return self.epochs * math.ceil(self.dataset_size / (self.batch_size * self.workers))

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def elastic(self) -> bool:
        """Whether an attempt may run on fewer workers than `workers` (`minWorkers` below it)."""
        return self.min_workers is not None and self.min_workers < self.workers


def _int(raw: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"spec.{key} must be an integer, got {value!r}")
    return value


def _str(raw: Mapping[str, Any], key: str, default: str = "") -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise SpecError(f"spec.{key} must be a string, got {value!r}")
    return value


def _bool(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"spec.{key} must be true or false, got {value!r}")
    return value


def _str_list(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"spec.{key} must be a list of strings")
    return tuple(value)


def _int_list(raw: Mapping[str, Any], key: str) -> tuple[int, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise SpecError(f"spec.{key} must be a list of positive integers, e.g. [3, 224, 224]")
    return tuple(value)


def _str_map(raw: Mapping[str, Any], key: str) -> dict[str, str]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise SpecError(f"spec.{key} must be a map of strings")
    return dict(value)


def _model_source(raw: Any) -> ModelSource:
    if raw is None or raw == {}:
        return ModelSource("none")
    if not isinstance(raw, Mapping):
        raise SpecError("spec.modelSource must be an object")
    given = [k for k in SOURCE_KINDS if raw.get(k) is not None]
    unknown = sorted(set(raw) - set(SOURCE_KINDS))
    if unknown:
        raise SpecError(f"spec.modelSource has unknown field(s) {', '.join(unknown)}; "
                        f"use one of {', '.join(SOURCE_KINDS)}")
    if len(given) > 1:
        raise SpecError(f"spec.modelSource must name one source, got {', '.join(given)}")
    kind = given[0]
    if kind in ("graphConfigMap", "hfConfigMap"):
        ref = raw[kind]
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
            raise SpecError(f"spec.modelSource.{kind} needs a name")
        default_key = names.GRAPH_KEY if kind == "graphConfigMap" else HF_CONFIG_KEY
        return ModelSource(kind, ref["name"], str(ref.get("key") or default_key))  # type: ignore[arg-type]
    value = raw[kind]
    if not isinstance(value, str) or not value:
        raise SpecError(f"spec.modelSource.{kind} must be a non-empty string")
    return ModelSource(kind, value)  # type: ignore[arg-type]


def _checkpoint(raw: Any) -> CheckpointSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SpecError("spec.checkpoint must be an object")
    path = raw.get("path", DEFAULT_CHECKPOINT_PATH)
    interval = raw.get("intervalSeconds", 600)
    grace = raw.get("gracePeriodSeconds", 60)
    claim, template = raw.get("claimName") or "", raw.get("claimTemplate")
    if not isinstance(path, str) or not path.startswith("/"):
        raise SpecError(f"spec.checkpoint.path must be an absolute path, got {path!r}")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval) \
            or interval <= 0:
        raise SpecError(f"spec.checkpoint.intervalSeconds must be a number > 0, got {interval!r}")
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 1:
        raise SpecError(f"spec.checkpoint.gracePeriodSeconds must be an integer >= 1, got {grace!r}")
    if not isinstance(claim, str) or (template is not None and not isinstance(template, Mapping)):
        raise SpecError("spec.checkpoint.claimName must be a name and claimTemplate a {metadata, spec} object")
    if bool(claim) == (template is not None):
        raise SpecError("spec.checkpoint needs exactly one of claimName (an existing PersistentVolumeClaim) or "
                        "claimTemplate (a claim the operator creates for the job)")
    if template is not None and not isinstance(template.get("spec"), Mapping):
        raise SpecError("spec.checkpoint.claimTemplate.spec must be a PersistentVolumeClaim spec")
    return CheckpointSpec(path=path, interval_seconds=float(interval), grace_period_seconds=grace, claim_name=claim,
                          claim_template=dict(template) if template is not None else None)


def _template_parts(raw: Mapping[str, Any], checkpoint: CheckpointSpec | None) -> dict[str, Any]:
    """JobSpec fields a template decides: the image, env and working directory the analysis pod runs the
    extractor with (the training container's), its pull secrets, and the template's conflicts."""
    template = raw.get("template")
    if template is None:
        return {}
    if not isinstance(template, Mapping):
        raise SpecError("spec.template must be a PodTemplateSpec object")
    conflicts = podtemplate.template_conflicts(template, spec=raw,
                                               checkpoint_path=checkpoint.path if checkpoint else None)
    out: dict[str, Any] = {"template": dict(template), "template_conflicts": tuple(conflicts)}
    raw_pod = template.get("spec")
    pod: Mapping[str, Any] = raw_pod if isinstance(raw_pod, Mapping) else {}
    raw_containers = pod.get("containers")
    containers: list[Any] = raw_containers if isinstance(raw_containers, list) else []
    index = podtemplate.train_container_index(containers) if containers else None
    if index is not None and isinstance(containers[index], Mapping):
        train = containers[index]
        out["image"] = str(raw.get("image") or train.get("image") or "")
        out["env"] = tuple(dict(e) for e in train.get("env") or [] if isinstance(e, Mapping) and e.get("name"))
        out["working_dir"] = str(train.get("workingDir") or "")
        if train.get("imagePullPolicy"):
            out["image_pull_policy"] = str(train["imagePullPolicy"])
    secrets = pod.get("imagePullSecrets") or []
    out["image_pull_secrets"] = tuple(dict(s) for s in secrets if isinstance(s, Mapping))
    return out


def parse_spec(raw: Mapping[str, Any]) -> JobSpec:
    """Build a JobSpec from the custom resource's `spec`, applying the CRD defaults."""
    if not isinstance(raw, Mapping):
        raise SpecError("spec must be an object")
    gpu_types = _str_list(raw, "gpuTypes")
    resources = raw.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise SpecError("spec.resources must be an object with requests/limits")
    env = raw.get("env") or []
    tolerations = raw.get("tolerations") or []
    if not isinstance(env, list) or not all(isinstance(e, Mapping) and e.get("name") for e in env):
        raise SpecError("spec.env must be a list of {name, value} objects")
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise SpecError("spec.tolerations must be a list of Toleration objects")
    estimate = raw.get("estimatedSeconds")
    if estimate is not None and (isinstance(estimate, bool) or not isinstance(estimate, int | float)):
        raise SpecError(f"spec.estimatedSeconds must be a number, got {estimate!r}")
    startup = raw.get("startupSeconds")
    if startup is not None and (isinstance(startup, bool) or not isinstance(startup, int | float)
                                or not math.isfinite(startup) or startup < 0):  # fmt: skip
        raise SpecError(f"spec.startupSeconds must be a number >= 0, got {startup!r}")
    checkpoint = _checkpoint(raw.get("checkpoint"))
    spec = JobSpec(
        image=_str(raw, "image"),
        batch_size=_int(raw, "batchSize", 0) or 0,
        gpu_types=gpu_types,
        model_source=_model_source(raw.get("modelSource")),
        command=_str_list(raw, "command"),
        args=_str_list(raw, "args"),
        env=tuple(dict(e) for e in env),
        working_dir=_str(raw, "workingDir"),
        image_pull_policy=_str(raw, "imagePullPolicy", "IfNotPresent"),
        resources={k: dict(v or {}) for k, v in resources.items()},
        service_account=_str(raw, "serviceAccountName"),
        node_selector=_str_map(raw, "nodeSelector"),
        tolerations=tuple(dict(t) for t in tolerations),
        priority_class=_str(raw, "priorityClassName"),
        seq_len=_int(raw, "seqLen"),
        input_shape=_int_list(raw, "inputShape"),
        precision=_str(raw, "precision", "fp32"),
        optimizer=_str(raw, "optimizer", "adam"),
        steps=_int(raw, "steps"),
        epochs=_int(raw, "epochs"),
        dataset_size=_int(raw, "datasetSize"),
        workers=_int(raw, "workers", 1) or 1,
        gpus_per_worker=_int(raw, "gpusPerWorker", 1) or 1,
        min_workers=_int(raw, "minWorkers"),
        estimated_seconds=float(estimate) if estimate is not None else None,
        startup_seconds=float(startup) if startup is not None else None,
        preemptible=_bool(raw, "preemptible", True),
        checkpointing=_bool(raw, "checkpointing", False) or checkpoint is not None,
        max_attempts=_int(raw, "maxAttempts", 3) or 3,
        pod_annotations=_str_map(raw, "podAnnotations"),
        pod_labels=_str_map(raw, "podLabels"),
        checkpoint=checkpoint,
        suspend=_bool(raw, "suspend", False),
    )
    parts = _template_parts(raw, checkpoint)
    return replace(spec, **parts) if parts else spec


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason the job cannot run; `reason` is a CamelCase condition/Event reason."""

    reason: str
    message: str


def validate(spec: JobSpec, *, job_name: str, resolve_gpu: GpuResolver | None) -> list[Problem]:
    """Every problem with the spec that the schema cannot catch (empty list: the job may run)."""
    problems: list[Problem] = []
    if len(job_name) > names.MAX_JOB_NAME:
        problems.append(Problem("NameTooLong", f"TrainingJob name must be at most {names.MAX_JOB_NAME} characters "
                                               f"(pod names and label values derive from it), got {len(job_name)}"))
    if spec.template_conflicts:
        problems.append(Problem("TemplateConflict", "; ".join(spec.template_conflicts)))
    elif not spec.image.strip():
        problems.append(Problem("InvalidSpec", "spec.image is required (or spec.template with the training "
                                               "container's image)"))
    if spec.workers > 1 and not re.match(r"^[a-z]", job_name):
        problems.append(Problem("InvalidSpec", "a multi-worker TrainingJob's name must start with a letter (it "
                                               "names the workers' rendezvous Service)"))
    if spec.batch_size < 1:
        problems.append(Problem("InvalidSpec", "spec.batchSize must be at least 1"))
    if spec.steps is not None and (spec.epochs is not None or spec.dataset_size is not None):
        problems.append(Problem("InvalidSpec", "give either spec.steps or spec.epochs with spec.datasetSize, not both"))
    elif spec.steps is None and (spec.epochs is None or spec.dataset_size is None):
        problems.append(Problem("InvalidSpec",
                                "give the amount of work: spec.steps, or spec.epochs with spec.datasetSize"))
    elif spec.total_steps < 1:
        problems.append(Problem("InvalidSpec", "the amount of work must be at least one step"))
    for field_name, value, lo in (("workers", spec.workers, 1), ("gpusPerWorker", spec.gpus_per_worker, 1),
                                  ("maxAttempts", spec.max_attempts, 1)):
        if value < lo:
            problems.append(Problem("InvalidSpec", f"spec.{field_name} must be at least {lo}"))
    problems += _elastic_problems(spec)
    if spec.precision not in PRECISIONS:
        problems.append(Problem("InvalidSpec", f"spec.precision must be one of {', '.join(PRECISIONS)}"))
    if spec.optimizer not in OPTIMIZERS:
        problems.append(Problem("InvalidSpec", f"spec.optimizer must be one of {', '.join(OPTIMIZERS)}"))
    if spec.model_source.kind == "entrypoint" and not _ENTRYPOINT.match(spec.model_source.value):
        problems.append(Problem("InvalidModelSource",
                                f"spec.modelSource.entrypoint must look like 'package.module:function', "
                                f"got {spec.model_source.value!r}"))
    if spec.model_source.kind == "entrypoint" and not spec.input_shape and spec.seq_len is None:
        problems.append(Problem("InvalidModelSource", "an entrypoint model needs spec.inputShape (float input, "
                                                      "e.g. [3, 224, 224]) or spec.seqLen (token ids)"))
    problems += _source_problems(spec.model_source)
    for section in ("requests", "limits"):
        if names.GPU_RESOURCE in spec.resources.get(section, {}):
            problems.append(Problem("InvalidSpec", f"spec.resources.{section} must not set {names.GPU_RESOURCE}; "
                                                   "use spec.gpusPerWorker"))
    reserved = sorted(set(spec.pod_annotations) & names.RESERVED_POD_ANNOTATIONS)
    if reserved:
        problems.append(Problem("InvalidSpec", f"spec.podAnnotations must not set {', '.join(reserved)} "
                                               "(the operator writes them)"))
    reserved = sorted(set(spec.pod_labels) & names.RESERVED_POD_LABELS)
    if reserved:
        problems.append(Problem("InvalidSpec", f"spec.podLabels must not set {', '.join(reserved)}"))
    problems.extend(_gpu_problems(spec.gpu_types, resolve_gpu))
    return problems


def _elastic_problems(spec: JobSpec) -> list[Problem]:
    """minWorkers is a width the job can run at, and the job can change width: workers restart from a checkpoint
    whenever the width changes, so without one a join would throw the attempt's work away."""
    if spec.min_workers is None:
        return []
    if not 1 <= spec.min_workers <= spec.workers:
        return [Problem("InvalidSpec", f"spec.minWorkers must be between 1 and spec.workers ({spec.workers}), "
                                       f"got {spec.min_workers}")]
    if spec.elastic and not spec.checkpointing:
        return [Problem("InvalidSpec", "spec.minWorkers below spec.workers needs checkpointing (spec.checkpoint or "
                                       "spec.checkpointing: true): the workers restart from a checkpoint whenever "
                                       "the width changes")]
    return []


def _source_problems(source: ModelSource) -> list[Problem]:
    """ConfigMap names that are names; an hfConfig that is a built-in preset (a path is never read)."""
    if source.kind in ("graphConfigMap", "hfConfigMap") and not _DNS_LABEL.match(source.value):
        return [Problem("InvalidModelSource", f"spec.modelSource.{source.kind}.name {source.value!r} is not a valid "
                                              "name")]  # fmt: skip
    if source.kind == "hfConfig" and preset(source.value) is None:
        return [Problem("InvalidModelSource",
                        "spec.modelSource.hfConfig must name a built-in config "
                        f"({', '.join(preset_names())}); for your own config.json use modelSource.hfConfigMap "
                        "(a ConfigMap in the job's namespace): the operator never reads paths")]
    return []


def _gpu_problems(gpu_types: tuple[str, ...], resolve_gpu: GpuResolver | None) -> list[Problem]:
    if not gpu_types:
        return [Problem("InvalidSpec", "spec.gpuTypes must list at least one allowed GPU type")]
    if resolve_gpu is None:
        return []
    unknown: list[str] = []
    for name in gpu_types:
        try:
            resolve_gpu(name)
        except (LookupError, ValueError):
            unknown.append(name)
    if unknown:
        return [Problem("UnknownGPUType", f"unknown GPU type(s) in spec.gpuTypes: {', '.join(unknown)} "
                                          "(see `offpeak predict --help` for the GPU catalogue)")]
    return []


def canonical_gpu_types(gpu_types: tuple[str, ...], resolve_gpu: GpuResolver | None) -> tuple[str, ...]:
    """Canonical catalogue names (as on node labels), in the user's order, without duplicates."""
    out: list[str] = []
    for name in gpu_types:
        canon = name
        if resolve_gpu is not None:
            try:
                canon = resolve_gpu(name)
            except (LookupError, ValueError):
                canon = name
        if canon not in out:
            out.append(canon)
    return tuple(out)
