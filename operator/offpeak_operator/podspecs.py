"""Builders for the objects the operator creates: analysis pod, training pods, graph ConfigMap. Pure dicts."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from offpeak_core.gpuproducts import GFD_PRODUCT_LABEL, gfd_products
from offpeak_operator import names, podtemplate
from offpeak_operator.admission import Placement
from offpeak_operator.graphstore import EncodedGraph
from offpeak_operator.jobspec import JobSpec
from offpeak_operator.livereports import PodParts
from offpeak_operator.settings import AnalysisSettings

GRAPH_OUT = "/graph/graph.json.gz"
BUNDLE_DIR = "/offpeak"


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": names.API_VERSION, "kind": names.KIND, "name": meta["name"], "uid": meta["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip


def _metadata(job: Mapping[str, Any], *, name: str, role: str, labels: Mapping[str, str] | None = None,
              annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "name": name,
        "namespace": meta["namespace"],
        "labels": {**(labels or {}), names.LABEL_JOB: meta["name"], names.LABEL_ROLE: role},
        "annotations": dict(annotations or {}),
        "ownerReferences": [owner_reference(job)],
    }


def extract_args(spec: JobSpec, *, out: str, hf_config_file: str = "") -> list[str]:
    """Arguments of `offpeak extract` for this job's model source and shapes (shared with in-process runs).

    HF sources are extracted from `hf_config_file`, a config the operator itself wrote (never the user's path)."""
    source = spec.model_source
    flag = {"entrypoint": "--entrypoint", "torchvision": "--torchvision", "hfConfig": "--hf-config",
            "hfConfigMap": "--hf-config"}[source.kind]  # fmt: skip
    value = hf_config_file if source.kind in ("hfConfig", "hfConfigMap") else source.value
    args = ["extract", flag, value, "--batch-size", str(spec.batch_size), "--precision", spec.precision,
            "--optimizer", spec.optimizer, "--out", out]
    if spec.input_shape:
        args[5:5] = ["--input-shape", ",".join(str(d) for d in spec.input_shape)]
    if spec.seq_len is not None:
        args[5:5] = ["--seq-len", str(spec.seq_len)]
    return args


def analysis_pod(job: Mapping[str, Any], spec: JobSpec, settings: AnalysisSettings, *,
                 metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """CPU-only pod that extracts the job's model graph and prints it to its log, for the operator to store in the
    `<job>-graph` ConfigMap.

    An entry point is extracted in the user's image: init 1 (offpeak image) copies the zipapp into an emptyDir,
    init 2 (user's image) runs the extractor from it. A torchvision/HF source is extracted by init `extract` in
    offpeak's extract image (`settings.extract_image`), an hfConfigMap's config mounted from the job's ConfigMap.
    Either way the `extract` container's exit status 2 means the model source is invalid (see the state machine),
    and the main container `emit` reduces the graph to fit a ConfigMap and prints it between markers.
    `metadata` names and owns the pod for another owner than a TrainingJob (an opted-in workload).
    """
    job_name = job["metadata"]["name"]
    steps = (_user_image_steps if spec.model_source.kind == "entrypoint" else _extract_image_steps)(spec, settings)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": (dict(metadata) if metadata is not None
                     else _metadata(job, name=names.analysis_pod_name(job_name), role="analysis")),
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": settings.timeout_seconds,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "initContainers": steps.init,
            "containers": [
                {"name": "emit", "image": steps.emit_image,
                 "command": ["python", "-m", "offpeak_operator.emit", GRAPH_OUT,
                             "--limit-bytes", str(settings.configmap_limit_bytes)],
                 "volumeMounts": [_GRAPH_MOUNT], "resources": _SMALL, **steps.container_fields},
            ],
            "volumes": [{"name": "graph", "emptyDir": {}}, *steps.volumes],
            **steps.pod_fields,
        },
    }


_SMALL = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
_GRAPH_MOUNT = {"name": "graph", "mountPath": "/graph"}
_CPU_ONLY_ENV = [{"name": "CUDA_VISIBLE_DEVICES", "value": ""}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]
# offpeak's own images run as a non-root user (UID 10001): their containers pass PodSecurity "restricted"
_RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
HF_CONFIG_DIR = "/hf"


class _Steps(NamedTuple):
    """What differs between the two kinds of analysis pod."""

    init: list[dict[str, Any]]  # init containers, the last one `extract`
    emit_image: str
    volumes: list[dict[str, Any]]  # besides `graph`
    pod_fields: dict[str, Any]  # extra pod spec fields
    container_fields: dict[str, Any]  # extra fields of every container (the `emit` one included)


def _extract_resources(settings: AnalysisSettings) -> dict[str, Any]:
    return {"requests": {"cpu": settings.cpu_request, "memory": settings.memory_request},
            "limits": {"cpu": settings.cpu_limit, "memory": settings.memory_limit}}


def _user_image_steps(spec: JobSpec, settings: AnalysisSettings) -> _Steps:
    """Copy the offpeak bundle, then run the extractor from it in the user's image, against the entry point."""
    bundle = f"{BUNDLE_DIR}/offpeak.pyz"
    mounts = [{"name": "offpeak", "mountPath": BUNDLE_DIR}, _GRAPH_MOUNT]
    init = [
        {"name": "bundle", "image": settings.image, "command": ["cp", settings.bundle_path, bundle],
         "volumeMounts": mounts[:1], "resources": _SMALL},
        {"name": names.EXTRACT_CONTAINER, "image": spec.image, "imagePullPolicy": spec.image_pull_policy,
         "command": [settings.python, bundle, *extract_args(spec, out=GRAPH_OUT)],
         # the extractor's one-line error (stderr) becomes the termination message the operator reads
         "terminationMessagePolicy": "FallbackToLogsOnError",
         "env": [*spec.env, *_CPU_ONLY_ENV], "volumeMounts": mounts, "resources": _extract_resources(settings),
         **({"workingDir": spec.working_dir} if spec.working_dir else {})},
    ]
    extra = {"imagePullSecrets": [dict(s) for s in spec.image_pull_secrets]} if spec.image_pull_secrets else {}
    return _Steps(init, settings.image, [{"name": "offpeak", "emptyDir": {}}], extra, {})


def _extract_image_steps(spec: JobSpec, settings: AnalysisSettings) -> _Steps:
    """Run `offpeak extract` in the extract image: nothing of the user's runs, so the pod is PodSecurity
    "restricted" (a tenant namespace may enforce it); an hfConfigMap's config is mounted, read-only."""
    source = spec.model_source
    mounts: list[dict[str, Any]] = [_GRAPH_MOUNT, {"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    hf_file = source.value if source.kind == "hfConfig" else ""  # a built-in preset, by name
    if source.kind == "hfConfigMap":
        # the folder names the model, as the operator's own config.json does (extraction.py)
        hf_file = f"{HF_CONFIG_DIR}/{source.value}/config.json"
        mounts.append({"name": "hf-config", "mountPath": HF_CONFIG_DIR, "readOnly": True})
        volumes.append({"name": "hf-config", "configMap": {
            "name": source.value, "items": [{"key": source.key, "path": f"{source.value}/config.json"}]}})
    init = [
        {"name": names.EXTRACT_CONTAINER, "image": settings.extract_image,
         "command": ["offpeak", *extract_args(spec, out=GRAPH_OUT, hf_config_file=hf_file)],
         "workingDir": "/tmp",  # an empty folder: a preset's name never resolves to a file
         "terminationMessagePolicy": "FallbackToLogsOnError",
         "env": [{"name": "HOME", "value": "/tmp"}, *_CPU_ONLY_ENV], "volumeMounts": mounts,
         "resources": _extract_resources(settings), "securityContext": _RESTRICTED},
    ]
    pod_security = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    return _Steps(init, settings.extract_image, volumes, {"securityContext": pod_security},
                  {"securityContext": _RESTRICTED})


def predicted_annotation(remaining: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The `offpeak.io/predicted-job-seconds` annotation the extender places by."""
    return {names.ANN_PREDICTED: json.dumps(remaining, sort_keys=True, separators=(",", ":"), allow_nan=False)}


RENDEZVOUS_PORT = 29500  # torchrun's default MASTER_PORT
# torchrun's --max-restarts for an elastic attempt: how often the workers still running restart from the last
# checkpoint when a worker leaves (evicted for online work) or crashes; a worker joining does not count. Past it
# the pods fail and the operator requeues the attempt (a crash that repeats costs this many restarts first).
ELASTIC_MAX_RESTARTS = 8


def rendezvous_env(job: Mapping[str, Any], spec: JobSpec, *, worker: int, attempt: int) -> list[dict[str, str]]:
    """torchrun-compatible environment: plain `torchrun train.py` (PET_* options) and `init_process_group("env://")`
    with one process per pod both work. WORLD_SIZE counts processes (workers x GPUs per worker) and RANK is the
    global rank of this pod's first process, as torch.distributed defines them; NODE_RANK is the worker index."""
    meta = job["metadata"]
    gpus = spec.gpus_per_worker
    if spec.workers > 1:
        master = (f"{names.worker_hostname(meta['name'], worker=0)}.{names.worker_service_name(meta['name'])}."
                  f"{meta['namespace']}.svc")
    else:
        master = "127.0.0.1"
    if spec.elastic:
        return _elastic_env(job, spec, master=master, attempt=attempt)
    values = {
        "MASTER_ADDR": master, "MASTER_PORT": str(RENDEZVOUS_PORT), "WORLD_SIZE": str(spec.workers * gpus),
        "RANK": str(worker * gpus), "NODE_RANK": str(worker), "LOCAL_WORLD_SIZE": str(gpus),
        "PET_NNODES": str(spec.workers), "PET_NPROC_PER_NODE": str(gpus), "PET_NODE_RANK": str(worker),
        "PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(RENDEZVOUS_PORT),
    }  # fmt: skip
    return [{"name": k, "value": v} for k, v in values.items()]


def _elastic_env(job: Mapping[str, Any], spec: JobSpec, *, master: str, attempt: int) -> list[dict[str, str]]:
    """torchrun's elastic rendezvous (`--nnodes=MIN:MAX`, c10d hosted by worker 0, which the extender always
    admits): how many workers run is known only when they meet, so WORLD_SIZE, RANK and NODE_RANK are torchrun's
    to set, not fixed here. The rendezvous id names the attempt, so a new attempt never meets an old one; the
    workers left when one is evicted restart at the narrower width (`ELASTIC_MAX_RESTARTS`), and the attempt goes
    on (`statemachine._narrow`)."""
    meta = job["metadata"]
    values = {
        "PET_NNODES": f"{spec.min_workers}:{spec.workers}", "PET_NPROC_PER_NODE": str(spec.gpus_per_worker),
        "LOCAL_WORLD_SIZE": str(spec.gpus_per_worker), "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{master}:{RENDEZVOUS_PORT}", "PET_RDZV_ID": f"{meta['name']}-{attempt}",
        "PET_MAX_RESTARTS": str(ELASTIC_MAX_RESTARTS), "OFFPEAK_MIN_WORKERS": str(spec.min_workers),
    }  # fmt: skip
    return [{"name": k, "value": v} for k, v in values.items()]


def training_pod(job: Mapping[str, Any], spec: JobSpec, *, attempt: int, worker: int,
                 gpu_types: tuple[str, ...], remaining: Mapping[str, Mapping[str, float]],
                 completed_steps: int, placement: Placement | None = None,
                 status: PodParts | None = None) -> dict[str, Any]:
    """One data-parallel worker: the user's pod template (or the short form's) with the operator's parts added,
    placed by offpeak-scheduler on a node of an allowed GPU type. `jobspec.validate` has refused templates that
    set any of those parts (podtemplate.template_conflicts). `placement`: the node labels and tolerations of the
    ResourceFlavors Kueue admitted a queued job on (admission.py). `status`: the live progress channel's URL, token
    and CA (livereports.py; None: the pod reports only in its termination message).

    The pod gets no API credentials unless it asks for them: no service-account token is mounted when neither the
    template sets `automountServiceAccountToken` nor the pod names its own service account (progress goes to the
    status server with the attempt's token instead)."""
    job_name = job["metadata"]["name"]
    template = copy.deepcopy(spec.pod_template())
    user_meta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = template["spec"]
    index = podtemplate.train_container_index(pod_spec["containers"])
    assert index is not None, "validate() refuses templates without a training container"
    container: dict[str, Any] = pod_spec["containers"][index]
    container.setdefault("image", spec.image)
    annotations = {
        **(user_meta.get("annotations") or {}),
        **predicted_annotation(remaining),
        names.ANN_CHECKPOINTING: "true" if spec.checkpointing else "false",
        names.ANN_PREEMPTIBLE: "true" if spec.preemptible else "false",
    }
    if container.get("name") != names.TRAIN_CONTAINER:
        annotations[names.ANN_TRAIN_CONTAINER] = str(container.get("name"))
    if spec.workers > 1:
        annotations[names.ANN_GANG_SIZE] = str(spec.workers)
    if spec.elastic:
        annotations[names.ANN_GANG_MIN_SIZE] = str(spec.min_workers)
    if spec.checkpoint is not None:
        annotations[names.ANN_CHECKPOINT_INTERVAL] = f"{spec.checkpoint.interval_seconds:g}"
        annotations[names.ANN_SAVE_ON_STOP] = str(spec.checkpoint.grace_period_seconds)
    labels = {**(user_meta.get("labels") or {}), names.LABEL_WORKLOAD: "offline", names.LABEL_ATTEMPT: str(attempt),
              names.LABEL_WORKER: str(worker)}
    gpus = str(spec.gpus_per_worker)
    resources = container.get("resources") or {}
    container["resources"] = {
        "requests": {**(resources.get("requests") or {}), names.GPU_RESOURCE: gpus},
        "limits": {**(resources.get("limits") or {}), names.GPU_RESOURCE: gpus},
    }
    env = [
        {"name": "OFFPEAK_TRAININGJOB", "value": job_name},
        {"name": "OFFPEAK_WORKER_INDEX", "value": str(worker)},
        {"name": "OFFPEAK_WORKERS", "value": str(spec.workers)},
        {"name": "OFFPEAK_ATTEMPT", "value": str(attempt)},
        {"name": "OFFPEAK_TOTAL_STEPS", "value": str(spec.total_steps)},
        {"name": "OFFPEAK_COMPLETED_STEPS", "value": str(completed_steps)},
        {"name": "OFFPEAK_PROGRESS_FILE", "value": names.TERMINATION_LOG},
        *rendezvous_env(job, spec, worker=worker, attempt=attempt),
    ]
    if spec.checkpoint is not None:
        env += [{"name": "OFFPEAK_CHECKPOINT_DIR", "value": spec.checkpoint.path},
                {"name": "OFFPEAK_CHECKPOINT_INTERVAL_SECONDS", "value": f"{spec.checkpoint.interval_seconds:g}"}]
        container["volumeMounts"] = [*(container.get("volumeMounts") or []),
                                     {"name": podtemplate.CHECKPOINT_VOLUME, "mountPath": spec.checkpoint.path}]
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), {
            "name": podtemplate.CHECKPOINT_VOLUME,
            "persistentVolumeClaim": {"claimName": spec.checkpoint.claim(job_name)}}]
        pod_spec["terminationGracePeriodSeconds"] = max(int(pod_spec.get("terminationGracePeriodSeconds") or 0),
                                                        spec.checkpoint.grace_period_seconds)
    if status is not None:
        annotations.update(status.annotations)
        env += status.env
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), status.mount]
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), status.volume]
    if "automountServiceAccountToken" not in pod_spec and not pod_spec.get("serviceAccountName"):
        pod_spec["automountServiceAccountToken"] = False
    container["env"] = [*(container.get("env") or []), *env]
    # offpeak.progress writes its report here; the operator reads it back from state.terminated.message
    container["terminationMessagePath"] = names.TERMINATION_LOG
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    pod_spec["schedulerName"] = names.SCHEDULER_NAME
    pod_spec["restartPolicy"] = "Never"
    affinity = pod_spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": podtemplate.merge_node_terms(required.get("nodeSelectorTerms") or [],
                                                          gpu_type_terms(gpu_types))}
    pod_spec["tolerations"] = [{"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                               *(pod_spec.get("tolerations") or [])]
    if placement is not None:  # where Kueue's admission puts the pods, as Kueue does for the Jobs it admits
        if placement.node_selector:
            pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **placement.node_selector}
        pod_spec["tolerations"] += [dict(t) for t in placement.tolerations if dict(t) not in pod_spec["tolerations"]]
    if spec.workers > 1:  # a stable name the rendezvous address points at, whatever the attempt
        pod_spec["hostname"] = names.worker_hostname(job_name, worker=worker)
        pod_spec["subdomain"] = names.worker_service_name(job_name)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, name=names.training_pod_name(job_name, attempt=attempt, worker=worker),
                              role="training", labels=labels, annotations=annotations),
        "spec": pod_spec,
    }


def worker_service(job: Mapping[str, Any]) -> dict[str, Any]:
    """The owned headless Service of a multi-worker job: `<worker hostname>.<service>` resolves to each worker's
    pod from the moment it has an IP (not-ready addresses published), so rank 0 is reachable during start-up."""
    job_name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name=names.worker_service_name(job_name), role="rendezvous"),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {names.LABEL_JOB: job_name, names.LABEL_ROLE: "training"},
                 "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT}]},
    }


def checkpoint_claim(job: Mapping[str, Any], spec: JobSpec) -> dict[str, Any] | None:
    """The owned PersistentVolumeClaim made from spec.checkpoint.claimTemplate (None: the job names its own)."""
    ckpt = spec.checkpoint
    if ckpt is None or ckpt.claim_template is None:
        return None
    user_meta = ckpt.claim_template.get("metadata") or {}
    meta = _metadata(job, name=names.checkpoint_claim_name(job["metadata"]["name"]), role="checkpoint",
                     labels=user_meta.get("labels") or {}, annotations=user_meta.get("annotations") or {})
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": copy.deepcopy(dict(ckpt.claim_template["spec"]))}


def graph_configmap(job: Mapping[str, Any], encoded: EncodedGraph, *, source: str,
                    metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The owned `<job>-graph` ConfigMap: gzip graph JSON in binaryData, hash and reduction as annotations.
    `metadata` names and owns it for another owner than a TrainingJob (an opted-in workload)."""
    job_name = job["metadata"]["name"]
    annotations = {names.ANN_GRAPH_HASH: encoded.graph_hash, names.ANN_GRAPH_REDUCED: encoded.reduced,
                   "offpeak.io/graph-source": source}
    meta = (dict(metadata) if metadata is not None else
            _metadata(job, name=names.graph_configmap_name(job_name), role="graph"))
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "binaryData": {names.GRAPH_KEY: base64.b64encode(encoded.data).decode()},
    }


def gpu_type_terms(gpu_types: Sequence[str]) -> list[dict[str, Any]]:
    """Node-affinity terms (ORed) for nodes of these GPU types: labelled `offpeak.io/gpu-type` (the override), or
    unlabelled with a matching GPU feature discovery product (`offpeak_core.gpuproducts`)."""
    terms: list[dict[str, Any]] = [
        {"matchExpressions": [{"key": names.LABEL_GPU_TYPE, "operator": "In", "values": list(gpu_types)}]},
    ]
    products = sorted({p for t in gpu_types for p in gfd_products(t)})
    if products:
        terms.append({"matchExpressions": [
            {"key": GFD_PRODUCT_LABEL, "operator": "In", "values": products},
            {"key": names.LABEL_GPU_TYPE, "operator": "DoesNotExist"},
        ]})
    return terms
