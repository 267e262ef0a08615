"""Online GPU demand per fake node from a real serving trace, with the day compressed into minutes (pure).

Source: Alibaba GenAI serving trace (``traces/alibaba-genai-serving-v2026/pod_gpu_duty_cycle_anon.csv``): the GPU
duty cycle of each inference pod, one sample a minute over ~23 h. Each fake node gets `gpus` trace pods, one per
GPU; a GPU counts as used by online work by offpeak's one busy rule (``offpeak_core.traces.alibaba``: duty cycle
>= 10 %, held 5 minutes either side), the rule the simulator and the window evaluation use too. Node i takes pods
``i*gpus .. i*gpus+gpus-1`` (wrapping round, shifted in time on each wrap so nodes differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from offpeak_core.datapaths import trace_dir
from offpeak_core.traces import alibaba


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
    """The duty-cycle trace as trace minutes × pods (percent, NaN where a pod has no sample)."""
    return alibaba.duty_matrix(alibaba.read_duty_cycle(path or trace_dir(alibaba.TRACE) / alibaba.FILE))


def shape_from_duty_cycle(duty: pd.DataFrame, *, busy_percent: float = alibaba.BUSY_UTIL_PCT,
                          hold_minutes: int = alibaba.HOLD_MINUTES) -> TraceShape:
    """Busy flags by the busy rule (the defaults are offpeak's one rule; tests may pass others)."""
    return TraceShape(busy=alibaba.busy_matrix(duty, busy_util_pct=busy_percent, hold_minutes=hold_minutes))


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
