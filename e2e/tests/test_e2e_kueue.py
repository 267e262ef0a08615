"""Scenario (#19): a Kueue-queued Job is admitted only once a forecast idle window fits it.

Its own cluster (`pytest-kueue`): two GPU nodes whose online load follows a plan, a 240 s "day" (4 past days
backfilled into Prometheus): every GPU busy with online work for the first 70 s of each day, idle for the rest.
Kueue's controller runs as built from its Go module (`offpeak_e2e.kueue`), with its CRDs; the extender answers
Kueue AdmissionChecks of controller `offpeak.io/window-fit`. A ClusterQueue with plenty of quota lists offpeak's
check, so quota never holds the Job back; only the window does.

The Job is submitted early in the busy part of the day: the operator predicts it and leaves it suspended for Kueue,
Kueue reserves quota and asks offpeak's check, which stays Pending, saying why, while no node has room. Once the
idle window opens the check turns Ready, Kueue admits the workload and unsuspends the Job, and offpeak's scheduler
places its pod.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e import kueue
from offpeak_e2e.cluster import ClusterSettings, offpeak_argv
from offpeak_e2e.controlplane import ControlPlaneSettings, StartError, install_built_crds
from offpeak_e2e.harness import (
    E2ECluster, offline_job_manifest, offline_template, own_cluster, session_cluster_name,
)
from offpeak_e2e.nodes import plan_nodes

DAY = 240.0
BUSY_UNTIL = 70  # seconds into each day when online work leaves the GPUs
TYPES = ("A100-SXM4-40GB", "H100-SXM5-80GB")
NODES = [spec.name for spec in plan_nodes(count=2, gpu_types=TYPES)]
CHECK, QUEUE = "offpeak-window", "team"


def _plan() -> dict[str, list[int]]:
    return {node: [8 if t < BUSY_UNTIL else 0 for t in range(int(DAY))] for node in NODES}


@pytest.fixture(scope="module")
def kueue_cluster() -> Iterator[E2ECluster]:
    settings = ClusterSettings(
        control_plane=ControlPlaneSettings(name=session_cluster_name("pytest-kueue"), nodes=2, gpu_types=TYPES,
                                           build_missing=False),
        day_seconds=DAY, online_load=True, online_start_minute=0, history_days=4, online_plan=_plan(),
        extra_env={"OFFPEAK_KUEUE_ADMISSION_CHECK": "offpeak.io/window-fit", "OFFPEAK_KUEUE_INTERVAL_SECONDS": "1"},
    )  # fmt: skip
    started = own_cluster(settings, "kueue")
    cluster = next(started)
    try:
        try:
            crds = install_built_crds(cluster.kubeconfig, "kueue")
            url = kueue.start(cluster.cluster.sup, run_dir=cluster.cluster.cp.run_dir, kubeconfig=cluster.kubeconfig)
        except StartError as e:
            pytest.fail(f"Kueue did not start: {e}", pytrace=False)
        print(f"[e2e] Kueue {kueue.build.KUEUE_VERSION} up ({len(crds)} CRDs, {url})", flush=True)
        yield cluster
    finally:
        started.close()  # stops the cluster, Kueue with it


def _queues(ns: str) -> list[dict[str, Any]]:
    gpu_quota = [{"name": r, "nominalQuota": q} for r, q in (("cpu", "1000"), ("memory", "10Ti"),
                                                               ("nvidia.com/gpu", "64"))]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
         "spec": {"controllerName": "offpeak.io/window-fit"}},
        # the flavor's node labels (every kwok node's) are where Kueue puts the pods, and what the check judges
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "gpu-nodes"},
         "spec": {"nodeLabels": {"type": "kwok"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "offline"},
         "spec": {"namespaceSelector": {}, "admissionChecks": [CHECK], "resourceGroups": [
             {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
              "flavors": [{"name": "gpu-nodes", "resources": gpu_quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": ns},
         "spec": {"clusterQueue": "offline"}},
    ]


def _job(name: str) -> dict[str, Any]:
    template = offline_template(gpus=2, requests={"cpu": "1", "memory": "1Gi"}, annotations={
        "offpeak.io/batch-size": "32", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "30",
        "offpeak.io/gpu-types": ",".join(TYPES), "offpeak.io/sim-runtime": "5000ms"})
    return offline_job_manifest(name, template=template, labels={"kueue.x-k8s.io/queue-name": QUEUE})


def _day_phase(c: E2ECluster) -> float:
    return (time.time() - float(c.state.urls["reference"])) % DAY


def _check_state(c: E2ECluster, ns: str) -> dict[str, Any] | None:
    items = c.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    for wl in items:
        for check in (wl.get("status") or {}).get("admissionChecks") or ():
            if check["name"] == CHECK:
                return dict(check)
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_kueue_queued_job_is_admitted_only_once_a_forecast_window_fits(kueue_cluster: E2ECluster) -> None:
    c = kueue_cluster
    ns = c.new_namespace("kueue")
    c.apply(_queues(ns))
    c.wait_for("offpeak to mark its AdmissionCheck Active", lambda: any(
        cond["type"] == "Active" and cond["status"] == "True"
        for cond in (c.get("admissionchecks.kueue.x-k8s.io", CHECK).get("status") or {}).get("conditions") or ()),
        timeout=30)
    # submit early in the busy part of the day, when every GPU is online work's
    c.wait_for("the busy part of the day", lambda: 5.0 <= _day_phase(c) < 20.0, timeout=DAY + 10, interval=0.5)
    submitted = time.time()
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(_job("nightly")))

    def annotations() -> dict[str, str]:
        return dict(c.get("job", "-n", ns, "nightly")["metadata"].get("annotations") or {})

    c.wait_for("the Job predicted", lambda: annotations().get("offpeak.io/state", "").startswith("Predicted"),
               timeout=60)
    assert f"Kueue queue {QUEUE} admits it" in annotations()["offpeak.io/state"]
    c.wait_for("offpeak's check asked and answered Pending", lambda: bool(
        (s := _check_state(c, ns)) and s["state"] == "Pending" and s["message"]), timeout=60)
    pending = _check_state(c, ns)
    assert pending is not None and pending["message"].startswith("no forecast idle window fits now"), pending
    assert _day_phase(c) < BUSY_UNTIL, "the check must be seen Pending while the GPUs are busy"
    assert c.get("job", "-n", ns, "nightly")["spec"]["suspend"] is True  # not admitted: nothing runs
    assert not c.pods(ns, "job-name=nightly")
    print(f"[e2e] +{time.time() - submitted:.0f}s check Pending: {pending['message']}", flush=True)
    shown = subprocess.run([*offpeak_argv(), "jobs", "-n", ns, "--kubeconfig", str(c.kubeconfig)],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "400"})
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "job/nightly" in line)
    assert "Queued" in row and f"Kueue {QUEUE}" in row, shown.stdout  # `offpeak jobs` shows it with the reason
    assert f"Kueue check {CHECK} Pending: no forecast idle window fits now" in shown.stdout, shown.stdout

    c.wait_for("Kueue to admit and unsuspend the Job", lambda: c.get("job", "-n", ns, "nightly")["spec"]
               .get("suspend") is False, timeout=DAY)  # fmt: skip
    admitted = time.time()
    phase = (admitted - float(c.state.urls["reference"])) % DAY
    ready = _check_state(c, ns)
    assert ready is not None and ready["state"] == "Ready", ready
    assert ready["message"].startswith("a forecast idle window fits"), ready
    print(f"[e2e] +{admitted - submitted:.0f}s admitted at day phase {phase:.0f}s: {ready['message']}", flush=True)
    assert BUSY_UNTIL - 5 <= phase < DAY - 30, phase  # in the idle window, not before it opened
    workload = c.get("workloads.kueue.x-k8s.io", "-n", ns)["items"][0]
    conditions = {cond["type"]: cond["status"] for cond in workload["status"]["conditions"]}
    assert conditions.get("Admitted") == "True", conditions

    c.kubectl("-n", ns, "wait", "--for=condition=Complete", "job/nightly", "--timeout=120s", timeout=130)
    (pod,) = c.pods(ns, "job-name=nightly")
    assert pod["spec"]["nodeName"] in NODES
    started = parse_timestamp(pod["status"]["startTime"])
    assert started >= admitted - 2, (started, admitted)
    events = c.get("events", "-n", ns, "--field-selector", f"involvedObject.name={pod['metadata']['name']}")
    scheduled = [e for e in events["items"] if e["reason"] == "Scheduled"]
    assert (scheduled[0].get("reportingComponent") or scheduled[0]["source"].get("component")) == "offpeak-scheduler"
