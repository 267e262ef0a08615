"""Helpers of the scenarios on a compressed "day" whose idle windows follow a lane's plan (`offpeak_e2e.lanes`):
each node is idle in one stretch of the day and full of online work (8 GPUs) outside it, with past days backfilled
into Prometheus so the forecasters know it. Shared by the planned-stop, pool-window, announced-demand and Kueue
scenarios."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from offpeak_core.model import IdleWindow
from offpeak_core.windows import current_window
from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.lanes import Lane


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


def wait_for_evidence(c: E2ECluster, *, windows: int) -> None:
    """Wait until the extender's goodput ledger has followed `windows` idle windows (any lane's) to their end:
    before that, expected-goodput admission trusts no forecast class and admits nothing short."""
    day = c.cluster.settings.day_seconds
    waited = c.wait_for(f"the extender to have followed {windows}+ idle windows",
                        lambda: observed_windows(c) >= windows, timeout=2 * day, interval=3)
    print(f"[e2e] goodput evidence after {waited:.0f}s: {observed_windows(c):.0f} windows observed")


def checkpointed_job(name: str, *, pv: str, steps: int, step_seconds: float, gpus: int, interval: float,
                     gpu_types: Iterable[str], report: Mapping[str, Any], lane: Lane, **spec: Any) -> dict[str, Any]:
    """A TrainingJob on the lane's nodes whose fake training runs `steps` of `step_seconds`, checkpoints every
    `interval` s on a claim bound to `pv`, and reports `report` (offpeak.progress) when it is stopped."""
    job = trainingjob_manifest(name, sim_seconds=steps * step_seconds, gpu_types=gpu_types,
                               estimated_seconds=steps * step_seconds, steps=steps, lane=lane)
    job["spec"]["podAnnotations"].update({"offpeak.io/sim-step-ms": f"{step_seconds * 1000:g}",
                                          "offpeak.io/sim-progress": json.dumps(dict(report))})
    job["spec"].update(gpusPerWorker=gpus, **spec, checkpoint={
        "claimTemplate": checkpoint_claim(pv), "path": "/ckpt", "intervalSeconds": interval,
        "gracePeriodSeconds": 5})
    return job
