"""Turn GPU readings plus process→pod attribution into the node agent's metrics (names in docs/contracts.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from offpeak_agent.cgroups import pod_uid_of_pid
from offpeak_agent.nvml import GpuBackend, GpuReading
from offpeak_agent.pods import PodDirectory, PodRef

IDLE = PodRef(namespace="", name="", workload="idle")
UNATTRIBUTED = "other"


@dataclass(frozen=True)
class GpuUse:
    """One GPU as seen by the agent: its reading and the pods with processes on it (memory per pod)."""

    reading: GpuReading
    pods: dict[PodRef, int] = field(default_factory=dict)

    @property
    def workloads(self) -> set[str]:
        return {p.workload for p in self.pods}


@dataclass(frozen=True)
class NodeSample:
    node: str
    gpus: tuple[GpuUse, ...]

    @property
    def online_gpus(self) -> int:
        """GPUs with any online process (the forecaster's demand signal)."""
        return sum(1 for g in self.gpus if "online" in g.workloads)

    @property
    def offline_gpus(self) -> int:
        return sum(1 for g in self.gpus if "offline" in g.workloads)


def attribute(
    *, node: str, readings: list[GpuReading], pods: PodDirectory, pod_uid_of: Callable[[int], str | None]
) -> NodeSample:
    """Attribute each GPU process to a pod; processes outside pods or of unknown pods count as `other`."""
    uses = []
    for r in readings:
        per_pod: dict[PodRef, int] = {}
        for proc in r.processes:
            uid = pod_uid_of(proc.pid)
            ref = pods.lookup(uid) if uid else None
            ref = ref or PodRef(namespace="", name="", workload=UNATTRIBUTED)
            per_pod[ref] = per_pod.get(ref, 0) + proc.used_memory_bytes
        uses.append(GpuUse(reading=r, pods=per_pod))
    return NodeSample(node=node, gpus=tuple(uses))


class AgentMetrics:
    """Gauges on an injectable registry, replaced wholesale on each sample so vanished pods vanish.

    Without an NVML reading there is no data: the node's GPU gauges are removed (absent, not zero, so Prometheus
    marks the series stale and the extender treats the node as unknown rather than idle); only
    `offpeak_agent_nvml_up` stays, at 0.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["node", "gpu", "workload", "namespace", "pod"]
        self.node_gpus = Gauge("offpeak_node_gpus", "GPUs on the node.", ["node"], registry=registry)
        self.online = Gauge("offpeak_node_online_gpus", "GPUs with an online (inference) process.", ["node"],
                            registry=registry)
        self.offline = Gauge("offpeak_node_offline_gpus", "GPUs with an offline (training) process.", ["node"],
                             registry=registry)
        self.util = Gauge("offpeak_gpu_utilization_ratio", "GPU busy fraction, per pod using the GPU.", labels,
                          registry=registry)
        self.mem = Gauge("offpeak_gpu_memory_used_bytes", "GPU memory used, per pod using the GPU.", labels,
                         registry=registry)
        self.mem_total = Gauge("offpeak_gpu_memory_total_bytes", "GPU memory size.", ["node", "gpu"],
                               registry=registry)
        self.nvml_up = Gauge("offpeak_agent_nvml_up", "1 when NVML answered the last sample.", ["node"],
                             registry=registry)
        self._lock = threading.Lock()

    def update(self, sample: NodeSample, *, nvml_up: bool) -> None:
        with self._lock:
            for g in (self.util, self.mem, self.mem_total):
                g.clear()
            n = sample.node
            self.nvml_up.labels(n).set(1 if nvml_up else 0)
            if not nvml_up:
                for g in (self.node_gpus, self.online, self.offline):
                    g.clear()
                return
            self.node_gpus.labels(n).set(len(sample.gpus))
            self.online.labels(n).set(sample.online_gpus)
            self.offline.labels(n).set(sample.offline_gpus)
            for use in sample.gpus:
                gpu = str(use.reading.index)
                self.mem_total.labels(n, gpu).set(use.reading.memory_total_bytes)
                if not use.pods:
                    self.util.labels(n, gpu, IDLE.workload, "", "").set(use.reading.utilization_ratio)
                    self.mem.labels(n, gpu, IDLE.workload, "", "").set(use.reading.memory_used_bytes)
                for ref, mem in use.pods.items():
                    self.util.labels(n, gpu, ref.workload, ref.namespace, ref.name).set(use.reading.utilization_ratio)
                    self.mem.labels(n, gpu, ref.workload, ref.namespace, ref.name).set(mem)


class Sampler:
    """Reads the backend every `interval` seconds and updates the metrics; a failed read keeps the agent up.

    With `reopen`, a backend without NVML (driver not loaded yet, library missing) is reopened before each sample,
    so the agent heals when the driver arrives.
    """

    def __init__(self, *, node: str, backend: GpuBackend, pods: PodDirectory, metrics: AgentMetrics,
                 interval: float = 5.0, proc_root: Path = Path("/proc"),
                 reopen: Callable[[], GpuBackend] | None = None) -> None:
        self.node = node
        self.backend = backend
        self.reopen = reopen
        self.nvml_up = False  # whether the last sample had an NVML reading (readiness)
        self.pods = pods
        self.metrics = metrics
        self.interval = interval
        self.proc_root = proc_root
        self.last_error: str | None = None
        self.samples = 0
        self.stop_event = threading.Event()

    def sample_once(self) -> NodeSample:
        if not self.backend.available and self.reopen is not None:
            self.backend = self.reopen()
        try:
            readings = self.backend.read()
            ok = self.backend.available
            self.last_error = None
        except Exception as e:  # noqa: BLE001 - NVMLError (GPU fell off the bus, driver reload): report, go on
            readings, ok = [], False
            self.last_error = str(e)
        sample = attribute(node=self.node, readings=readings, pods=self.pods,
                           pod_uid_of=lambda pid: pod_uid_of_pid(pid, proc_root=self.proc_root))
        self.metrics.update(sample, nvml_up=ok)
        self.nvml_up = ok
        self.samples += 1
        return sample

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample_once()
            self.stop_event.wait(self.interval)
