"""Builders for the objects the operator creates: analysis pod, training pods, graph ConfigMap. Pure dicts."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from offpeak_core.gpuproducts import GFD_PRODUCT_LABEL, gfd_products
from offpeak_operator import names
from offpeak_operator.graphstore import EncodedGraph
from offpeak_operator.jobspec import JobSpec
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


def analysis_pod(job: Mapping[str, Any], spec: JobSpec, settings: AnalysisSettings) -> dict[str, Any]:
    """CPU-only pod: copy the offpeak bundle, extract the graph in the user's image, print it to the log.

    Init 1 (offpeak image) copies the zipapp into an emptyDir; init 2 (user's image) runs the extractor from
    the zipapp against the user's entrypoint (exit status 2: the model source is invalid, see the state
    machine); the main container (offpeak image) reduces the graph to fit a
    ConfigMap and prints it between markers, and the operator stores it in the `<job>-graph` ConfigMap.
    """
    job_name = job["metadata"]["name"]
    resources = {"requests": {"cpu": settings.cpu_request, "memory": settings.memory_request},
                 "limits": {"cpu": settings.cpu_limit, "memory": settings.memory_limit}}
    small = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
    bundle = f"{BUNDLE_DIR}/offpeak.pyz"
    mounts = [{"name": "offpeak", "mountPath": BUNDLE_DIR}, {"name": "graph", "mountPath": "/graph"}]
    cpu_only_env = [{"name": "CUDA_VISIBLE_DEVICES", "value": ""}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, name=names.analysis_pod_name(job_name), role="analysis"),
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": settings.timeout_seconds,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "initContainers": [
                {"name": "bundle", "image": settings.image, "command": ["cp", settings.bundle_path, bundle],
                 "volumeMounts": mounts[:1], "resources": small},
                {"name": names.EXTRACT_CONTAINER, "image": spec.image, "imagePullPolicy": spec.image_pull_policy,
                 "command": [settings.python, bundle, *extract_args(spec, out=GRAPH_OUT)],
                 # the extractor's one-line error (stderr) becomes the termination message the operator reads
                 "terminationMessagePolicy": "FallbackToLogsOnError",
                 "env": [*spec.env, *cpu_only_env], "volumeMounts": mounts, "resources": resources,
                 **({"workingDir": spec.working_dir} if spec.working_dir else {})},
            ],
            "containers": [
                {"name": "emit", "image": settings.image,
                 "command": ["python", "-m", "offpeak_operator.emit", GRAPH_OUT,
                             "--limit-bytes", str(settings.configmap_limit_bytes)],
                 "volumeMounts": mounts[1:], "resources": small},
            ],
            "volumes": [{"name": "offpeak", "emptyDir": {}}, {"name": "graph", "emptyDir": {}}],
        },
    }


def predicted_annotation(remaining: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The `offpeak.io/predicted-job-seconds` annotation the extender places by."""
    return {names.ANN_PREDICTED: json.dumps(remaining, sort_keys=True, separators=(",", ":"), allow_nan=False)}


def training_pod(job: Mapping[str, Any], spec: JobSpec, *, attempt: int, worker: int,
                 gpu_types: tuple[str, ...], remaining: Mapping[str, Mapping[str, float]],
                 completed_steps: int) -> dict[str, Any]:
    """One data-parallel worker, placed by offpeak-scheduler on a node of an allowed GPU type."""
    job_name = job["metadata"]["name"]
    annotations = {
        **spec.pod_annotations,
        **predicted_annotation(remaining),
        names.ANN_CHECKPOINTING: "true" if spec.checkpointing else "false",
        names.ANN_PREEMPTIBLE: "true" if spec.preemptible else "false",
    }
    labels = {**spec.pod_labels, names.LABEL_WORKLOAD: "offline", names.LABEL_ATTEMPT: str(attempt),
              names.LABEL_WORKER: str(worker)}
    gpus = str(spec.gpus_per_worker)
    resources = {
        "requests": {**spec.resources.get("requests", {}), names.GPU_RESOURCE: gpus},
        "limits": {**spec.resources.get("limits", {}), names.GPU_RESOURCE: gpus},
    }
    env = [
        *spec.env,
        {"name": "OFFPEAK_TRAININGJOB", "value": job_name},
        {"name": "OFFPEAK_WORKER_INDEX", "value": str(worker)},
        {"name": "OFFPEAK_WORKERS", "value": str(spec.workers)},
        {"name": "OFFPEAK_ATTEMPT", "value": str(attempt)},
        {"name": "OFFPEAK_TOTAL_STEPS", "value": str(spec.total_steps)},
        {"name": "OFFPEAK_COMPLETED_STEPS", "value": str(completed_steps)},
        {"name": "OFFPEAK_PROGRESS_FILE", "value": names.TERMINATION_LOG},
    ]
    container: dict[str, Any] = {
        "name": names.TRAIN_CONTAINER, "image": spec.image, "imagePullPolicy": spec.image_pull_policy, "env": env,
        "resources": resources,
        # offpeak.progress writes its report here; the operator reads it back from state.terminated.message
        "terminationMessagePath": names.TERMINATION_LOG, "terminationMessagePolicy": "FallbackToLogsOnError",
    }  # fmt: skip
    for key, value in (("command", list(spec.command)), ("args", list(spec.args)), ("workingDir", spec.working_dir)):
        if value:
            container[key] = value
    pod_spec: dict[str, Any] = {
        "schedulerName": names.SCHEDULER_NAME,
        "restartPolicy": "Never",
        "containers": [container],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": gpu_type_terms(gpu_types)}}},
        "tolerations": [{"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                        *spec.tolerations],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, name=names.training_pod_name(job_name, attempt=attempt, worker=worker),
                              role="training", labels=labels, annotations=annotations),
        "spec": pod_spec,
    }


def graph_configmap(job: Mapping[str, Any], encoded: EncodedGraph, *, source: str) -> dict[str, Any]:
    """The owned `<job>-graph` ConfigMap: gzip graph JSON in binaryData, hash and reduction as annotations."""
    job_name = job["metadata"]["name"]
    annotations = {names.ANN_GRAPH_HASH: encoded.graph_hash, names.ANN_GRAPH_REDUCED: encoded.reduced,
                   "offpeak.io/graph-source": source}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, name=names.graph_configmap_name(job_name), role="graph", annotations=annotations),
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
