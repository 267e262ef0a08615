"""Lane `kueue`: a Kueue-queued Job is admitted only once a forecast idle window fits it.

The lane's two GPU nodes' online load follows a plan over the 240 s "day" (4 past days backfilled into
Prometheus): every GPU busy with online work for the first 70 s of each day, idle for the rest. Kueue's controller
runs in the shared cluster as built from its Go module (`offpeak_e2e.kueue`), with its CRDs; the extender answers
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
from typing import Any

import pytest

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e.cluster import offpeak_argv
from offpeak_e2e.harness import E2ECluster, offline_job_manifest, offline_template
from offpeak_e2e.lanes import A100, DAY, H100, KUEUE


assert KUEUE.idle is not None
BUSY_UNTIL = KUEUE.idle[0][0]  # seconds into each day when online work leaves the GPUs
TYPES = (A100, H100)
NODES = KUEUE.nodes
CHECK, QUEUE = "offpeak-window", "team"


def _queues(ns: str) -> list[dict[str, Any]]:
    gpu_quota = [{"name": r, "nominalQuota": q} for r, q in (("cpu", "1000"), ("memory", "10Ti"),
                                                               ("nvidia.com/gpu", "64"))]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
         "spec": {"controllerName": "offpeak.io/window-fit"}},
        # the flavor's node labels (the lane's nodes) are where Kueue puts the pods, and what the check judges
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "gpu-nodes"},
         "spec": {"nodeLabels": KUEUE.node_selector}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "offline"},
         "spec": {"namespaceSelector": {}, "admissionChecks": [CHECK], "resourceGroups": [
             {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
              "flavors": [{"name": "gpu-nodes", "resources": gpu_quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": ns},
         "spec": {"clusterQueue": "offline"}},
    ]


def _job(name: str) -> dict[str, Any]:
    template = offline_template(gpus=2, requests={"cpu": "1", "memory": "1Gi"}, lane=KUEUE, annotations={
        "offpeak.io/batch-size": "32", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "30",
        "offpeak.io/gpu-types": ",".join(TYPES), "offpeak.io/sim-runtime": "5000ms"})
    return offline_job_manifest(name, template=template, labels={"kueue.x-k8s.io/queue-name": QUEUE})


def _check_state(c: E2ECluster, ns: str) -> dict[str, Any] | None:
    items = c.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    for wl in items:
        for check in (wl.get("status") or {}).get("admissionChecks") or ():
            if check["name"] == CHECK:
                return dict(check)
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_kueue_queued_job_is_admitted_only_once_a_forecast_window_fits(e2e_cluster: E2ECluster,
                                                                         e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    c.apply(_queues(ns))
    c.wait_for("offpeak to mark its AdmissionCheck Active", lambda: any(
        cond["type"] == "Active" and cond["status"] == "True"
        for cond in (c.get("admissionchecks.kueue.x-k8s.io", CHECK).get("status") or {}).get("conditions") or ()),
        timeout=30)
    # submit early in the busy part of the day, when every GPU is online work's
    c.wait_lane_phase(KUEUE, 5, 40, what="the busy part of the day")
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
    assert c.lane_phase(KUEUE) < BUSY_UNTIL, "the check must be seen Pending while the GPUs are busy"
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
    phase = c.lane_phase(KUEUE)
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
