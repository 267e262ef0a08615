"""GPU readings behind a small protocol: the real NVML path is thin; tests use a fake."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int = 0


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str
    name: str
    utilization_ratio: float  # 0..1, busy fraction over NVML's last sample period
    memory_used_bytes: int
    memory_total_bytes: int
    processes: tuple[GpuProcess, ...] = field(default_factory=tuple)


class GpuBackend(Protocol):
    def read(self) -> list[GpuReading]: ...

    @property
    def available(self) -> bool: ...


class NoGpus:
    """A node without NVIDIA GPUs (or without the driver): no GPU data at all, still alive (not ready)."""

    available = False

    def __init__(self, reason: str = "no NVIDIA driver") -> None:
        self.reason = reason

    def read(self) -> list[GpuReading]:
        return []


class PynvmlBackend:
    """nvidia-ml-py: utilisation, memory and compute+graphics processes per GPU."""

    available = True

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()

    def _processes(self, handle: object) -> tuple[GpuProcess, ...]:
        n = self.nvml
        seen: dict[int, int] = {}
        for getter in (n.nvmlDeviceGetComputeRunningProcesses, n.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                for p in getter(handle):
                    mem = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else 0
                    seen[p.pid] = max(seen.get(p.pid, 0), mem or 0)
            except n.NVMLError as e:
                log.debug("process list unavailable: %s", e)
        return tuple(GpuProcess(pid, mem) for pid, mem in sorted(seen.items()))

    def read(self) -> list[GpuReading]:
        n = self.nvml
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            util = n.nvmlDeviceGetUtilizationRates(h)
            mem = n.nvmlDeviceGetMemoryInfo(h)
            name = n.nvmlDeviceGetName(h)
            uuid = n.nvmlDeviceGetUUID(h)
            out.append(GpuReading(
                index=i,
                uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                name=name.decode() if isinstance(name, bytes) else str(name),
                utilization_ratio=util.gpu / 100.0,
                memory_used_bytes=int(mem.used),
                memory_total_bytes=int(mem.total),
                processes=self._processes(h),
            ))
        return out


def open_backend(*, retry: bool = False) -> GpuBackend:
    """The NVML backend when the driver is there, else `NoGpus` (the agent stays up, exports no GPU data and
    is not ready); `retry` logs a failure at debug level (the sampler retries before every sample)."""
    try:
        return PynvmlBackend()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ImportError...
        log.log(logging.DEBUG if retry else logging.INFO, "NVML unavailable (%s): no GPU data exported", e)
        return NoGpus(str(e))
