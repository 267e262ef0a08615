"""Realistic Kubernetes objects for the extender tests."""

from __future__ import annotations

import json
from typing import Any


def gpu_node(name: str, gpus: int = 8, gpu_type: str = "A100-SXM4-40GB", busy_hours: str | None = None) -> dict[str, Any]:
    ann = {"node.alpha.kubernetes.io/ttl": "0"}
    if busy_hours:
        ann["offpeak.io/busy-hours"] = busy_hours
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"offpeak.io/gpu-type": gpu_type,
                     "kubernetes.io/hostname": name}, "annotations": ann},
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
                   "allocatable": {"cpu": "63500m", "memory": "500Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}},
    }


def gpu_pod(name: str, *, gpus: int = 1, node: str | None = None, workload: str = "offline",
            predicted: dict[str, Any] | None = None, phase: str = "Running", checkpointing: bool = False,
            start: str = "2026-11-21T04:00:00Z", namespace: str = "ml") -> dict[str, Any]:
    ann: dict[str, str] = {}
    if predicted is not None:
        ann["offpeak.io/predicted-job-seconds"] = json.dumps(predicted)
    if checkpointing:
        ann["offpeak.io/checkpointing"] = "true"
    spec: dict[str, Any] = {
        "schedulerName": "offpeak-scheduler" if workload == "offline" else "default-scheduler",
        "containers": [{"name": "main", "image": "pytorch/pytorch:2.3.0",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "16Gi"},
                                      "requests": {"cpu": "4", "memory": "16Gi"}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "labels": {"offpeak.io/workload": workload, "offpeak.io/trainingjob": name.rsplit("-", 1)[0]},
                     "annotations": ann},
        "spec": spec,
        "status": {"phase": phase, "startTime": start} if phase != "Pending" else {"phase": "Pending"},
    }
