"""Trace-driven online demand, and the process supervisor that must leave nothing running."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from offpeak_e2e import onlineload, procs, traceshape


def _duty() -> pd.DataFrame:
    # 3 pods x 6 minutes: pod a busy at minute 1, pod b busy minutes 0-5, pod c idle
    data = {"a": [0, 50, 0, 0, 0, 0], "b": [30] * 6, "c": [0] * 6}
    return pd.DataFrame(data, index=range(6))


def test_busy_flags_hold_either_side() -> None:
    shape = traceshape.shape_from_duty_cycle(_duty(), busy_percent=10, hold_minutes=1)
    assert shape.busy[:, 0].tolist() == [True, True, True, False, False, False]
    assert shape.busy[:, 1].all() and not shape.busy[:, 2].any()
    shape = traceshape.shape_from_duty_cycle(_duty(), busy_percent=40, hold_minutes=0)
    assert shape.busy[:, 0].tolist() == [False, True, False, False, False, False]
    assert not shape.busy[:, 1].any()  # 30 % is below this threshold


def test_node_demand_counts_busy_gpus_of_its_pods() -> None:
    shape = traceshape.shape_from_duty_cycle(_duty(), busy_percent=10, hold_minutes=1)
    demand = traceshape.node_demand(shape, node_index=0, gpus=2)  # pods a, b
    assert demand.tolist() == [2, 2, 2, 1, 1, 1]
    assert traceshape.node_demand(shape, node_index=0, gpus=3).max() <= 3


def test_binned_holds_a_quantile_per_bin() -> None:
    out = traceshape.binned(np.array([0, 0, 4, 4, 4, 1]), bin_minutes=3, quantile=1.0)
    assert out.tolist() == [4, 4, 4, 4, 4, 4]
    out = traceshape.binned(np.array([0, 0, 4, 1, 1, 1]), bin_minutes=3, quantile=0.5)
    assert out.tolist() == [0, 0, 0, 1, 1, 1]


def test_minute_at_compresses_the_day() -> None:
    assert traceshape.minute_at(elapsed_s=0, day_seconds=600, minutes=1200) == 0
    assert traceshape.minute_at(elapsed_s=300, day_seconds=600, minutes=1200) == 600
    assert traceshape.minute_at(elapsed_s=650, day_seconds=600, minutes=1200) == 100  # wraps to the next day
    with pytest.raises(ValueError):
        traceshape.minute_at(elapsed_s=1, day_seconds=0, minutes=10)


def test_real_trace_gives_a_daily_cycle() -> None:
    shape = traceshape.shape_from_duty_cycle(traceshape.load_duty_cycle())
    assert shape.minutes > 1000 and shape.pods >= 8  # most of a day; at least one 8-GPU node
    demand = traceshape.binned(traceshape.node_demand(shape, node_index=0, gpus=8))
    half = len(demand) // 2
    assert 0 <= demand.min() and demand.max() <= 8
    assert demand[:half].mean() > demand[half:].mean()  # busy first half, quiet second half of this trace day


def test_online_deployment_is_pinned_and_requests_a_gpu() -> None:
    d = onlineload.online_deployment(node="gpu-l4-0", replicas=3)
    spec = d["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-l4-0"}
    assert spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert d["spec"]["template"]["metadata"]["labels"]["offpeak.io/workload"] == "online"
    assert "schedulerName" not in spec  # online pods use the default scheduler


def test_metrics_collector_serves_snapshot() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    snap = onlineload.Snapshot()
    snap.update(gpus={"n1": 8}, online={"n1": 3}, offline={"n1": 4})
    reg = CollectorRegistry()
    reg.register(onlineload.NodeMetricsCollector(snap))
    text = generate_latest(reg).decode()
    assert 'offpeak_node_gpus{node="n1"} 8.0' in text
    assert 'offpeak_node_online_gpus{node="n1"} 3.0' in text
    assert 'offpeak_node_offline_gpus{node="n1"} 4.0' in text


def test_offline_gpus_count_running_offline_pods_per_node() -> None:
    from kubernetes.client import (V1Container, V1ObjectMeta, V1Pod, V1PodSpec, V1PodStatus,
                                   V1ResourceRequirements)

    def pod(node: str | None, phase: str, gpus: int) -> V1Pod:
        res = V1ResourceRequirements(requests={"nvidia.com/gpu": str(gpus)})
        return V1Pod(metadata=V1ObjectMeta(name="p"), spec=V1PodSpec(node_name=node, containers=[
            V1Container(name="c", resources=res), V1Container(name="sidecar")]), status=V1PodStatus(phase=phase))

    pods = [pod("n1", "Running", 2), pod("n1", "Running", 1), pod("n2", "Pending", 4), pod(None, "Pending", 1),
            pod("n2", "Succeeded", 8), pod("n3", "Running", 8)]
    assert onlineload.offline_gpus_by_node(pods) == {"n1": 3, "n3": 8}


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_supervisor_stops_whole_process_groups(tmp_path: Path) -> None:
    sup = procs.Supervisor(tmp_path)
    # a parent that forks a child in the same group: both must be gone after stop_all
    child_pid = tmp_path / "child.pid"
    script = (
        "import subprocess,sys,time; c=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); "
        f"open({str(child_pid)!r},'w').write(str(c.pid)); time.sleep(60)"
    )
    p = sup.start("sleeper", [sys.executable, "-c", script])
    deadline = time.monotonic() + 10
    while not child_pid.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    grandchild = int(child_pid.read_text())
    assert procs.alive(p) and _running(grandchild)
    other = procs.Supervisor(tmp_path)  # a second process (e.g. `cluster down`) finds it via the pid file
    assert [q.name for q in other.procs()] == ["sleeper"]
    other.stop_all(timeout=5)
    deadline = time.monotonic() + 5
    while (_running(p.pid) or _running(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(p.pid) and not _running(grandchild)
    assert other.procs() == []
    sup.stop_all()  # reaps our zombie child


def test_free_port_is_free() -> None:
    port = procs.free_port()
    assert not procs.port_open(port)


def test_free_ports_lie_below_the_kernels_ephemeral_range_and_are_never_given_twice() -> None:
    low, _ = procs.ephemeral_range()
    ports = [procs.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    if low - 10_000 >= 1000:
        assert all(10_000 <= p < low for p in ports), ports


def test_a_port_in_use_is_passed_over() -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        spare = procs.free_port()  # free now; handed out once already, so drawing it again is passed over too
        other = next(p for p in range(20_000, 30_000) if p != spare and not procs.port_open(p))
        got = procs.free_port(ephemeral=(taken + 1, 60999), rng=_Drawn([taken, spare, other]))
        assert got == other


class _Drawn:
    """Stands in for `random.Random`: yields the given ports in turn, then the last one again."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    def randrange(self, low: int, high: int) -> int:
        assert low <= self.ports[0] < high
        return self.ports.pop(0) if len(self.ports) > 1 else self.ports[0]


def test_history_matches_the_live_replay() -> None:
    demand = {"n1": [0, 2, 5, 8], "n2": [1, 1, 1, 1]}
    text = onlineload.history_openmetrics(
        demand, gpus=8, reference=1000.0, day_seconds=40.0, start=1000.0, end=1040.0, step=10.0,
        labels={"job": "j", "instance": "i:1"},
    )
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    online = [ln for ln in lines if ln.startswith('offpeak_node_online_gpus{node="n1"')]
    assert [ln.split()[1] for ln in online] == ["0", "2", "5", "8"]  # one trace "minute" per 10 s
    assert online[0].split()[2] == "1000.000"
    assert 'instance="i:1"' in online[0] and 'job="j"' in online[0]
    # the live driver asks the same function, so history and replay agree
    assert onlineload.demand_at(demand, "n1", t=1025.0, reference=1000.0, day_seconds=40.0) == 5
    assert onlineload.demand_at(demand, "n1", t=1045.0, reference=1000.0, day_seconds=40.0) == 0  # next day


def test_idle_window_runs_until_online_needs_the_gpus() -> None:
    demand = {"n": [0, 0, 6, 8]}  # 10 s per trace "minute" with a 40 s day
    assert onlineload.idle_window(demand, "n", start=0.0, reference=0.0, day_seconds=40.0, gpus=8, need=2) == 30.0
    assert onlineload.idle_window(demand, "n", start=0.0, reference=0.0, day_seconds=40.0, gpus=8, need=3) == 20.0
    assert onlineload.idle_window({"n": [0]}, "n", start=0.0, reference=0.0, day_seconds=40.0, gpus=8,
                                  need=1) == 40.0  # never closes: one day


def test_reap_removes_only_clusters_of_dead_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from offpeak_e2e.harness import reap_stale_sessions

    monkeypatch.setenv("OFFPEAK_CACHE", str(tmp_path))
    names = ("pytest-999999999", "pytest-kueue-999999998", f"pytest-{os.getpid()}", "demo-1")
    dead, dead_own, alive, other = (tmp_path / "run" / n for n in names)
    for d in (dead, dead_own, alive, other):
        (d / "pids").mkdir(parents=True)
    assert reap_stale_sessions(echo=lambda m: None) == ["pytest-999999999", "pytest-kueue-999999998"]
    assert not dead.exists() and not dead_own.exists() and alive.exists() and other.exists()
