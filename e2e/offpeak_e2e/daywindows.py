"""Scenarios on a compressed "day" whose idle windows follow a plan of our own: each node is idle in one stretch of
the day and full of online work (8 GPUs) outside it, with past days backfilled into Prometheus so the forecasters
know it. Shared by the short-windows and planned-stop scenarios."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import E2ECluster, own_cluster, session_cluster_name

ONLINE_GPUS = 8  # a node's online work outside its window: all its GPUs


def online_plan(windows: Mapping[str, tuple[int, int]], *, day: float) -> dict[str, list[int]]:
    """Online GPUs per second of the day: none inside the node's window, all of them outside it."""
    return {node: [0 if start <= t < end else ONLINE_GPUS for t in range(int(day))]
            for node, (start, end) in windows.items()}


def day_cluster(name: str, *, windows: Mapping[str, tuple[int, int]], day: float, gpu_types: tuple[str, ...],
                extra_env: Mapping[str, str]) -> Iterator[E2ECluster]:
    """A module's own two-node cluster on that day plan, 4 past days of history (`yield from` it in a fixture)."""
    settings = ClusterSettings(
        control_plane=ControlPlaneSettings(name=session_cluster_name(f"pytest-{name}"), nodes=len(windows),
                                           gpu_types=gpu_types, build_missing=False),
        day_seconds=day, online_load=True, online_start_minute=0, history_days=4,
        online_plan=online_plan(windows, day=day), extra_env=dict(extra_env),
    )  # fmt: skip
    yield from own_cluster(settings, name)


def observed_windows(c: E2ECluster) -> float:
    """Idle windows the extender's goodput ledger has followed to their end (its own metric)."""
    text = urllib.request.urlopen(f"{c.state.urls['extender']}/metrics", timeout=5).read().decode()  # noqa: S310
    for line in text.splitlines():
        if line.startswith('offpeak_extender_goodput_windows{state="observed"}'):
            return float(line.split()[-1])
    return 0.0


def day_phase(c: E2ECluster, *, day: float) -> float:
    """Seconds into the current day of the plan."""
    return (time.time() - float(c.state.urls["reference"])) % day


def attempt_pods(c: E2ECluster, ns: str, job: str) -> dict[int, dict[str, Any]]:
    """The job's training pods by attempt number."""
    return {int(p["metadata"]["labels"]["offpeak.io/attempt"]): p
            for p in c.pods(ns, f"offpeak.io/trainingjob={job},offpeak.io/role=training")}


def checkpoint_volume(c: E2ECluster, ns: str) -> str:
    """A hostPath PersistentVolume for the job's checkpoint claim to bind (delete it after the scenario)."""
    pv = f"ckpt-{ns}"
    c.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
             "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                      "hostPath": {"path": f"/tmp/{pv}"}, "persistentVolumeReclaimPolicy": "Delete"}})
    return pv


def checkpoint_claim(pv: str) -> dict[str, Any]:
    """spec.checkpoint.claimTemplate bound to `pv`."""
    return {"spec": {"volumeName": pv, "storageClassName": "", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}
