"""Scheduling-throughput helpers shared by the load scenario and bench/e2e_scheduling.py."""

from __future__ import annotations

import json
from typing import Any

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e.harness import E2ECluster

GPU_TYPES = ("A100-SXM4-40GB", "H100-SXM5-80GB", "L4", "V100-SXM2-16GB")


def bulk_create(c: E2ECluster, ns: str, objects: list[dict[str, Any]], chunk: int = 100) -> None:
    for i in range(0, len(objects), chunk):
        body = {"apiVersion": "v1", "kind": "List", "items": objects[i:i + chunk]}
        c.kubectl("-n", ns, "create", "-f", "-", stdin=json.dumps(body), timeout=180)


def scheduling_rate(c: E2ECluster, ns: str, selector: str, count: int, *, timeout: float) -> dict[str, float]:
    """Wait until `count` pods matching `selector` are bound; rate = pods / (last bind - first creation)."""
    def bound() -> list[dict[str, Any]]:
        return [p for p in c.get("pods", "-n", ns, "-l", selector)["items"] if p["spec"].get("nodeName")]

    c.wait_for(f"{count} pods bound ({selector})", lambda: len(bound()) >= count, timeout=timeout, interval=2)
    pods = c.get("pods", "-n", ns, "-l", selector)["items"]
    created = [parse_timestamp(p["metadata"]["creationTimestamp"]) for p in pods]
    scheduled = [
        parse_timestamp(next((cond["lastTransitionTime"] for cond in p["status"].get("conditions", [])
                  if cond["type"] == "PodScheduled" and cond["status"] == "True"), None))
        for p in pods
    ]
    first, last = min(t for t in created if t), max(t for t in scheduled if t)
    span = max(1.0, last - first)  # timestamps have 1 s resolution
    return {"pods": len(pods), "seconds": span, "pods_per_second": round(len(pods) / span, 2)}


def raw_gpu_pods(prefix: str, scheduler: str, n: int) -> list[dict[str, Any]]:
    predicted = json.dumps({t: {"p50": 30, "p90": 36} for t in GPU_TYPES})
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{prefix}-{i}", "labels": {"e2e/batch": prefix, "offpeak.io/workload": "offline"},
                     "annotations": {"offpeak.io/sim-runtime": "5s", "offpeak.io/predicted-job-seconds": predicted}},
        "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/x:1",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    } for i in range(n)]
