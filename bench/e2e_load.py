"""Load on the local cluster: 500 plain pods scheduled per second through the default scheduler and through
offpeak-scheduler + extender, then 500 TrainingJobs over 200 fake GPU nodes to a terminal phase.

Starts its own cluster (`bench-load`; OFFPEAK_BENCH_NODES / _PODS / _JOBS shrink it), prints the figures as JSON and
writes them to ``~/.cache/offpeak/results/``. No assertion on speed: the end-to-end suite keeps a small smoke of the
same path (e2e/tests/test_load_smoke.py). Needs the control-plane binaries (built on first use: slow).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import E2ECluster, results_file, trainingjob_manifest
from offpeak_e2e.loadbench import GPU_TYPES, bulk_create, raw_gpu_pods, scheduling_rate


def main() -> int:
    nodes = int(os.environ.get("OFFPEAK_BENCH_NODES", "200"))
    pods = int(os.environ.get("OFFPEAK_BENCH_PODS", "500"))
    jobs = int(os.environ.get("OFFPEAK_BENCH_JOBS", "500"))
    c = E2ECluster.start(ClusterSettings(
        control_plane=ControlPlaneSettings(name="bench-load", nodes=nodes, start_timeout_s=300),
        online_load=False, day_seconds=600,
    ))
    result: dict[str, Any] = {"nodes": nodes, "jobs": jobs, "stage_seconds": c.state.timings}
    try:
        ns = c.new_namespace("load")
        for label, scheduler in (("default_scheduler", "default-scheduler"),
                                 ("offpeak_scheduler_with_extender", "offpeak-scheduler")):
            t = time.monotonic()
            bulk_create(c, ns, raw_gpu_pods(label.split("_")[0], scheduler, pods))
            result[label] = scheduling_rate(c, ns, f"e2e/batch={label.split('_')[0]}", pods, timeout=300)
            print(f"{pods} pods via {scheduler}: {time.monotonic() - t:.1f}s {result[label]}", flush=True)
        c.kubectl("-n", ns, "delete", "pods", "-l", "e2e/batch", "--wait=false")
        t = time.monotonic()
        bulk_create(c, ns, [trainingjob_manifest(f"load-{i}", sim_seconds=10, gpu_types=GPU_TYPES,
                                                 estimated_seconds=30) for i in range(jobs)])
        submitted = time.monotonic() - t
        terminal: dict[str, str] = {}

        def all_terminal() -> bool:
            for j in c.get("trainingjobs.offpeak.io", "-n", ns)["items"]:
                phase = (j.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    terminal[j["metadata"]["name"]] = phase
            return len(terminal) >= jobs

        c.wait_for(f"{jobs} TrainingJobs terminal", all_terminal, timeout=1200, interval=5)
        took = time.monotonic() - t
        result["trainingjobs"] = {
            "submit_seconds": round(submitted, 1), "all_terminal_seconds": round(took, 1),
            "succeeded": sum(p == "Succeeded" for p in terminal.values()),
            "failed": sum(p == "Failed" for p in terminal.values()), "jobs_per_second": round(jobs / took, 2),
        }
        print(json.dumps(result, indent=2))
        results_file(c.state.name, "load").write_text(json.dumps(result, indent=2))
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
