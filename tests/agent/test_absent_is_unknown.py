"""Absent data is unknown, not idle, from the agent's /metrics through Prometheus to the extender's node view.

The agent's registry is scraped into a small fake Prometheus (staleness markers when a series vanishes, 5-minute
lookback, `max by (node)` range queries) that the extender's real `PrometheusHistory` and `Refresher` read.
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from offpeak_agent.collector import AgentMetrics, Sampler
from offpeak_agent.nvml import GpuProcess, GpuReading
from offpeak_agent.pods import PodRef, StaticPods
from offpeak_core.forecast import ForecastSettings
from offpeak_extender.history import PrometheusHistory, Refresher
from offpeak_extender.store import ClusterStore

DAY = 600.0
SETTINGS = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=3 * DAY)
START = 100 * DAY
ONLINE_UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
LOOKBACK = 300.0
STALE = object()  # a staleness marker


class FakePrometheus:
    """Scrapes registries; answers `max by (node) (offpeak_node_online_gpus)` range queries like Prometheus."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, Any]]] = {}  # node -> [(t, value | STALE)]

    def scrape(self, registry: CollectorRegistry, t: float) -> None:
        seen: set[str] = set()
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in family.samples:
                if s.name == "offpeak_node_online_gpus":
                    seen.add(s.labels["node"])
                    self.samples.setdefault(s.labels["node"], []).append((t, s.value))
        for node, series in self.samples.items():
            if node not in seen and series[-1][1] is not STALE:
                series.append((t, STALE))  # the series vanished from the target: Prometheus marks it stale

    def query_range(self, params: dict[str, str]) -> dict[str, Any]:
        assert params["query"] == "max by (node) (offpeak_node_online_gpus)"
        start, end, step = (float(params[k]) for k in ("start", "end", "step"))
        result = []
        for node, series in self.samples.items():
            times = [t for t, _ in series]
            values = []
            for ts in np.arange(start, end + step / 2, step):
                i = bisect.bisect_right(times, ts) - 1  # the newest sample at or before ts
                if i >= 0 and series[i][1] is not STALE and ts - series[i][0] <= LOOKBACK:
                    values.append([float(ts), str(series[i][1])])
            if values:
                result.append({"metric": {"node": node}, "values": values})
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}


class FakePrometheusHistory(PrometheusHistory):
    def __init__(self, prometheus: FakePrometheus) -> None:
        super().__init__("http://prometheus.test")
        self.prometheus = prometheus

    def _get(self, params: dict[str, str]) -> Any:
        return self.prometheus.query_range(params)


class SwitchableNvml:
    """One GPU used by an online pod, until NVML goes away."""

    def __init__(self) -> None:
        self.up = True

    @property
    def available(self) -> bool:
        return True

    def read(self) -> list[GpuReading]:
        if not self.up:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")
        return [GpuReading(0, "GPU-a", "A100", 0.9, 1, 2, (GpuProcess(100, 1),)),
                GpuReading(1, "GPU-b", "A100", 0.0, 0, 2, ())]


def node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"offpeak.io/gpu-type": "A100"}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def online_pod(name: str, node_name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "web", "uid": f"uid-{name}",
                         "labels": {"offpeak.io/workload": "online"}},
            "spec": {"nodeName": node_name,
                     "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def agent(tmp_path: Path, name: str, backend: SwitchableNvml) -> tuple[Sampler, CollectorRegistry]:
    (tmp_path / "100").mkdir(parents=True, exist_ok=True)
    (tmp_path / "100" / "cgroup").write_text(f"0::/kubepods/burstable/pod{ONLINE_UID}/c1\n")
    registry = CollectorRegistry()
    pods = StaticPods({ONLINE_UID: PodRef("web", "llm-0", "online")})
    return Sampler(node=name, backend=backend, pods=pods, metrics=AgentMetrics(registry), proc_root=tmp_path), registry


def test_a_node_whose_agent_lost_nvml_is_unknown_not_idle(tmp_path: Path) -> None:
    prometheus = FakePrometheus()
    nvml = SwitchableNvml()
    sampler, registry = agent(tmp_path, "gpu-1", nvml)
    now = START
    for _ in range(int(3 * DAY / 10)):  # three days of samples: one GPU online all along
        sampler.sample_once()
        prometheus.scrape(registry, now)
        now += 10.0
    clock = [now]
    store = ClusterStore(settings=SETTINGS, clock=lambda: clock[0], stale_after_seconds=30.0)
    store.replace_all(nodes=[node("gpu-1", 2)], pods=[])
    refresher = Refresher(store=store, source=FakePrometheusHistory(prometheus), metrics=None)
    refresher.refresh_once()
    (view,), _ = store.views(["gpu-1"])
    assert not view.data_stale and view.window_free_gpus == 1  # the online GPU is forecast busy

    nvml.up = False  # the driver goes away; the agent keeps being scraped for two minutes
    for _ in range(12):
        sampler.sample_once()
        prometheus.scrape(registry, now)
        now += 10.0
    assert all(v is STALE or v == 1.0 for _, v in prometheus.samples["gpu-1"])  # never a zero
    clock[0] = now
    refresher.refresh_once()
    assert not store.data_stale()  # the refresh itself worked...
    (view,), _ = store.views(["gpu-1"])
    assert view.data_stale  # ...but this node's data ended: unknown (fits-now, pack-only), not idle
    assert view.windows is None


def test_a_node_without_any_agent_series_uses_the_online_pods_the_extender_sees(tmp_path: Path) -> None:
    prometheus = FakePrometheus()
    sampler, registry = agent(tmp_path, "gpu-1", SwitchableNvml())
    clock = [START]
    store = ClusterStore(settings=SETTINGS, clock=lambda: clock[0], stale_after_seconds=30.0)
    store.replace_all(nodes=[node("gpu-1", 2), node("no-nvml", 4)], pods=[online_pod("llm-1", "no-nvml", 3)])
    for _ in range(30):
        sampler.sample_once()
        prometheus.scrape(registry, clock[0])
        store.record_local_sample(now=clock[0])
        clock[0] += 10.0
    Refresher(store=store, source=FakePrometheusHistory(prometheus), metrics=None).refresh_once()
    (seen, no_nvml), _ = store.views(["gpu-1", "no-nvml"])
    assert not seen.data_stale and seen.window_free_gpus == 1
    # no series at all for this node: its history is the extender's own count of online pods' GPUs (3 of 4)
    assert not no_nvml.data_stale and no_nvml.gpus_free_now == 1
    assert no_nvml.window_free_gpus == 1 and math.isinf(float(no_nvml.window_end or math.inf))
