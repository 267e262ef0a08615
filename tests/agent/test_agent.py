"""Node agent with a fake NVML and a fake /proc cgroup tree."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_agent.cgroups import pod_uid_from_cgroup, pod_uid_of_pid
from offpeak_agent.collector import AgentMetrics, Sampler
from offpeak_agent.nvml import GpuProcess, GpuReading, NoGpus
from offpeak_agent.pods import PodRef, StaticPods, pod_ref
from offpeak_agent.server import make_app

ONLINE_UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
OFFLINE_UID = "11111111-2222-3333-4444-555555555555"
CGROUP_V1 = f"""12:memory:/kubepods/burstable/pod{ONLINE_UID}/abc123
11:cpu,cpuacct:/kubepods/burstable/pod{ONLINE_UID}/abc123
0::/
"""
CGROUP_V2_SYSTEMD = (
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
    f"{OFFLINE_UID.replace('-', '_')}.slice/cri-containerd-9f8e7d.scope\n"
)


class FakeNvml:
    available = True

    def __init__(self, readings: list[GpuReading], fail: bool = False) -> None:
        self.readings = readings
        self.fail = fail

    def read(self) -> list[GpuReading]:
        if self.fail:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return self.readings


def proc_tree(tmp_path: Path) -> Path:
    for pid, text in {100: CGROUP_V1, 200: CGROUP_V2_SYSTEMD, 300: "0::/system.slice/sshd.service\n"}.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return tmp_path


def readings() -> list[GpuReading]:
    gib = 1 << 30
    return [
        GpuReading(0, "GPU-a", "NVIDIA A100-SXM4-40GB", 0.75, 10 * gib, 40 * gib,
                   (GpuProcess(100, 6 * gib), GpuProcess(200, 4 * gib))),
        GpuReading(1, "GPU-b", "NVIDIA A100-SXM4-40GB", 0.5, 8 * gib, 40 * gib, (GpuProcess(200, 8 * gib),)),
        GpuReading(2, "GPU-c", "NVIDIA A100-SXM4-40GB", 0.0, 0, 40 * gib, ()),
        GpuReading(3, "GPU-d", "NVIDIA A100-SXM4-40GB", 0.1, gib, 40 * gib, (GpuProcess(300, gib), GpuProcess(999, 0))),
    ]


PODS = StaticPods({ONLINE_UID: PodRef("web", "llm-0", "online"), OFFLINE_UID: PodRef("ml", "resnet-0", "offline")})


def test_cgroup_parsing_v1_v2_and_outside_pods(tmp_path: Path) -> None:
    assert pod_uid_from_cgroup(CGROUP_V1) == ONLINE_UID
    assert pod_uid_from_cgroup(CGROUP_V2_SYSTEMD) == OFFLINE_UID
    assert pod_uid_from_cgroup("0::/user.slice/user-0.slice/session-1.scope\n") is None
    root = proc_tree(tmp_path)
    assert pod_uid_of_pid(100, proc_root=root) == ONLINE_UID
    assert pod_uid_of_pid(12345, proc_root=root) is None  # exited


def test_sample_attributes_gpus_to_pods_and_exports(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    s = Sampler(node="gpu-1", backend=FakeNvml(readings()), pods=PODS, metrics=AgentMetrics(reg),
                proc_root=proc_tree(tmp_path))
    sample = s.sample_once()
    assert sample.online_gpus == 1 and sample.offline_gpus == 2
    get = reg.get_sample_value
    assert get("offpeak_node_gpus", {"node": "gpu-1"}) == 4
    assert get("offpeak_node_online_gpus", {"node": "gpu-1"}) == 1
    assert get("offpeak_node_offline_gpus", {"node": "gpu-1"}) == 2
    on = {"node": "gpu-1", "gpu": "0", "workload": "online", "namespace": "web", "pod": "llm-0"}
    assert get("offpeak_gpu_utilization_ratio", on) == 0.75
    assert get("offpeak_gpu_memory_used_bytes", on) == 6 * (1 << 30)
    off1 = {"node": "gpu-1", "gpu": "1", "workload": "offline", "namespace": "ml", "pod": "resnet-0"}
    assert get("offpeak_gpu_memory_used_bytes", off1) == 8 * (1 << 30)
    idle = {"node": "gpu-1", "gpu": "2", "workload": "idle", "namespace": "", "pod": ""}
    assert get("offpeak_gpu_utilization_ratio", idle) == 0.0
    other = {"node": "gpu-1", "gpu": "3", "workload": "other", "namespace": "", "pod": ""}
    assert get("offpeak_gpu_memory_used_bytes", other) == 1 << 30  # host process + exited pid
    assert get("offpeak_agent_nvml_up", {"node": "gpu-1"}) == 1


def test_vanished_pods_disappear_and_nvml_failure_keeps_running(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    backend = FakeNvml(readings())
    s = Sampler(node="gpu-1", backend=backend, pods=PODS, metrics=AgentMetrics(reg), proc_root=proc_tree(tmp_path))
    s.sample_once()
    backend.readings = [GpuReading(0, "GPU-a", "A100", 0.2, 0, 1, ())]
    s.sample_once()
    labels = {"node": "gpu-1", "gpu": "0", "workload": "online", "namespace": "web", "pod": "llm-0"}
    assert reg.get_sample_value("offpeak_gpu_utilization_ratio", labels) is None
    backend.fail = True
    s.sample_once()
    assert s.last_error == "NVML_ERROR_GPU_IS_LOST"
    # no reading, no data: the node's series vanish (absent, not zero) and only nvml_up says why
    for name in ("offpeak_node_gpus", "offpeak_node_online_gpus", "offpeak_node_offline_gpus"):
        assert reg.get_sample_value(name, {"node": "gpu-1"}) is None
    assert reg.get_sample_value("offpeak_gpu_memory_total_bytes", {"node": "gpu-1", "gpu": "0"}) is None
    assert reg.get_sample_value("offpeak_agent_nvml_up", {"node": "gpu-1"}) == 0
    backend.fail = False
    s.sample_once()
    assert reg.get_sample_value("offpeak_node_gpus", {"node": "gpu-1"}) == 1
    assert reg.get_sample_value("offpeak_agent_nvml_up", {"node": "gpu-1"}) == 1


def test_without_nvml_the_agent_is_alive_not_ready_and_exports_no_gpu_data(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    s = Sampler(node="cpu-1", backend=NoGpus(), pods=StaticPods(), metrics=AgentMetrics(reg), proc_root=tmp_path)
    s.sample_once()

    async def main() -> None:
        async with TestClient(TestServer(make_app(sampler=s, registry=reg))) as client:
            health = await (await client.get("/healthz")).json()
            assert health["ok"] and health["nvml"] is False and health["samples"] == 1
            ready = await client.get("/readyz")
            assert ready.status == 503 and (await ready.json())["ready"] is False
            text = await (await client.get("/metrics")).text()
            assert 'offpeak_agent_nvml_up{node="cpu-1"} 0.0' in text
            assert "offpeak_node_online_gpus{" not in text and "offpeak_node_gpus{" not in text  # not zeros

    asyncio.run(main())


def test_nvml_that_appears_later_is_picked_up_and_makes_the_agent_ready(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    driver = {"loaded": False}

    def reopen() -> FakeNvml | NoGpus:
        return FakeNvml(readings()) if driver["loaded"] else NoGpus()

    s = Sampler(node="gpu-1", backend=NoGpus(), pods=PODS, metrics=AgentMetrics(reg), proc_root=proc_tree(tmp_path),
                reopen=reopen)
    s.sample_once()
    assert not s.nvml_up and reg.get_sample_value("offpeak_node_gpus", {"node": "gpu-1"}) is None
    driver["loaded"] = True
    s.sample_once()
    assert s.nvml_up and reg.get_sample_value("offpeak_node_online_gpus", {"node": "gpu-1"}) == 1

    async def main() -> None:
        async with TestClient(TestServer(make_app(sampler=s, registry=reg))) as client:
            assert (await client.get("/readyz")).status == 200

    asyncio.run(main())


@pytest.mark.parametrize(("label", "workload"), [("online", "online"), ("offline", "offline"), (None, "other"),
                                                 ("batch", "other")])
def test_pod_ref_workload(label: str | None, workload: str) -> None:
    labels = {"offpeak.io/workload": label} if label else {}
    uid, ref = pod_ref({"metadata": {"uid": "u", "namespace": "ns", "name": "p", "labels": labels}})
    assert uid == "u" and ref == PodRef("ns", "p", workload)
