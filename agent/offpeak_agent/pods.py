"""Pod UID -> (namespace, name, workload) for the pods on this node, refreshed from the Kubernetes API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

WORKLOAD_LABEL = "offpeak.io/workload"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    workload: str  # "online", "offline" or "other"


class PodDirectory(Protocol):
    def lookup(self, uid: str) -> PodRef | None: ...


def pod_ref(obj: Mapping[str, Any]) -> tuple[str, PodRef]:
    meta = obj.get("metadata") or {}
    workload = str((meta.get("labels") or {}).get(WORKLOAD_LABEL) or "other")
    if workload not in ("online", "offline"):
        workload = "other"
    return str(meta.get("uid", "")), PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")), workload)


class StaticPods:
    """A fixed directory (tests, or a node without API access)."""

    def __init__(self, pods: Mapping[str, PodRef] | None = None) -> None:
        self.pods = dict(pods or {})

    def lookup(self, uid: str) -> PodRef | None:
        return self.pods.get(uid)


class KubePods:
    """Lists pods on `node_name` (field selector) at most every `refresh_seconds`, and on an unknown UID."""

    def __init__(self, *, api_client: Any, node_name: str, refresh_seconds: float = 30.0) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.api_client = api_client
        self.node_name = node_name
        self.refresh_seconds = refresh_seconds
        self._pods: dict[str, PodRef] = {}
        self._listed_at = 0.0
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        try:
            listing = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node_name}")
        except Exception as e:  # noqa: BLE001 - API hiccup: keep the old directory
            log.warning("listing pods on %s failed: %s", self.node_name, e)
            return
        self._pods = dict(pod_ref(self.api_client.sanitize_for_serialization(p)) for p in listing.items)

    def lookup(self, uid: str) -> PodRef | None:
        with self._lock:
            now = time.monotonic()
            if uid not in self._pods and now - self._listed_at > min(5.0, self.refresh_seconds) or \
                    now - self._listed_at > self.refresh_seconds:
                self._listed_at = now
                self._refresh()
            return self._pods.get(uid)
