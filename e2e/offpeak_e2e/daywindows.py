"""Scenarios on a compressed "day" whose idle windows follow a plan of our own: each node is idle in one stretch of
the day and full of online work (8 GPUs) outside it, with past days backfilled into Prometheus so the forecasters
know it. Shared by the short-windows, planned-stop and pool-windows scenarios."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from offpeak_core.model import IdleWindow
from offpeak_core.windows import current_window
from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import E2ECluster, own_cluster, session_cluster_name, trainingjob_manifest

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


def extender_window(c: E2ECluster, node: str, *, gpus: int) -> float:
    """Seconds left of `node`'s idle window for `gpus` GPUs as the extender sees it now (its `/windows` debug
    view, the views its filter reads): 0 without one, infinity when it reaches past the forecast horizon."""
    url = f"{c.state.urls['extender']}/windows?node={node}"
    report = json.loads(urllib.request.urlopen(url, timeout=5).read())  # noqa: S310
    (view,) = report["nodes"]
    best = current_window(windows=[IdleWindow(**w) for w in view["windows"]], now=report["now"], gpus=gpus)
    return 0.0 if best is None else best.length(report["now"])


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


def wait_for_evidence_and_first_window(c: E2ECluster, *, day: float, windows: int = 10) -> None:
    """Wait until the extender's goodput ledger has followed `windows` idle windows to their end, then for 10-14 s
    into a day: early in the first node's window, once the forecast has seen it open (the forecaster's steps lag
    the plan's edge by a step or two)."""
    waited = c.wait_for(f"the extender to have followed {windows}+ idle windows",
                        lambda: observed_windows(c) >= windows, timeout=2 * day, interval=3)
    print(f"[e2e] goodput evidence after {waited:.0f}s: {observed_windows(c):.0f} windows observed")
    c.wait_for("the first node's window to be open", lambda: 10.0 <= day_phase(c, day=day) < 14.0,
               timeout=day + 10, interval=0.5)


def checkpointed_job(name: str, *, pv: str, steps: int, step_seconds: float, gpus: int, interval: float,
                     gpu_types: Iterable[str], report: Mapping[str, Any], **spec: Any) -> dict[str, Any]:
    """A TrainingJob whose fake training runs `steps` of `step_seconds`, checkpoints every `interval` s on a claim
    bound to `pv`, and reports `report` (offpeak.progress) when it is stopped."""
    job = trainingjob_manifest(name, sim_seconds=steps * step_seconds, gpu_types=gpu_types, torchvision=None,
                               estimated_seconds=steps * step_seconds, steps=steps)
    job["spec"]["podAnnotations"].update({"offpeak.io/sim-step-ms": f"{step_seconds * 1000:g}",
                                          "offpeak.io/sim-progress": json.dumps(dict(report))})
    job["spec"].update(gpusPerWorker=gpus, **spec, checkpoint={
        "claimTemplate": checkpoint_claim(pv), "path": "/ckpt", "intervalSeconds": interval,
        "gracePeriodSeconds": 5})
    return job
