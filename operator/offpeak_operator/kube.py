"""Kubernetes I/O for the reconciler, on the official client. Objects travel as plain JSON dicts.

Every create tolerates "already exists" and every delete tolerates "not found", so the reconciler's actions are
idempotent.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_core.jobkinds import JobKind
from offpeak_core.kueue import GROUP as KUEUE_GROUP
from offpeak_core.kueue import VERSION as KUEUE_VERSION
from offpeak_operator import names

log = logging.getLogger(__name__)
# The generated client sends no Content-Type on POST; say it explicitly rather than rely on server defaults.
JSON_BODY = {"Content-Type": "application/json"}


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from `kubeconfig`, else in-cluster credentials, else the default kubeconfig."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except config.ConfigException:
        return config.new_client_from_config()


def _json(response: Any) -> Any:
    return json.loads(response.data)


class KubeIO:
    """The reconciler's only door to the API server."""

    def __init__(self, api_client: client.ApiClient, *, node_cache_seconds: float = 30.0) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self._nodes: dict[str, tuple[float, str]] = {}
        self._node_ttl = node_cache_seconds
        self._lock = threading.Lock()

    # -- TrainingJobs
    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_if_present(lambda: self.custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, name, _preload_content=False))

    def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                names.GROUP, names.VERSION, namespace, names.PLURAL, name, {"status": dict(status)},
                _content_type="application/merge-patch+json", _preload_content=False)
        except ApiException as e:
            if e.status != 404:  # deleted meanwhile: nothing to record
                raise

    # -- pods
    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        response = self.core.list_namespaced_pod(namespace, label_selector=f"{names.LABEL_JOB}={job}",
                                                 _preload_content=False)
        return list(_json(response).get("items", []))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_if_present(lambda: self.core.read_namespaced_pod(name, namespace, _preload_content=False))

    def create_pod(self, body: Mapping[str, Any]) -> bool:
        """Create; False when a pod of that name already exists."""
        return _create_if_absent(self.core.create_namespaced_pod, body)

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge annotations into a pod (a pod already gone is not an error)."""
        try:
            self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": dict(annotations)}},
                                           _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    def pod_log(self, namespace: str, name: str, container: str) -> str:
        response: Any = self.core.read_namespaced_pod_log(name, namespace, container=container,
                                                          _preload_content=False)
        return str(response.data.decode(errors="replace"))

    # -- nodes
    def node_gpu_type(self, node: str) -> str:
        """The node's GPU type ("" if unknown): its offpeak.io/gpu-type label, else GPU feature discovery's
        product (`offpeak_core.gpuproducts`); cached briefly."""
        now = time.monotonic()
        with self._lock:
            cached = self._nodes.get(node)
            if cached and now - cached[0] < self._node_ttl:
                return cached[1]
        try:
            body = _json(self.core.read_node(node, _preload_content=False))
            gpu_type = node_gpu_type(body.get("metadata", {}).get("labels") or {}) or ""
        except ApiException as e:  # 404: node gone; 403: no RBAC for nodes. Either way: type unknown, go on.
            if e.status not in (403, 404):
                raise
            if e.status == 403:
                log.warning("cannot read node %s (grant the operator `get nodes`): GPU type unknown", node)
            gpu_type = ""
        with self._lock:
            self._nodes[node] = (now, gpu_type)
        return gpu_type

    # -- kopf peering
    def peering_status(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """`status` of the ClusterKopfPeering (namespace None) or KopfPeering `name`; None if it does not exist."""
        try:
            if namespace is None:
                response = self.custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name,
                                                                 _preload_content=False)
            else:
                response = self.custom.get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings",
                                                                    name, _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(_json(response).get("status") or {})

    # -- ConfigMaps
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_if_present(lambda: self.core.read_namespaced_config_map(name, namespace,
                                                                             _preload_content=False))

    def create_configmap(self, body: Mapping[str, Any]) -> bool:
        """Create; False when a ConfigMap of that name already exists."""
        return _create_if_absent(self.core.create_namespaced_config_map, body)

    def replace_configmap(self, body: Mapping[str, Any]) -> None:
        """Replace an existing ConfigMap whole (a workload's graph, analysed again for another entry point)."""
        meta = body["metadata"]
        self.core.replace_namespaced_config_map(meta["name"], meta["namespace"], cast(Any, body), _headers=JSON_BODY,
                                                _preload_content=False)

    # -- workloads that opt in (offpeak_operator.workloads): batch/v1 Jobs, PyTorchJobs (offpeak_core.jobkinds)
    def get_workload(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any] | None:
        if kind.group == "":
            return _read_if_present(lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False))
        return _read_if_present(lambda: self.custom.get_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name, _preload_content=False))

    def list_workload_pods(self, kind: JobKind, namespace: str, name: str) -> list[dict[str, Any]]:
        """The pods the workload's controller made for it (by the label it puts on them)."""
        response = self.core.list_namespaced_pod(namespace, label_selector=f"{kind.pod_label}={name}",
                                                 _preload_content=False)
        return list(_json(response).get("items", []))

    def patch_workload(self, kind: JobKind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """JSON merge patch of a workload (one deleted meanwhile is not an error)."""
        try:
            if kind.group == "":
                self.batch.patch_namespaced_job(name, namespace, dict(patch), _preload_content=False,
                                                _content_type="application/merge-patch+json")
            else:
                self.custom.patch_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name,
                                                           dict(patch), _preload_content=False,
                                                           _content_type="application/merge-patch+json")
        except ApiException as e:
            if e.status != 404:
                raise

    # -- Kueue (offpeak_operator.admission): a queued TrainingJob's Workload, the ResourceFlavors of its admission
    def get_kueue_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_if_present(lambda: self.custom.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, _preload_content=False))

    def create_kueue_workload(self, body: Mapping[str, Any]) -> bool:
        """Create; False when a Workload of that name already exists."""
        return _create_if_absent(lambda namespace, obj, **kw: self.custom.create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", obj, **kw), body)

    def patch_kueue_workload_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """JSON merge patch of a Workload's status; a 409 (the resourceVersion in `patch` is stale) is raised."""
        self.custom.patch_namespaced_custom_object_status(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, dict(patch),
            _content_type="application/merge-patch+json", _preload_content=False)

    def get_resource_flavor(self, name: str) -> dict[str, Any] | None:
        return _read_if_present(lambda: self.custom.get_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", name, _preload_content=False))

    # -- what a job owns besides pods: its rendezvous Service, its checkpoint claim
    def create_service(self, body: Mapping[str, Any]) -> bool:
        """Create; False when a Service of that name already exists."""
        return _create_if_absent(self.core.create_namespaced_service, body)

    def create_pvc(self, body: Mapping[str, Any]) -> bool:
        """Create; False when a PersistentVolumeClaim of that name already exists."""
        return _create_if_absent(self.core.create_namespaced_persistent_volume_claim, body)

    # -- Events
    def emit_event(self, job: Mapping[str, Any], *, type: str, reason: str, message: str,
                   now: datetime | None = None) -> None:
        """A core/v1 Event on the TrainingJob (best effort: failures are logged, never raised)."""
        meta = job["metadata"]
        stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": job.get("apiVersion") or names.API_VERSION,
                               "kind": job.get("kind") or names.KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid")},
            "type": type, "reason": reason, "message": message[:1024],
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "source": {"component": "offpeak-operator"}, "reportingComponent": "offpeak-operator",
        }  # fmt: skip
        try:
            self.core.create_namespaced_event(meta["namespace"], cast(Any, body), _headers=JSON_BODY,
                                              _preload_content=False)
        except ApiException as e:
            log.warning("could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], e.reason)


def _read_if_present(read: Any) -> dict[str, Any] | None:
    """The object a read call returns, None when it does not exist (404)."""
    try:
        return _json(read())
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _create_if_absent(create: Any, body: Mapping[str, Any]) -> bool:
    """Create a namespaced object; False when one of that name already exists (handlers are idempotent)."""
    try:
        create(body["metadata"]["namespace"], cast(Any, body), _headers=JSON_BODY, _preload_content=False)
        return True
    except ApiException as e:
        if e.status == 409:
            return False
        raise
