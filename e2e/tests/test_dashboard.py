"""Lane `dash`: every PromQL query of the Grafana dashboard, and every label its variables read, run against the
local cluster's real Prometheus after real offpeak processes did real work (a job finished, another was evicted by
an online surge), returns data; `offpeak dashboard render` and `offpeak plot-runtimes --prometheus-url` draw from it.
(With OFFPEAK_DASHBOARD_PNG set, e2e/conftest.py also renders the dashboard there once every lane has run.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from offpeak.cli import main
from offpeak_dashboard.querycheck import QueryResult, run_queries
from offpeak_dashboard.dashboard import NODE_OFFLINE_GPUS
from offpeak_dashboard.plot import is_png
from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.lanes import A100, DASHBOARD, L4


# Counters that first appear at 1 need a second scrape before increase() has two samples: allow a few scrapes.
DATA_TIMEOUT_S = 60


def _submit(cluster: E2ECluster, ns: str, name: str, seconds: float) -> None:
    """A job that says it takes 5 s (any idle window fits it) and runs `seconds`."""
    job = trainingjob_manifest(name, sim_seconds=seconds, gpu_types=[A100, L4], estimated_seconds=5,
                               lane=DASHBOARD)
    cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))


def _needs_offline_gpus(result: QueryResult) -> bool:
    return NODE_OFFLINE_GPUS in result.expr


def _missing(results: list[QueryResult]) -> list[str]:
    return [f"{r.panel}: {r.expr} ({r.error or 'no data'})" for r in results if r.error or r.series == 0]


@pytest.fixture(scope="module")
def dashboard_results(e2e_cluster: E2ECluster) -> Iterator[list[QueryResult]]:
    """Finish one job, get another evicted, then run every dashboard query (waiting a few scrapes for data)."""
    cluster = e2e_cluster
    prometheus = cluster.state.urls["prometheus"]
    ns = cluster.new_namespace("dash")
    node = None
    t0 = time.monotonic()
    try:
        _submit(cluster, ns, "dash-done", 5)
        _submit(cluster, ns, "dash-evicted", 900)
        cluster.wait_phase(ns, "dash-done", ["Succeeded"], timeout=240)
        cluster.wait_phase(ns, "dash-evicted", ["Running"], timeout=240)
        (pod,) = cluster.pods(ns, "offpeak.io/trainingjob=dash-evicted,offpeak.io/workload=offline")
        node = pod["spec"]["nodeName"]
        print(f"[e2e] dashboard: jobs finished/running after {time.monotonic() - t0:.1f}s; surge on {node}")
        cluster.scale_online(node, 8)  # online work wants every GPU back: the evictor must act
        cluster.wait_phase(ns, "dash-evicted", ["Requeued", "Waiting", "Pending", "Failed"], timeout=120)

        results: list[QueryResult] = []

        def all_have_data() -> bool:
            results[:] = run_queries(prometheus, range_seconds=900, interval_seconds=2)
            return not _missing(results)

        try:
            cluster.wait_for("dashboard queries return data", all_have_data, timeout=DATA_TIMEOUT_S, interval=2)
        except Exception as e:  # the assertion below lists what is missing
            print(f"[e2e] dashboard: {e}")
        print(f"[e2e] dashboard: {len(results)} queries run after {time.monotonic() - t0:.1f}s")
        for r in results:
            print(f"  {r.series:3d} series  {r.panel}: {r.expr}  {r.error}")
        yield results
    finally:
        if node:
            cluster.scale_online(node, 0)
        cluster.delete_namespace(ns)


def test_every_dashboard_query_returns_data(dashboard_results: list[QueryResult]) -> None:
    assert len(dashboard_results) >= 20
    empty = _missing(dashboard_results)
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)


def test_harvest_queries_return_data(dashboard_results: list[QueryResult]) -> None:
    harvest = [r for r in dashboard_results if _needs_offline_gpus(r)]
    assert harvest, "the dashboard has no harvest queries"
    assert _missing(harvest) == []


def test_plot_runtimes_from_prometheus(e2e_cluster: E2ECluster, dashboard_results: list[QueryResult],
                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runtimes.png"
    assert main(["plot-runtimes", "--prometheus-url", e2e_cluster.state.urls["prometheus"], "--out", str(out)]) == 0
    assert is_png(out)
    assert "(0 jobs)" not in capsys.readouterr().out


def test_render_the_dashboard_from_prometheus(e2e_cluster: E2ECluster, dashboard_results: list[QueryResult],
                                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dashboard.png"
    assert main(["dashboard", "render", "--prometheus-url", e2e_cluster.state.urls["prometheus"], "--out", str(out),
                 "--range-seconds", "900"]) == 0
    assert is_png(out)
    assert "   0 jobs" not in capsys.readouterr().out
