"""Kubernetes adapters: client loading and an informer-style watch that keeps a `ClusterStore` current."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from offpeak.errors import UserError
from offpeak_core.announcements import GROUP, PLURAL, VERSION
from offpeak_extender.store import ClusterStore

log = logging.getLogger(__name__)


def load_api_client(kubeconfig: str | None) -> Any:
    """An ApiClient from `kubeconfig`, else $KUBECONFIG/~/.kube/config, else the in-cluster service account."""
    from kubernetes import client, config

    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            return config.new_client_from_config()
    except (config.ConfigException, OSError) as e:
        raise UserError(f"cannot load Kubernetes config ({e}); pass --kubeconfig or set KUBECONFIG") from e


class Informer:
    """List-then-watch nodes and pods (and, with `announcements`, OnlineDemand objects) into the store, relisting
    on expiry or error (one daemon thread each)."""

    def __init__(self, *, api_client: Any, store: ClusterStore, watch_timeout_seconds: int = 300,
                 retry_seconds: float = 2.0, announcements: bool = False,
                 missing_crd_retry_seconds: float = 60.0) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.store = store
        self.watch_timeout_seconds = watch_timeout_seconds
        self.retry_seconds = retry_seconds
        self.missing_crd_retry_seconds = missing_crd_retry_seconds
        self.kinds = ("nodes", "pods", "onlinedemands") if announcements else ("nodes", "pods")
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def _to_dict(self, obj: Any) -> dict[str, Any]:
        data: dict[str, Any] = self.api_client.sanitize_for_serialization(obj)  # camelCase, as on the wire
        return data

    def start(self) -> None:
        for kind in self.kinds:
            t = threading.Thread(target=self._run, args=(kind,), name=f"informer-{kind}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()

    def _lister(self, kind: str) -> tuple[Callable[..., Any], tuple[str, ...]]:
        """The list call of `kind` and its leading arguments (a watch's stream needs the client's own method, not
        a partial of it: it reads the method's signature)."""
        if kind == "nodes":
            return self.core.list_node, ()
        if kind == "pods":
            return self.core.list_pod_for_all_namespaces, ()
        return self.custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL)

    def _run(self, kind: str) -> None:
        from kubernetes.client.exceptions import ApiException

        lister, args = self._lister(kind)
        told_missing = False
        while not self.stop_event.is_set():
            try:
                self._list_and_watch(kind, lister, *args)
            except Exception as e:  # noqa: BLE001 - a watch must survive API hiccups; log and relist
                if kind == "onlinedemands" and isinstance(e, ApiException) and e.status == 404:  # no CRD (yet)
                    if not told_missing:  # say so once
                        log.warning("no OnlineDemand resource (%s.%s not installed: crds/); announced online demand "
                                    "is off until it is, looking again every %.0fs", PLURAL, GROUP,
                                    self.missing_crd_retry_seconds)
                        told_missing = True
                    self.stop_event.wait(self.missing_crd_retry_seconds)
                    continue
                log.warning("informer %s: %s; relisting in %.0fs", kind, e, self.retry_seconds)
                self.stop_event.wait(self.retry_seconds)

    def _list_and_watch(self, kind: str, lister: Callable[..., Any], *args: str) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        listing = lister(*args)
        if isinstance(listing, dict):  # custom objects come as plain dicts
            items = list(listing.get("items") or [])
            version = (listing.get("metadata") or {}).get("resourceVersion")
        else:
            items = [self._to_dict(o) for o in listing.items]
            version = listing.metadata.resource_version
        if kind == "nodes":
            self.store.replace_all(nodes=items)
        elif kind == "pods":
            self.store.replace_all(pods=items)
        else:
            self.store.replace_announcements(items)
        w = watch.Watch()
        try:
            # server-side timeout plus a client-side read timeout: a silently dead watch must not go stale forever
            for event in w.stream(lister, *args, resource_version=version, timeout_seconds=self.watch_timeout_seconds,
                                  allow_watch_bookmarks=True, _request_timeout=self.watch_timeout_seconds + 30):
                if self.stop_event.is_set():
                    return
                etype = event.get("type")
                obj = event.get("object")
                if etype == "BOOKMARK" or obj is None:
                    continue
                if etype == "ERROR":
                    return  # typically 410 Gone: relist
                data = obj if isinstance(obj, dict) else self._to_dict(obj)
                if kind == "nodes":
                    (self.store.delete_node if etype == "DELETED" else self.store.upsert_node)(data)
                elif kind == "pods":
                    (self.store.delete_pod if etype == "DELETED" else self.store.upsert_pod)(data)
                else:
                    (self.store.delete_announcement if etype == "DELETED" else self.store.upsert_announcement)(data)
        except ApiException as e:
            if e.status != 410:
                raise
        finally:
            w.stop()
