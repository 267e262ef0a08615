"""Lane `elastic`: an elastic job (2 workers, `minWorkers: 1`) starts on the one node with room instead of waiting for
both, its second worker joins when online work leaves the other node, and the job succeeds with both; and an elastic
job that loses a worker to online work goes on with the other in the same attempt (issue 18: run on the GPUs that
are idle now, resize at checkpoints)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.lanes import ELASTIC, L4, V100



@pytest.fixture
def online_reset(e2e_cluster: E2ECluster) -> Iterator[None]:
    yield
    for node in ELASTIC.nodes:
        e2e_cluster.scale_online(node, 0)
        e2e_cluster.kubectl("uncordon", node, check=False)


def test_an_elastic_job_starts_narrow_and_its_waiting_worker_joins_when_a_window_opens(
        e2e_cluster: E2ECluster, e2e_namespace: str, online_reset: None) -> None:
    ns = e2e_namespace
    first, other = ELASTIC.node_of_type(V100), ELASTIC.node_of_type(L4)
    e2e_cluster.scale_online(other, 8)  # the L4 node is full of online work: room for one 8-GPU worker, not two
    e2e_cluster.wait_for(f"8 online pods running on {other}", lambda: e2e_cluster.running_online(other) == 8,
                         timeout=60)

    job = trainingjob_manifest("stretch", sim_seconds=90, gpu_types=[V100, L4], estimated_seconds=60,
                               workers=2, lane=ELASTIC,
                               extra_spec={"gpusPerWorker": 8, "minWorkers": 1, "checkpointing": True})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    running = e2e_cluster.wait_phase(ns, "stretch", ["Running"], timeout=120)
    status = running["status"]
    assert status["runningWorkers"] == 1 and "1 of 2 workers" in status["message"], status
    pods = {p["metadata"]["labels"]["offpeak.io/worker"]: p
            for p in e2e_cluster.pods(ns, "offpeak.io/trainingjob=stretch,offpeak.io/workload=offline")}
    assert pods["0"]["spec"].get("nodeName") == first, pods["0"]["spec"]  # worker 0 hosts the rendezvous
    assert not pods["1"]["spec"].get("nodeName"), pods["1"]["spec"]  # worker 1 waits, and says why
    env = {e["name"]: e.get("value") for e in pods["0"]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "1:2" and "WORLD_SIZE" not in env, env
    print(f"[e2e] elastic job runs on 1 of 2 workers: {status['message']}")

    e2e_cluster.scale_online(other, 0)  # the L4 node frees up: worker 1 finds a window and joins

    def joined() -> bool:
        return e2e_cluster.trainingjob(ns, "stretch")["status"].get("runningWorkers") == 2

    took = e2e_cluster.wait_for("worker 1 joined", joined, timeout=90)
    print(f"[e2e] worker 1 joined after {took:.0f}s")
    worker1 = e2e_cluster.kubectl("-n", ns, "get", "pod", pods["1"]["metadata"]["name"], "-o", "json").stdout
    assert json.loads(worker1)["spec"]["nodeName"] == other

    final = e2e_cluster.wait_phase(ns, "stretch", ["Succeeded", "Failed"], timeout=240)["status"]
    assert final["phase"] == "Succeeded" and final["attempts"] == 1, final
    assert "not compared with the full-width prediction" in final["message"], final


def test_an_elastic_job_that_loses_a_worker_goes_on_narrower_in_the_same_attempt(
        e2e_cluster: E2ECluster, e2e_namespace: str, online_reset: None) -> None:
    """Both workers run; online work comes back to worker 1's node and the evictor takes its GPUs. The attempt is not
    requeued: worker 0 goes on alone (torchrun restarts it narrower), worker 1's pod is made again and waits.

    Worker 1 is made to land on the L4 node (cordoned until worker 0 runs on the V100 node): the online work that
    comes back leaves its node short-windowed in the extender's forecast for a while."""
    ns = e2e_namespace
    first, other = ELASTIC.node_of_type(V100), ELASTIC.node_of_type(L4)
    e2e_cluster.kubectl("cordon", other)
    job = trainingjob_manifest("shrink", sim_seconds=150, gpu_types=[V100, L4], estimated_seconds=60,
                               workers=2, lane=ELASTIC,
                               extra_spec={"gpusPerWorker": 8, "minWorkers": 1, "checkpointing": True})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    e2e_cluster.wait_phase(ns, "shrink", ["Running"], timeout=120)
    e2e_cluster.kubectl("uncordon", other)

    def both_running() -> bool:
        return e2e_cluster.trainingjob(ns, "shrink")["status"].get("runningWorkers") == 2

    e2e_cluster.wait_for("both workers running", both_running, timeout=120)
    selector = "offpeak.io/trainingjob=shrink,offpeak.io/workload=offline"
    pods = {p["metadata"]["labels"]["offpeak.io/worker"]: p for p in e2e_cluster.pods(ns, selector)}
    assert (pods["0"]["spec"]["nodeName"], pods["1"]["spec"]["nodeName"]) == (first, other), pods
    node, lost_uid = other, pods["1"]["metadata"]["uid"]
    e2e_cluster.scale_online(node, 8)  # online work returns to worker 1's node: the evictor frees its 8 GPUs

    def narrowed() -> bool:
        status = e2e_cluster.trainingjob(ns, "shrink")["status"]
        again = [p for p in e2e_cluster.pods(ns, selector) if p["metadata"]["labels"]["offpeak.io/worker"] == "1"
                 and p["metadata"]["uid"] != lost_uid]
        return status.get("narrowedAttempt") == 1 and bool(again) and status.get("attempts") == 1

    took = e2e_cluster.wait_for("the attempt going on with worker 0 and worker 1's pod made again", narrowed,
                                timeout=120)
    status = e2e_cluster.trainingjob(ns, "shrink")["status"]
    print(f"[e2e] narrowed after {took:.0f}s: {status['message']}")
    assert status["phase"] == "Running", status
    e2e_cluster.wait_for(f"8 online pods running on {node}", lambda: e2e_cluster.running_online(node) == 8,
                         timeout=90)
    events = e2e_cluster.kubectl("-n", ns, "get", "events", "--field-selector", "reason=Narrowed", "-o",
                                 "json").stdout
    assert any("going on with 1 of 2 workers" in e["message"] for e in json.loads(events)["items"]), events
    # The online work leaves again at once: the forecast learns every second of it (a day is compressed into 10
    # minutes here), and later scenarios count on the L4 node having long windows.
    e2e_cluster.scale_online(node, 0)

    final = e2e_cluster.wait_phase(ns, "shrink", ["Succeeded", "Failed"], timeout=300)["status"]
    assert final["phase"] == "Succeeded" and final["attempts"] == 1, final  # no attempt was used up
    e2e_cluster.wait_for("no worker left waiting", lambda: not [
        p for p in e2e_cluster.pods(ns, selector) if p["status"].get("phase") == "Pending"], timeout=60)
