"""Lane `surge`: an online surge on a node evicts its offline pods within the grace period; the TrainingJob is
Requeued and later finishes on another node. When the node holds more offline work than the surge needs back, the
pod that loses least goes, a gang worker counting the work of its whole gang (evicting it stops every worker)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e.daywindows import extender_window
from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.kube import KubeError
from offpeak_e2e.lanes import SURGE, V100



WINDOW_NEEDED_S = 180  # each job's p90 x the margin (~2 min), and the scenario's own minute before the surge


@pytest.fixture
def online_reset(e2e_cluster: E2ECluster) -> Iterator[None]:
    yield
    for node in SURGE.nodes:
        e2e_cluster.scale_online(node, 0)


def test_surge_evicts_a_lone_pod_before_a_gang_worker_that_risks_more_work(
        e2e_cluster: E2ECluster, e2e_namespace: str, online_reset: None) -> None:
    ns = e2e_namespace
    first, other = SURGE.nodes  # two V100 nodes: a gang runs on one GPU type
    # 4 GPUs free there: room for one worker of the pair below, not both. A pod of no workload holds the other 4,
    # not online pods: online demand rising above the forecast closes the node's window (a surprise), and whether
    # it is one depends on what the earlier scenarios left in the node's history at this time of the "day".
    e2e_cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": ns},
                       "spec": {"nodeName": other, "containers": [{"name": "hold", "image": "registry.local/hold:1",
                                "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}})
    e2e_cluster.wait_for(f"a pod holding 4 GPUs running on {other}", lambda: e2e_cluster.get(
        "-n", ns, "pod", "holder").get("status", {}).get("phase") == "Running", timeout=60)

    # Both jobs need ~2 min windows (p90 x the margin); the replayed history makes some stretches of this cluster's
    # "day" busier, so start where both nodes' forecasts show a window for 4 GPUs well past the scenario's end.
    def wait_for_windows(when: str) -> None:
        def windows_left() -> dict[str, float]:
            return {n: extender_window(e2e_cluster, n, gpus=4) for n in (first, other)}

        e2e_cluster.wait_for(f"4-GPU windows of {WINDOW_NEEDED_S}s+ on {first} and {other}{when}",
                             lambda: min(windows_left().values()) >= WINDOW_NEEDED_S,
                             timeout=e2e_cluster.cluster.settings.day_seconds + 30, interval=2)
        print(f"[e2e] windows left (s){when}: {windows_left()}")

    wait_for_windows("")

    # The lone job runs far longer than it says (it must still be running at the surge, however long the pair
    # waits for its window below); it asks for a ~2 min window all the same.
    lone = trainingjob_manifest("lone", sim_seconds=1800, gpu_types=[V100], estimated_seconds=60, lane=SURGE,
                                extra_spec={"gpusPerWorker": 4, "checkpointing": True,
                                            "nodeSelector": {"kubernetes.io/hostname": first}})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(lone))
    e2e_cluster.wait_phase(ns, "lone", ["Running"], timeout=120)
    # The lone job's start took part of those windows (on a busy machine, most of one): wait again, so the pair's
    # second worker does not find a window about to end, then a next one more than its timeout away.
    wait_for_windows(" with the lone job running")
    pair = trainingjob_manifest("pair", sim_seconds=400, gpu_types=[V100], estimated_seconds=60, workers=2,
                                lane=SURGE, extra_spec={"gpusPerWorker": 4, "checkpointing": True})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(pair))
    e2e_cluster.wait_phase(ns, "pair", ["Running"], timeout=120)

    (lone_pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=lone,offpeak.io/workload=offline")
    workers = e2e_cluster.pods(ns, "offpeak.io/trainingjob=pair,offpeak.io/workload=offline")
    assert lone_pod["spec"]["nodeName"] == first
    assert sorted(w["spec"]["nodeName"] for w in workers) == sorted([first, other]), workers
    (worker_here,) = [w for w in workers if w["spec"]["nodeName"] == first]
    lone_start = parse_timestamp(lone_pod["status"]["startTime"])
    pair_start = min(parse_timestamp(w["status"]["startTime"]) for w in workers)
    assert lone_start is not None and pair_start is not None
    # The lone pod has run longer, so its own 4 GPUs hold more work than the worker's own 4; but the worker puts
    # the pair's 8 GPUs at risk. The lone pod loses less while it has run less than twice the pair's time: surge
    # once the pair has run 10 s longer than the head start the lone pod had (then lone = pair + head start <
    # 2 x pair).
    head_start = max(0.0, pair_start - lone_start)
    pause = pair_start + head_start + 10 - time.time()
    print(f"[e2e] lone pod's head start {head_start:.0f}s; surge in {max(0.0, pause):.0f}s")
    time.sleep(max(0.0, pause))

    e2e_cluster.scale_online(first, 4)  # 4 online + 4 (lone) + 4 (worker) > 8 GPUs: one offline pod must go

    def deleting(ns_name: str, pod_name: str) -> bool:
        p = e2e_cluster.kubectl("-n", ns_name, "get", "pod", pod_name, "-o", "json", check=False)
        return p.returncode != 0 or bool(json.loads(p.stdout)["metadata"].get("deletionTimestamp"))

    grace = e2e_cluster.cluster.settings.eviction_grace_s
    lone_name, worker_name = lone_pod["metadata"]["name"], worker_here["metadata"]["name"]
    e2e_cluster.wait_for(f"lone pod {lone_name} evicted", lambda: deleting(ns, lone_name), timeout=grace + 30,
                         interval=0.5)
    for _ in range(10):  # and the gang keeps running: nothing else was needed
        assert not deleting(ns, worker_name), f"gang worker {worker_name} was evicted as well"
        time.sleep(1)
    assert e2e_cluster.phase(ns, "pair") == "Running"
    reason = json.loads(e2e_cluster.kubectl("-n", ns, "get", "pod", lone_name, "-o", "json", check=False).stdout
                        or "{}").get("metadata", {}).get("annotations", {}).get("offpeak.io/eviction-reason", "")
    print(f"[e2e] evicted the lone pod, not the gang worker; reason: {reason or '(pod gone)'}")


def test_online_surge_evicts_and_requeues(e2e_cluster: E2ECluster, e2e_namespace: str, online_reset: None) -> None:
    ns = e2e_namespace
    grace = e2e_cluster.cluster.settings.eviction_grace_s
    first, other = SURGE.nodes
    e2e_cluster.scale_online(other, 8)  # the other node is full of online work, so the job lands on the first
    e2e_cluster.wait_for(f"8 online pods running on {other}", lambda: e2e_cluster.running_online(other) == 8,
                         timeout=60)

    job = trainingjob_manifest("surge", sim_seconds=60, gpu_types=[V100], estimated_seconds=60, lane=SURGE,
                               extra_spec={"gpusPerWorker": 4, "checkpointing": True})
    e2e_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    running = e2e_cluster.wait_phase(ns, "surge", ["Running"], timeout=120)
    assert running["status"]["node"] == first, running["status"]
    (pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=surge,offpeak.io/workload=offline")
    pod_name = pod["metadata"]["name"]

    t = time.monotonic()
    e2e_cluster.scale_online(first, 6)  # 6 online + 4 offline > 8 GPUs
    e2e_cluster.scale_online(other, 0)  # ... while the other node frees up

    def evicted() -> bool:
        p = e2e_cluster.kubectl("-n", ns, "get", "pod", pod_name, "-o", "json", check=False)
        if p.returncode != 0:
            return True
        return bool(json.loads(p.stdout)["metadata"].get("deletionTimestamp"))

    e2e_cluster.wait_for(f"offline pod {pod_name} evicted", evicted, timeout=grace + 30, interval=0.5)
    took = time.monotonic() - t
    print(f"[e2e] surge -> eviction: {took:.1f}s (grace {grace}s)")
    assert took <= grace + 30

    phases: list[str] = []

    def finished() -> bool:
        ph = e2e_cluster.phase(ns, "surge")
        if ph and (not phases or phases[-1] != ph):
            phases.append(ph)
        return ph in ("Succeeded", "Failed")

    try:
        e2e_cluster.wait_for("surge job finished after requeue", finished, timeout=240, interval=0.5)
    except KubeError as e:  # say where it got stuck
        status = e2e_cluster.trainingjob(ns, "surge").get("status")
        raise KubeError(f"{e}; phases seen: {phases}; status: {json.dumps(status)}") from e
    status = e2e_cluster.trainingjob(ns, "surge")["status"]
    print(f"[e2e] phases after eviction: {phases}")
    assert status["phase"] == "Succeeded", status
    assert status["attempts"] >= 2, status
    assert status["node"] == other, status  # finished elsewhere
