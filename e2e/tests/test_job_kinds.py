"""Lane `kinds`: a labelled Kubeflow PyTorchJob, and a labelled batch/v1 Job, are predicted, placed only where
offpeak allows, evicted when online work returns, and finish once their GPUs are free again.

The lane has an A100 node and an H100 node, online load only as the test sets it. training-operator v1.8.1 runs in the
shared cluster as built from its Go module (`offpeak_e2e.kubeflow`), its PyTorchJob CRD installed from the module's
published manifest, and offpeak's operator watches PyTorchJobs (`OFFPEAK_PYTORCH_JOBS`). The job (a Master and a
Worker of 2 GPUs each, A100 only) is created suspended; offpeak predicts it, writes the prediction (and the gang of
both replicas) into both replica templates and lifts the suspension; training-operator makes the pods and
offpeak-scheduler places them, all or none, on the A100 node. Online work then fills that node: the evictor evicts both pods, training-operator makes them again, and
they wait (the H100 node is free, but not a GPU type the job allows) until the online work leaves; then the job
succeeds and offpeak records how long it took. A batch/v1 Job goes the same way, its evicted pod replaced by the
Job controller (an eviction counts against its backoffLimit here: under kwok an evicted pod never turns Failed, so
the `podFailurePolicy` docs/trainingjob.md suggests, which waits for that, would hold the replacement back).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from offpeak_e2e import kubeflow
from offpeak_e2e.controlplane import StartError
from offpeak_e2e.harness import E2ECluster, offline_job_manifest, offline_template
from offpeak_e2e.lanes import A100, H100, KINDS


TYPES = (A100, H100)
POD_LABEL = "training.kubeflow.org/job-name=ddp"


@pytest.fixture(scope="module")
def pytorch_cluster(e2e_cluster: E2ECluster) -> Iterator[E2ECluster]:
    """The shared cluster once its training-operator is ready (its certificates take up to a minute); the lane's
    nodes without online work afterwards."""
    try:
        kubeflow.wait_ready(e2e_cluster.cluster.sup, kubeconfig=e2e_cluster.kubeconfig,
                            url=e2e_cluster.state.urls["training-operator"])
    except StartError as e:
        pytest.fail(f"training-operator did not start: {e}", pytrace=False)
    yield e2e_cluster
    for node in KINDS.nodes:
        e2e_cluster.scale_online(node, 0)


def _pytorch_job() -> dict[str, Any]:
    def replica(annotations: dict[str, str]) -> dict[str, Any]:
        template = offline_template(gpus=2, container="pytorch", image="registry.local/offpeak-e2e/ddp:1", lane=KINDS,
                                    restart_policy=None,  # the replica's restartPolicy, below
                                    annotations={"offpeak.io/sim-runtime": "40000ms", **annotations})
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": template}

    said = {"offpeak.io/batch-size": "16", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "20",
            "offpeak.io/gpu-types": TYPES[0]}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
        "spec": {"runPolicy": {"suspend": True},
                 "pytorchReplicaSpecs": {"Master": replica(said), "Worker": replica({})}},
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_labelled_pytorchjob_is_predicted_placed_evicted_and_finishes(pytorch_cluster: E2ECluster) -> None:
    c = pytorch_cluster
    ns = c.new_namespace("ddp")
    a100, h100 = KINDS.node_of_type(TYPES[0]), KINDS.node_of_type(TYPES[1])
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(_pytorch_job()))

    def job() -> dict[str, Any]:
        return c.get("pytorchjob", "-n", ns, "ddp")

    def state() -> str:
        return str(job()["metadata"].get("annotations", {}).get("offpeak.io/state", ""))

    c.wait_for("the PyTorchJob predicted and unsuspended", lambda: state().startswith("Predicted"), timeout=90)
    seen = job()
    assert seen["spec"]["runPolicy"]["suspend"] is False
    for replica in ("Master", "Worker"):
        template = seen["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert set(json.loads(template["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])) == {TYPES[0]}

    def bound() -> list[dict[str, Any]]:
        return [p for p in c.pods(ns, POD_LABEL) if p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]

    c.wait_for("both replicas running", lambda: len(bound()) == 2, timeout=60)
    first = bound()
    assert {p["spec"]["nodeName"] for p in first} == {a100}  # the allowed GPU type only
    for pod in first:
        assert pod["metadata"]["annotations"].get("offpeak.io/predicted-job-seconds")
        # one gang: the extender placed the two replicas all or none
        assert pod["metadata"]["labels"].get("offpeak.io/gang") == "ddp"
        assert pod["metadata"]["annotations"].get("offpeak.io/gang-size") == "2"
        events = c.get("events", "-n", ns, "--field-selector", f"involvedObject.name={pod['metadata']['name']}")
        scheduled = [e for e in events["items"] if e["reason"] == "Scheduled"]
        assert (scheduled[0].get("reportingComponent") or scheduled[0]["source"].get("component")) == \
            "offpeak-scheduler"  # fmt: skip
    uids = {p["metadata"]["uid"] for p in first}

    t = time.monotonic()
    c.scale_online(a100, 8)  # online work wants the whole A100 node back
    try:
        c.wait_for("both replicas evicted", lambda: not ({p["metadata"]["uid"] for p in bound()} & uids),
                   timeout=60, interval=0.5)
        print(f"[e2e] online surge -> replicas evicted in {time.monotonic() - t:.1f}s", flush=True)
        c.wait_for("training-operator to make the replicas again", lambda: len([
            p for p in c.pods(ns, POD_LABEL) if p["metadata"]["uid"] not in uids
            and not p["metadata"].get("deletionTimestamp")]) >= 1, timeout=60)  # fmt: skip
        time.sleep(10)
        waiting = [p for p in c.pods(ns, POD_LABEL) if p["metadata"]["uid"] not in uids]
        assert all(p["spec"].get("nodeName") in (None, a100) for p in waiting), waiting  # never on the H100
        assert not [p for p in waiting if p["spec"].get("nodeName") == h100]
    finally:
        c.scale_online(a100, 0)
    t = time.monotonic()
    # the evicted replicas wait for the extender's view of the node to clear (the live online demand it held) and
    # for offpeak-scheduler's next try (within --pod-max-in-unschedulable-pods-duration + 30 s), then run 40 s
    c.wait_for("the PyTorchJob's ending recorded", lambda: state().startswith(("Finished", "Invalid")), timeout=300)
    print(f"[e2e] online work left -> job finished in {time.monotonic() - t:.0f}s", flush=True)
    assert "succeeded in" in state(), state()
    conditions = {cond["type"]: cond["status"] for cond in job()["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True", conditions


def _batch_job() -> dict[str, Any]:
    return offline_job_manifest("nightly", template=offline_template(gpus=4, lane=KINDS, annotations={
        "offpeak.io/batch-size": "32", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "20",
        "offpeak.io/gpu-types": TYPES[0], "offpeak.io/sim-runtime": "40000ms"}))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_labelled_batch_job_is_evicted_replaced_and_finishes(pytorch_cluster: E2ECluster) -> None:
    c = pytorch_cluster
    ns = c.new_namespace("nightly")
    a100 = KINDS.node_of_type(TYPES[0])
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(_batch_job()))

    def state() -> str:
        return str(c.get("job", "-n", ns, "nightly")["metadata"].get("annotations", {}).get("offpeak.io/state", ""))

    def running() -> list[dict[str, Any]]:
        return [p for p in c.pods(ns, "job-name=nightly") if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]

    c.wait_for("the Job predicted and its pod running", lambda: state().startswith("Predicted") and running(),
               timeout=90)
    (first,) = running()
    assert first["spec"]["nodeName"] == a100
    c.scale_online(a100, 8)
    try:
        c.wait_for("the Job's pod evicted", lambda: first["metadata"]["uid"] not in {
            p["metadata"]["uid"] for p in running()}, timeout=60, interval=0.5)  # fmt: skip
        c.wait_for("the Job controller to make a new pod", lambda: any(
            p["metadata"]["uid"] != first["metadata"]["uid"] for p in c.pods(ns, "job-name=nightly")), timeout=60)
    finally:
        c.scale_online(a100, 0)
    c.kubectl("-n", ns, "wait", "--for=condition=Complete", "job/nightly", "--timeout=300s", timeout=310)
    c.wait_for("the Job's ending recorded", lambda: state().startswith("Finished"), timeout=60)
    assert "succeeded in" in state(), state()
    (done,) = [p for p in c.pods(ns, "job-name=nightly") if p["status"].get("phase") == "Succeeded"]
    assert done["metadata"]["uid"] != first["metadata"]["uid"]  # the replacement did the work (the evicted pod is gone)
    assert done["spec"]["nodeName"] == a100
