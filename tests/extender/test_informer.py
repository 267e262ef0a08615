"""Informer: list then watch into the store, using real kubernetes client models and a scripted watch stream."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch

from offpeak_core.forecast import ForecastSettings
from offpeak_extender.kube import Informer
from offpeak_extender.store import ClusterStore

from .k8s_objects import gpu_node, gpu_pod


def model(api: client.ApiClient, obj: dict[str, Any], kind: str) -> Any:
    """A client model built the way the client builds them from API responses."""
    return api._ApiClient__deserialize(obj, kind)  # type: ignore[attr-defined]


def test_list_then_watch_updates_store(monkeypatch: pytest.MonkeyPatch) -> None:
    api = client.ApiClient()
    store = ClusterStore(settings=ForecastSettings())
    inf = Informer(api_client=api, store=store)
    pods = [gpu_pod("web-0", gpus=2, node="n1", workload="online")]
    listing = model(api, {"metadata": {"resourceVersion": "7"}, "items": pods}, "V1PodList")
    added = model(api, gpu_pod("train-0", gpus=1, node="n1"), "V1Pod")
    deleted = model(api, pods[0], "V1Pod")
    seen: dict[str, Any] = {}

    class ScriptedWatch:
        def stream(self, func: Any, **kw: Any) -> Any:
            seen.update(kw)
            yield {"type": "ADDED", "object": added}
            yield {"type": "BOOKMARK", "object": None}
            yield {"type": "DELETED", "object": deleted}

        def stop(self) -> None:
            seen["stopped"] = True

    monkeypatch.setattr(watch, "Watch", ScriptedWatch)
    store.replace_all(nodes=[gpu_node("n1", gpus=4)])
    inf._list_and_watch("pods", lambda **kw: listing)
    assert seen["resource_version"] == "7" and seen["stopped"]
    assert store.synced
    assert store.usage("n1") == (0, 1, 0)  # web-0 deleted, train-0 added (offline)
    [p] = store.pods_on("n1")
    assert p.name == "train-0" and p.trainingjob == "train"


def test_gpu_type_comes_from_gpu_feature_discovery_unless_overridden() -> None:
    from offpeak_extender.store import node_info

    gfd = gpu_node("h100-0")
    gfd["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
    assert node_info(gfd).gpu_type == "H100-SXM5-80GB"
    gfd["metadata"]["labels"]["offpeak.io/gpu-type"] = "H100-PCIE-80GB"
    assert node_info(gfd).gpu_type == "H100-PCIE-80GB"  # the override wins
    mig = gpu_node("a100-mig")
    mig["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}
    assert node_info(mig).gpu_type == "unknown"  # a slice is not an A100: placed runtime-blind
