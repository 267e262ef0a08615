"""Every PromQL query of the Grafana dashboard, run against the local cluster's real Prometheus after real offpeak
processes did real work (a job finished, another was evicted by an online surge), returns data; and
`offpeak plot-runtimes --prometheus-url` draws the finished job."""

from __future__ import annotations

import json
import time
from pathlib import Path

from offpeak.cli import main
from offpeak_dashboard.checks import run_queries
from offpeak_dashboard.plot import is_png
from offpeak_dashboard.prometheus import instant_query
from offpeak_e2e.harness import E2ECluster, trainingjob_manifest


def _submit(cluster: E2ECluster, ns: str, name: str, seconds: float) -> None:
    job = trainingjob_manifest(name, sim_seconds=seconds, gpu_types=["A100-SXM4-40GB", "L4"])
    cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))


def test_every_dashboard_query_returns_data(e2e_cluster: E2ECluster, e2e_namespace: str, tmp_path: Path) -> None:
    ns = e2e_namespace
    prometheus = e2e_cluster.state.urls["prometheus"]
    t0 = time.monotonic()
    _submit(e2e_cluster, ns, "dash-done", 5)
    _submit(e2e_cluster, ns, "dash-evicted", 900)
    e2e_cluster.wait_phase(ns, "dash-done", ["Succeeded"], timeout=240)
    e2e_cluster.wait_phase(ns, "dash-evicted", ["Running"], timeout=240)
    (pod,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=dash-evicted,offpeak.io/workload=offline")
    node = pod["spec"]["nodeName"]
    print(f"[e2e] dashboard: jobs finished/running after {time.monotonic() - t0:.1f}s; surge on {node}")
    try:
        e2e_cluster.scale_online(node, 8)  # online work wants every GPU back: the evictor must act
        e2e_cluster.wait_phase(ns, "dash-evicted", ["Requeued", "Waiting", "Pending", "Failed"], timeout=120)

        def scraped() -> bool:
            return bool(instant_query(prometheus, "offpeak_evictions_total")) and bool(
                instant_query(prometheus, "offpeak_job_actual_seconds"))

        e2e_cluster.wait_for("Prometheus scraped the eviction and the finished job", scraped, timeout=60)
        results = run_queries(prometheus, range_seconds=900, interval_seconds=2)
    finally:
        e2e_cluster.scale_online(node, 0)
    print(f"[e2e] dashboard: {len(results)} queries run after {time.monotonic() - t0:.1f}s")
    for r in results:
        print(f"  {r.series:3d} series  {r.panel}: {r.expr}  {r.error}")
    empty = [f"{r.panel}: {r.expr} ({r.error or 'no data'})" for r in results if r.error or r.series == 0]
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)

    out = tmp_path / "runtimes.png"
    assert main(["plot-runtimes", "--prometheus-url", prometheus, "--out", str(out)]) == 0
    assert is_png(out)
