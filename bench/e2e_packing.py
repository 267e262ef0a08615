"""Packing into forecast idle windows, against the default scheduler in the same run (a benchmark: it prints what
each harvests; the end-to-end suite proves the window rule itself in its pool-window and Kueue lanes).

Its own cluster (`bench-packing`): online load ON, replaying the real serving trace with a 300 s "day" and 4 past
days backfilled into Prometheus, so the extender's forecaster sees the daily cycle. A batch of TrainingJobs of
different lengths (offpeak-scheduler) and a twin batch of plain pods with the same GPUs, runtimes and annotations
(default-scheduler) run side by side. Offpeak's placements must never sit in a window shorter than the job's p90
(checked against the replay plan, which is exactly what the forecaster learnt); both batches' harvested and
wasted GPU-seconds are printed and written to ``~/.cache/offpeak/results/``; it exits 1 if an offpeak placement
sat in a too-short window. Needs the control-plane binaries (built on first use: slow).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e import onlineload
from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import E2ECluster, results_file, trainingjob_manifest

DAY = 300.0
GPUS_PER_JOB = 2
RUNTIMES = (15, 25, 35, 45, 60, 75, 20, 40)


def _twin_pod(name: str, *, seconds: float, predicted: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "labels": {"offpeak.io/workload": "offline", "e2e/batch": "default"},
            "annotations": {"offpeak.io/sim-runtime": f"{int(seconds * 1000)}ms",
                            "offpeak.io/predicted-job-seconds": predicted, "offpeak.io/checkpointing": "false"},
        },
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "train", "image": "registry.local/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_JOB)}}}],
        },
    }


def _scheduled_times(c: E2ECluster, ns: str) -> dict[str, float]:
    """When the scheduler bound each pod, to the microsecond (its `Scheduled` event's eventTime).

    A pod's status.startTime is cut to whole seconds, and the replayed demand changes every ~6.6 s: a pod bound
    the moment an online pod left would seem to start up to a second earlier, while the plan still had it there.
    """
    bound: dict[str, float] = {}
    for ev in c.get("events.events.k8s.io", "-n", ns)["items"]:
        at = parse_timestamp(ev.get("eventTime"))
        name = (ev.get("regarding") or {}).get("name")
        if ev.get("reason") == "Scheduled" and name and at is not None:
            bound[name] = at
    return bound


def _window_violations(placements: list[dict[str, Any]], *, demand: dict[str, list[int]], reference: float,
                       gpus: int, bound: dict[str, float]) -> list[str]:
    """Placements during whose predicted p90, from the moment they were bound, the replayed online demand needs
    GPUs the pod holds."""
    bad = []
    for p in placements:
        start = bound.get(p["name"], p["start"])
        t, end = start, start + p["p90"]
        while t <= end:
            online = onlineload.demand_at(demand, p["node"], t=t, reference=reference, day_seconds=DAY)
            if online + GPUS_PER_JOB > gpus:
                before = onlineload.demand_at(demand, p["node"], t=start - 2.0, reference=reference, day_seconds=DAY)
                when = f"bound at {(start - reference) % DAY:.2f}s of the day" if p["name"] in bound else "no event"
                bad.append(f"{p['name']} on {p['node']} at +{t - start:.1f}s: online {online} ({when}, startTime "
                           f"{p['start'] - start:+.2f}s from it, online 2 s before {before})")
                break
            t += 1.0
    return bad


def _pod_p90(pod: dict[str, Any], gpu_type: str) -> float:
    predicted = json.loads(pod["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    return float(predicted[gpu_type]["p90"])


def run(c: E2ECluster) -> list[str]:
    """Both batches on the cluster; the offpeak placements that sat in a too-short window."""
    ns = c.new_namespace("pack")
    node_type = {n: str(node_gpu_type(c.get("node", n)["metadata"]["labels"])) for n in c.nodes}
    gpu_types = sorted(set(node_type.values()))
    reference = float(c.state.urls["reference"])
    demand = onlineload.load_plan(onlineload.LoadSettings(nodes=tuple(c.nodes), gpus=8, day_seconds=DAY))
    t0 = time.monotonic()
    for i, seconds in enumerate(RUNTIMES):
        job = trainingjob_manifest(f"pack-{i}", sim_seconds=seconds, gpu_types=gpu_types, torchvision=None,
                                   estimated_seconds=seconds, extra_spec={"gpusPerWorker": GPUS_PER_JOB,
                                                                          "maxAttempts": 5})
        c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
        predicted = json.dumps({t: {"p50": seconds, "p90": seconds * 1.2} for t in gpu_types})
        c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(_twin_pod(f"twin-{i}", seconds=seconds,
                                                                          predicted=predicted)))

    placements: dict[str, dict[str, Any]] = {}
    twins: dict[str, dict[str, Any]] = {}

    twin_names = {f"twin-{i}" for i in range(len(RUNTIMES))}

    def observe() -> bool:
        present = set()
        for pod in c.get("pods", "-n", ns)["items"]:
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            present.add(name)
            start = parse_timestamp(pod["status"].get("startTime"))
            labels = pod["metadata"].get("labels", {})
            if not node or start is None:
                continue
            rec = {"name": name, "node": node, "start": start, "gpu_type": node_type[node],
                   "deleting": bool(pod["metadata"].get("deletionTimestamp")), "phase": pod["status"]["phase"]}
            if labels.get("e2e/batch") == "default":
                twins[name] = {**twins.get(name, {}), **rec, "p90": _pod_p90(pod, node_type[node])}
            elif labels.get("offpeak.io/trainingjob"):
                placements[name] = {**placements.get(name, {}), **rec, "p90": _pod_p90(pod, node_type[node])}
        for name in twin_names - present:  # deleted: evicted unless it was seen finishing
            if twins.get(name, {}).get("phase") != "Succeeded":
                twins[name] = {**twins.get(name, {"name": name}), "phase": "Evicted"}
        jobs = c.get("trainingjobs.offpeak.io", "-n", ns)["items"]
        twins_done = all(twins.get(n, {}).get("phase") in ("Succeeded", "Failed", "Evicted") for n in twin_names)
        return all((j.get("status") or {}).get("phase") in ("Succeeded", "Failed") for j in jobs) and twins_done

    c.wait_for("both batches finished", observe, timeout=1200, interval=1.0)
    print(f"[e2e] packing batch: {time.monotonic() - t0:.1f}s")

    jobs = c.get("trainingjobs.offpeak.io", "-n", ns)["items"]
    offpeak_ok = sum(GPUS_PER_JOB * j["status"]["actualSeconds"] for j in jobs if j["status"]["phase"] == "Succeeded")
    attempts = sum(j["status"].get("attempts", 1) for j in jobs)
    twin_ok = sum(GPUS_PER_JOB * s for i, s in enumerate(RUNTIMES) if twins[f"twin-{i}"]["phase"] == "Succeeded")
    twin_evicted = sum(1 for t in twins.values() if t["phase"] != "Succeeded")
    result = {
        "offpeak": {"succeeded": sum(j["status"]["phase"] == "Succeeded" for j in jobs),
                    "gpu_seconds_harvested": offpeak_ok, "attempts": attempts,
                    "evictions": attempts - len(jobs)},
        "default_scheduler": {"succeeded": len(RUNTIMES) - twin_evicted, "gpu_seconds_harvested": twin_ok,
                              "evictions": twin_evicted},
    }
    print("[e2e] packing result:", json.dumps(result))
    results_file(c.state.name, "packing").write_text(json.dumps(result, indent=2))

    bound = _scheduled_times(c, ns)
    violations = _window_violations(list(placements.values()), demand=demand, reference=reference, gpus=8,
                                    bound=bound)
    placed_twins = [t for t in twins.values() if "node" in t]
    twin_violations = _window_violations(placed_twins, demand=demand, reference=reference, gpus=8, bound=bound)
    timed = sum(p in bound for p in [*placements, *(t["name"] for t in placed_twins)])
    print(f"[e2e] window violations: offpeak {len(violations)}, default scheduler {len(twin_violations)} "
          f"({timed} of {len(placements) + len(placed_twins)} placements timed by their Scheduled event)")
    failed = [j["metadata"]["name"] for j in jobs if j["status"]["phase"] != "Succeeded"]
    return violations + [f"{name} did not succeed" for name in failed]


def main() -> int:
    c = E2ECluster.start(ClusterSettings(
        control_plane=ControlPlaneSettings(name="bench-packing", nodes=4), day_seconds=DAY, online_load=True,
        online_start_minute=0, history_days=4))
    try:
        problems = run(c)
    finally:
        c.stop()
    for line in problems:
        print(f"PROBLEM: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
