"""Lane `jobs`: TrainingJobs as real teams run them, on the real control plane.

Two workers get a torchrun rendezvous through their
headless Service and are placed together or not at all (gang); a job written as a pod template with a checkpoint
claim is stopped on one node and resumes on another from the checkpoint it reported, mounting the same claim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e.harness import E2ECluster, offline_job_manifest, offline_template, trainingjob_manifest
from offpeak_e2e.lanes import H100, JOBS, V100



def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


# Nodes are taken out with `kubectl cordon` rather than online load: the extender's forecast rightly keeps a
# node that was just busy short-windowed for a while, which would blur what these tests look at.
FIRST, SECOND = V100, H100


@pytest.fixture
def uncordon_all(e2e_cluster: E2ECluster) -> Iterator[None]:
    yield
    for node in JOBS.nodes:
        e2e_cluster.kubectl("uncordon", node, check=False)


def test_two_workers_rendezvous_and_are_placed_together_or_not_at_all(
        e2e_cluster: E2ECluster, e2e_namespace: str, uncordon_all: None) -> None:
    ns = e2e_namespace
    # a gang runs on one GPU type (it steps at its slowest worker's pace): the lane's two nodes of the first type
    first, second = JOBS.nodes_of_type(FIRST)
    e2e_cluster.kubectl("cordon", second)  # only one node of the allowed type: room for one worker of two
    job = trainingjob_manifest("gang", sim_seconds=20, gpu_types=[FIRST], estimated_seconds=40, workers=2,
                               lane=JOBS, extra_spec={"gpusPerWorker": 8})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    selector = "offpeak.io/trainingjob=gang,offpeak.io/role=training"
    e2e_cluster.wait_for("both workers created", lambda: len(e2e_cluster.pods(ns, selector)) == 2, timeout=120)

    service = e2e_cluster.get("service", "-n", ns, "gang-workers")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"offpeak.io/trainingjob": "gang", "offpeak.io/role": "training"}
    pods = sorted(e2e_cluster.pods(ns, selector), key=lambda p: p["metadata"]["name"])
    master = f"gang-w0.gang-workers.{ns}.svc"
    for rank, pod in enumerate(pods):
        env = _env(pod)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"],
                env["LOCAL_WORLD_SIZE"]) == (master, "29500", "16", str(8 * rank), str(rank), "8"), env
        assert pod["spec"]["hostname"] == f"gang-w{rank}" and pod["spec"]["subdomain"] == "gang-workers"

    # one node free for a gang of two: neither worker is bound, for the whole wait, and the job says why
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        bound = [p["metadata"]["name"] for p in e2e_cluster.pods(ns, selector) if p["spec"].get("nodeName")]
        assert not bound, f"partial placement: {bound} bound while the gang cannot fit"
        time.sleep(1)
    said = [c.get("message", "") for p in e2e_cluster.pods(ns, selector)
            for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
    assert any("gang of 2" in m for m in said), said
    waiting = e2e_cluster.trainingjob(ns, "gang")["status"]
    assert waiting["phase"] == "Waiting" and waiting["reason"] == "Unschedulable", waiting
    assert "gang of 2" in waiting["message"], waiting["message"]
    # ... and so do the user's commands, in human units
    cli = [sys.executable, "-m", "offpeak"]
    kubeconfig = ["--kubeconfig", str(e2e_cluster.kubeconfig), "-n", ns]
    listing = subprocess.run([*cli, "jobs", *kubeconfig], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "200"})
    assert listing.returncode == 0, listing.stderr
    assert "gang" in listing.stdout and "Unschedulable" in listing.stdout and "2x8 on" in listing.stdout, listing.stdout
    explained = subprocess.run([*cli, "explain", "gang", *kubeconfig], capture_output=True, text=True, timeout=60)
    assert explained.returncode == 0, explained.stderr
    assert "Pod gang-a1-w0: Pending" in explained.stdout and "  1 gang of 2 worker(s)" in explained.stdout, \
        explained.stdout
    missing = subprocess.run([*cli, "explain", "no-such-job", *kubeconfig], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "not found" in missing.stderr, missing

    t = time.monotonic()
    e2e_cluster.kubectl("uncordon", second)  # a second node frees up: both workers start together
    e2e_cluster.wait_phase(ns, "gang", ["Running"], timeout=120)
    placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in e2e_cluster.pods(ns, selector)}
    print(f"[e2e] gang placed {time.monotonic() - t:.1f}s after the second node freed up: {placed}")
    assert set(placed.values()) == {first, second}, placed
    done = e2e_cluster.wait_phase(ns, "gang", ["Succeeded", "Failed"], timeout=150)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_a_template_job_resumes_on_another_node_from_its_reported_checkpoint_on_the_same_claim(
        e2e_cluster: E2ECluster, e2e_namespace: str, uncordon_all: None) -> None:
    ns = e2e_namespace
    first, second = JOBS.node_of_type(FIRST), JOBS.node_of_type(SECOND)
    pv = f"ckpt-{ns}"
    e2e_cluster.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                       "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                "storageClassName": "", "hostPath": {"path": f"/tmp/{pv}"},
                                "persistentVolumeReclaimPolicy": "Delete"}})
    e2e_cluster.kubectl("-n", ns, "create", "configmap", "train-config", "--from-literal=lr=0.1")
    # what the fake training code reports when stopped: 130 steps done, the last checkpoint at step 120
    report = {"offpeak_progress": 1, "steps": 130, "attempt_steps": 130, "step_seconds": 0.1,
              "startup_seconds": 2.0, "checkpoint_steps": 120}
    template = {
        # the fake code takes 100 ms a step and runs the steps its attempt has left (300, then 300 - 120)
        "metadata": {"labels": {"team": "vision"},
                     "annotations": {"offpeak.io/sim-runtime": "30000ms", "offpeak.io/sim-step-ms": "100",
                                     "offpeak.io/sim-progress": json.dumps(report)}},
        "spec": {
            "nodeSelector": dict(JOBS.node_selector),
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
            "volumes": [{"name": "config", "configMap": {"name": "train-config"}}],
            "containers": [{"name": "trainer", "image": "registry.local/offpeak-e2e/train:1",
                            "command": ["python", "train.py"],
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/train"}]}],
        },
    }
    checkpoint = {"claimTemplate": {"spec": {"volumeName": pv, "storageClassName": "", "accessModes": ["ReadWriteOnce"],
                                             "resources": {"requests": {"storage": "1Gi"}}}},
                  "path": "/ckpt", "intervalSeconds": 30, "gracePeriodSeconds": 20}
    job = trainingjob_manifest("resume", sim_seconds=30, gpu_types=[FIRST, SECOND], estimated_seconds=60, steps=300,
                               lane=JOBS)
    spec = job["spec"]
    for key in ("image", "command", "podAnnotations", "nodeSelector"):  # the template says them
        spec.pop(key)
    spec.update(template=template, checkpoint=checkpoint, gpusPerWorker=4)
    e2e_cluster.kubectl("cordon", second)  # the first attempt lands on the first node
    e2e_cluster.kubectl("cordon", JOBS.nodes_of_type(FIRST)[1])  # (the lane's other node of its type stays out)
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    running = e2e_cluster.wait_phase(ns, "resume", ["Running", "Failed"], timeout=120)["status"]
    assert running["phase"] == "Running" and running["node"] == first, running
    claim = e2e_cluster.get("pvc", "-n", ns, "resume-checkpoint")
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    (pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=resume,offpeak.io/role=training")
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000 and pod["metadata"]["labels"]["team"] == "vision"
    assert {"name": "offpeak-checkpoint", "mountPath": "/ckpt"} in pod["spec"]["containers"][0]["volumeMounts"]
    assert _env(pod)["OFFPEAK_CHECKPOINT_DIR"] == "/ckpt" and pod["spec"]["terminationGracePeriodSeconds"] == 20

    # the first node goes away for offline work, the second frees up; the job's pod is stopped (SIGTERM: it
    # saves and reports)
    e2e_cluster.kubectl("cordon", first)
    e2e_cluster.kubectl("uncordon", second)
    e2e_cluster.kubectl("-n", ns, "delete", "pod", pod["metadata"]["name"], "--wait=false")
    def requeued() -> bool:
        status = e2e_cluster.trainingjob(ns, "resume")["status"]
        return status.get("phase") in ("Requeued", "Failed") or int(status.get("attempts") or 0) >= 2

    e2e_cluster.wait_for("the stopped attempt requeued", requeued, timeout=60)
    status = e2e_cluster.trainingjob(ns, "resume")["status"]
    assert status["completedSteps"] == report["checkpoint_steps"], status  # from its report, not an estimate
    lost_seconds = (report["steps"] - report["checkpoint_steps"]) * report["step_seconds"]
    assert lost_seconds <= checkpoint["intervalSeconds"]
    assert any(m.get("source") == "progress" for m in status.get("measurements") or []), status

    resumed = e2e_cluster.wait_phase(ns, "resume", ["Running", "Failed"], timeout=120)["status"]
    assert resumed["phase"] == "Running" and resumed["node"] == second and resumed["attempts"] == 2, resumed
    (second,) = [p for p in e2e_cluster.pods(ns, "offpeak.io/trainingjob=resume,offpeak.io/role=training")
                 if p["metadata"]["labels"]["offpeak.io/attempt"] == "2"]
    assert _env(second)["OFFPEAK_COMPLETED_STEPS"] == "120"
    volumes = {v["name"]: v for v in second["spec"]["volumes"]}
    assert volumes["offpeak-checkpoint"]["persistentVolumeClaim"]["claimName"] == "resume-checkpoint"
    remaining = json.loads(second["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    assert remaining[SECOND]["p50"] < 60, remaining  # the work left, not the whole job again
    done = e2e_cluster.wait_phase(ns, "resume", ["Succeeded", "Failed"], timeout=120)["status"]
    assert done["phase"] == "Succeeded", done
    # the resumed attempt ran the 180 steps left (18 s), not the whole job's 30 s again
    (ended,) = [p for p in e2e_cluster.pods(ns, "offpeak.io/trainingjob=resume,offpeak.io/role=training")
                if p["metadata"]["labels"]["offpeak.io/attempt"] == "2"]
    ran = ended["status"]["containerStatuses"][0]["state"]["terminated"]
    seconds = parse_timestamp(ran["finishedAt"]) - parse_timestamp(ran["startedAt"])
    assert 16 <= seconds <= 22, (seconds, ran)
    e2e_cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


def test_a_labelled_batch_job_is_predicted_unsuspended_placed_and_recorded(
        e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    ns = e2e_namespace
    job = offline_job_manifest("nightly", template=offline_template(gpus=2, lane=JOBS, annotations={
        "offpeak.io/batch-size": "32", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "20",
        "offpeak.io/gpu-types": FIRST, "offpeak.io/sim-runtime": "3000ms"}))
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))

    def state() -> str:
        return str(e2e_cluster.get("job", "-n", ns, "nightly")["metadata"].get("annotations", {})
                   .get("offpeak.io/state", ""))

    e2e_cluster.wait_for("the Job predicted and unsuspended", lambda: state().startswith("Predicted"), timeout=90)
    seen = e2e_cluster.get("job", "-n", ns, "nightly")
    assert seen["spec"]["suspend"] is False
    template = seen["spec"]["template"]
    remaining = json.loads(template["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    assert set(remaining) == {FIRST} and remaining[FIRST]["p50"] == 20.0, remaining
    assert template["metadata"]["labels"]["offpeak.io/workload"] == "offline"
    e2e_cluster.kubectl("-n", ns, "wait", "--for=condition=Complete", "job/nightly", "--timeout=120s", timeout=130)
    (pod,) = e2e_cluster.pods(ns, "job-name=nightly")
    node = e2e_cluster.get("node", pod["spec"]["nodeName"])
    assert node_gpu_type(node["metadata"]["labels"]) == FIRST  # placed by offpeak on an allowed GPU type
    scheduled = [e for e in e2e_cluster.get("events", "-n", ns, "--field-selector",
                                            f"involvedObject.name={pod['metadata']['name']}")["items"]
                 if e["reason"] == "Scheduled"]
    assert (scheduled[0].get("reportingComponent") or scheduled[0]["source"].get("component")) == "offpeak-scheduler"
    e2e_cluster.wait_for("the Job's ending recorded", lambda: state().startswith("Finished"), timeout=60)
    assert "succeeded in" in state()
    sample = e2e_cluster.get("job", "-n", ns, "nightly")["metadata"]["annotations"].get("offpeak.io/sample", "")
    assert sample.startswith("not sent: the Job has no model graph"), sample  # an estimate teaches the model nothing

    def reasons() -> set[str]:
        return {e["reason"] for e in e2e_cluster.get("events", "-n", ns, "--field-selector",
                                                     "involvedObject.name=nightly")["items"]}

    # the Event follows the annotation it repeats (both are the operator's; the Event is posted second)
    e2e_cluster.wait_for("the Job's Predicted and Succeeded Events", lambda: {"Predicted", "Succeeded"} <= reasons(),
                         timeout=30)

    # a Job that cannot be predicted stays suspended and says why
    bad = json.loads(json.dumps(job))
    bad["metadata"]["name"] = "nightly-bad"
    bad["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(bad))
    e2e_cluster.wait_for("the bad Job marked Invalid", lambda: str(
        e2e_cluster.get("job", "-n", ns, "nightly-bad")["metadata"].get("annotations", {})
        .get("offpeak.io/state", "")).startswith("Invalid"), timeout=60)
    assert e2e_cluster.get("job", "-n", ns, "nightly-bad")["spec"]["suspend"] is True
    assert not e2e_cluster.pods(ns, "job-name=nightly-bad")
