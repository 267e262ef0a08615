"""Pods scheduled per second on the local cluster: default-scheduler vs offpeak-scheduler + extender.

Starts its own cluster (`bench-sched`, OFFPEAK_BENCH_NODES nodes, default 50), creates OFFPEAK_BENCH_PODS plain
1-GPU pods (default 300) through each scheduler and prints the rates plus the cluster's start-up timings.
Needs the control-plane binaries (built on first use: slow).
"""

from __future__ import annotations

import json
import os
import sys
import time

from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.harness import E2ECluster
from offpeak_e2e.loadbench import bulk_create, raw_gpu_pods, scheduling_rate


def main() -> int:
    nodes = int(os.environ.get("OFFPEAK_BENCH_NODES", "50"))
    pods = int(os.environ.get("OFFPEAK_BENCH_PODS", "300"))
    t = time.monotonic()
    c = E2ECluster.start(ClusterSettings(
        control_plane=ControlPlaneSettings(name="bench-sched", nodes=nodes, start_timeout_s=300),
        online_load=False, services=("prometheus", "online", "extender"),
    ))
    try:
        result = {"nodes": nodes, "pods": pods, "cluster_up_seconds": round(time.monotonic() - t, 1),
                  "stage_seconds": c.state.timings}
        ns = c.new_namespace("bench")
        for label, scheduler in (("default", "default-scheduler"), ("offpeak", "offpeak-scheduler")):
            bulk_create(c, ns, raw_gpu_pods(label, scheduler, pods))
            result[f"{label}_scheduler"] = scheduling_rate(c, ns, f"e2e/batch={label}", pods, timeout=600)
            c.kubectl("-n", ns, "delete", "pods", "-l", f"e2e/batch={label}", "--wait=true", timeout=300)
        print(json.dumps(result, indent=2))
    finally:
        t = time.monotonic()
        c.stop()
        print(f"cluster down: {time.monotonic() - t:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
