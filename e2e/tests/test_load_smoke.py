"""Lane `load`: a burst of TrainingJobs (more than the lane's GPUs hold at once) all run to success through the
operator, offpeak-scheduler and the extender. The 200-node, 500-job load with scheduling rates is a benchmark:
bench/e2e_load.py."""

from __future__ import annotations

import json
import time

import pytest

from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.lanes import LOAD


JOBS = 40  # 4 nodes x 8 GPUs hold 32 of them at once


def test_a_burst_of_jobs_all_succeed(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    jobs = [trainingjob_manifest(f"burst-{i}", sim_seconds=5, gpu_types=LOAD.gpu_types, estimated_seconds=10,
                                 lane=LOAD) for i in range(JOBS)]
    t = time.monotonic()
    c.kubectl("-n", ns, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}))
    phases: dict[str, str] = {}

    def all_terminal() -> bool:
        for job in c.get("trainingjobs.offpeak.io", "-n", ns)["items"]:
            phases[job["metadata"]["name"]] = (job.get("status") or {}).get("phase") or "-"
        return len(phases) == JOBS and all(p in ("Succeeded", "Failed") for p in phases.values())

    c.wait_for(f"{JOBS} TrainingJobs terminal", all_terminal, timeout=300, interval=2)
    print(f"[e2e] {JOBS} jobs terminal after {time.monotonic() - t:.0f}s")
    assert sorted(set(phases.values())) == ["Succeeded"], phases
