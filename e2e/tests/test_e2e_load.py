"""Scenario 6: load. 500 TrainingJobs over 200 fake GPU nodes all reach a terminal phase; pods scheduled per second
with and without the extender are printed and written to ``~/.cache/offpeak/results/`` (no timing assertion)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import E2ECluster, own_cluster, results_file, session_cluster_name, trainingjob_manifest
from offpeak_e2e.loadbench import GPU_TYPES, bulk_create, raw_gpu_pods, scheduling_rate

NODES = int(os.environ.get("OFFPEAK_E2E_LOAD_NODES", "200"))
JOBS = int(os.environ.get("OFFPEAK_E2E_LOAD_JOBS", "500"))
PODS = int(os.environ.get("OFFPEAK_E2E_LOAD_PODS", "500"))


@pytest.fixture(scope="module")
def load_cluster() -> Iterator[E2ECluster]:
    settings = ClusterSettings(
        control_plane=ControlPlaneSettings(name=session_cluster_name("pytest-load"), nodes=NODES,
                                           start_timeout_s=300, build_missing=False),
        online_load=False, day_seconds=600,
    )
    yield from own_cluster(settings, "load")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_load_500_jobs_over_200_nodes(load_cluster: E2ECluster) -> None:
    c = load_cluster
    result: dict[str, Any] = {"nodes": NODES, "jobs": JOBS}
    ns = c.new_namespace("load")

    t = time.monotonic()
    bulk_create(c, ns, raw_gpu_pods("plain", "default-scheduler", PODS))
    result["default_scheduler"] = scheduling_rate(c, ns, "e2e/batch=plain", PODS, timeout=300)
    print(f"[e2e] {PODS} pods via default-scheduler: {time.monotonic() - t:.1f}s {result['default_scheduler']}")

    t = time.monotonic()
    bulk_create(c, ns, raw_gpu_pods("ext", "offpeak-scheduler", PODS))
    result["offpeak_scheduler_with_extender"] = scheduling_rate(c, ns, "e2e/batch=ext", PODS, timeout=300)
    print(f"[e2e] {PODS} pods via offpeak-scheduler+extender: {time.monotonic() - t:.1f}s "
          f"{result['offpeak_scheduler_with_extender']}")
    c.kubectl("-n", ns, "delete", "pods", "-l", "e2e/batch", "--wait=false")

    t = time.monotonic()
    jobs = [trainingjob_manifest(f"load-{i}", sim_seconds=10, gpu_types=GPU_TYPES, torchvision=None,
                                 estimated_seconds=30) for i in range(JOBS)]
    bulk_create(c, ns, jobs)
    submitted = time.monotonic() - t
    terminal: dict[str, str] = {}

    def all_terminal() -> bool:
        for j in c.get("trainingjobs.offpeak.io", "-n", ns)["items"]:
            phase = (j.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                terminal[j["metadata"]["name"]] = phase
        return len(terminal) >= JOBS

    c.wait_for(f"{JOBS} TrainingJobs terminal", all_terminal, timeout=1200, interval=5)
    took = time.monotonic() - t
    result["trainingjobs"] = {
        "submit_seconds": round(submitted, 1), "all_terminal_seconds": round(took, 1),
        "succeeded": sum(p == "Succeeded" for p in terminal.values()),
        "failed": sum(p == "Failed" for p in terminal.values()),
        "jobs_per_second": round(JOBS / took, 2),
    }
    print(f"[e2e] load result: {json.dumps(result)}")
    results_file(c.state.name, "load").write_text(json.dumps(result, indent=2))
    out = os.environ.get("OFFPEAK_E2E_BENCH_OUT")
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
    assert len(terminal) == JOBS
    assert result["trainingjobs"]["failed"] == 0, result
