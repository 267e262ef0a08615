"""Online GPU demand per fake node from a real serving trace, with the day compressed into minutes (pure).

Source: Alibaba GenAI serving trace (``traces/alibaba-genai-serving-v2026/pod_gpu_duty_cycle_anon.csv``): the GPU
duty cycle of each inference pod, one sample a minute over ~23 h. Each fake node gets `gpus` trace pods, one per
GPU; a GPU counts as used by online work while its pod's duty cycle was at least `busy_percent` within the last
`hold_minutes` trace minutes (serving keeps the GPU while bursts come and go). Node i takes pods
``i*gpus .. i*gpus+gpus-1`` (wrapping round, shifted in time on each wrap so nodes differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from offpeak_core.datapaths import data_root

TRACE_DIR = "traces/alibaba-genai-serving-v2026"
DUTY_FILE = "pod_gpu_duty_cycle_anon.csv"


@dataclass(frozen=True)
class TraceShape:
    """Busy flags per trace minute and pod: ``busy[t, p]``."""

    busy: np.ndarray  # (minutes, pods) bool

    @property
    def minutes(self) -> int:
        return int(self.busy.shape[0])

    @property
    def pods(self) -> int:
        return int(self.busy.shape[1])


def load_duty_cycle(path: Path | None = None) -> pd.DataFrame:
    """The duty-cycle trace pivoted to minutes × pods (percent, NaN where a pod has no sample)."""
    path = path or data_root() / TRACE_DIR / DUTY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"serving trace not found: {path} (set OFFPEAK_SHARED_DATA to the shared data dir)")
    df = pd.read_csv(path)
    start = df["timestamp_anon"].min()
    df["minute"] = ((df["timestamp_anon"] - start) / 60.0).round().astype(int)
    return df.pivot_table(index="minute", columns="container_ip", values="value", aggfunc="max").sort_index()


def shape_from_duty_cycle(duty: pd.DataFrame, *, busy_percent: float = 5.0, hold_minutes: int = 10) -> TraceShape:
    """Busy flags: the pod's duty cycle reached `busy_percent` within the last `hold_minutes` minutes."""
    full = duty.reindex(range(int(duty.index.max()) + 1))
    held = full.rolling(window=hold_minutes, min_periods=1).max()
    return TraceShape(busy=(held.fillna(0.0).to_numpy() >= busy_percent))


def node_demand(shape: TraceShape, *, node_index: int, gpus: int) -> np.ndarray:
    """Online GPUs wanted on node `node_index` at each trace minute (0..gpus)."""
    first = node_index * gpus
    cols = [(first + k) % shape.pods for k in range(gpus)]
    shift = (first // shape.pods) * (shape.minutes // 7 + 1)  # each wrap-around starts at another time of day
    busy = np.roll(shape.busy[:, cols], -shift, axis=0)
    return busy.sum(axis=1).astype(int)


def binned(demand: np.ndarray, *, bin_minutes: int = 30, quantile: float = 0.75) -> np.ndarray:
    """Demand held constant over `bin_minutes` (its `quantile` inside each bin), so a compressed replay changes
    every few seconds rather than every trace minute; the result has the input's length."""
    if bin_minutes < 1:
        raise ValueError("bin_minutes must be >= 1")
    out = np.empty_like(demand)
    for start in range(0, len(demand), bin_minutes):
        chunk = demand[start:start + bin_minutes]
        out[start:start + bin_minutes] = int(round(float(np.quantile(chunk, quantile))))
    return out


def minute_at(*, elapsed_s: float, day_seconds: float, minutes: int) -> int:
    """The trace minute shown after `elapsed_s` seconds when the whole trace is replayed in `day_seconds`."""
    if day_seconds <= 0:
        raise ValueError("day_seconds must be > 0")
    return int((elapsed_s % day_seconds) / day_seconds * minutes) % minutes


def shape_minutes(path: Path | None = None) -> int:
    """Number of trace minutes (the replay's period), without building the whole shape."""
    duty = load_duty_cycle(path)
    return int(duty.index.max()) + 1
