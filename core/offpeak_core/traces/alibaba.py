"""Alibaba GenAI serving trace (``traces/alibaba-genai-serving-v2026``): per-pod GPU duty cycle, ~1 sample a minute
over ~23 h. Each inference pod holds one GPU.

**When is a GPU busy with online work?** One definition for offpeak, everywhere (simulator, window evaluation,
e2e cluster): a pod's GPU is busy in a trace minute when its duty cycle reached ``BUSY_UTIL_PCT`` (10 %) in that
minute, widened by ``HOLD_MINUTES`` (5) either side. Why: below 10 % a serving pod is idle apart from health
checks and metric scrapes (the trace's median sample is 0 %, its 75th percentile 9.4 %); and a serving pod keeps
its GPU between the bursts of a busy period, so single idle minutes between busy ones are not lendable windows.
Lending them would only trade offline work for evictions. The simulator's published figures use this rule; the
window evaluation (no hold before) and the e2e load (5 % then 10 %, with a 3-minute trailing hold) now use it too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from offpeak_core.errors import UserError

TRACE = "alibaba-genai-serving-v2026"
FILE = "pod_gpu_duty_cycle_anon.csv"
COLUMNS = ("value", "timestamp_anon", "container_ip")
BUSY_UTIL_PCT = 10.0
HOLD_MINUTES = 5
MINUTE = 60


def read_duty_cycle(path: Path) -> pd.DataFrame:
    """The raw samples: ``value`` (duty cycle %), ``timestamp_anon`` (s), ``container_ip`` (pod id, str)."""
    if not path.is_file():
        raise UserError(f"serving trace not found: {path} (set OFFPEAK_SHARED_DATA to the data root)")
    try:
        df = pd.read_csv(path, usecols=list(COLUMNS))
    except (ValueError, pd.errors.ParserError) as e:
        raise UserError(f"cannot read {path}: {e}") from e
    if df.empty:
        raise UserError(f"{path} has no rows")
    return df.astype({"container_ip": str})


def busy_samples(util: np.ndarray, *, busy_util_pct: float = BUSY_UTIL_PCT) -> np.ndarray:
    """Samples at or above the threshold (missing samples are not busy)."""
    return np.asarray(np.nan_to_num(np.asarray(util, dtype=float)) >= busy_util_pct)


def hold(busy: np.ndarray, *, minutes: int = HOLD_MINUTES, axis: int = -1) -> np.ndarray:
    """Widen every busy minute by `minutes` either side along `axis` (time)."""
    flags: np.ndarray = np.asarray(busy, dtype=bool)
    if minutes <= 0:
        return flags
    moved = np.moveaxis(flags, axis, -1)
    pad = [(0, 0)] * (moved.ndim - 1) + [(minutes, minutes)]
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(moved, pad), 2 * minutes + 1, axis=-1)
    held: np.ndarray = np.asarray(windows.any(axis=-1))
    return np.moveaxis(held, -1, axis)


def duty_matrix(df: pd.DataFrame) -> pd.DataFrame:
    """Duty cycle per trace minute (rows, from 0, every minute present) and pod (columns, sorted); NaN = no sample."""
    start = df["timestamp_anon"].min()
    minute = ((df["timestamp_anon"] - start) / MINUTE).round().astype(int)
    wide = df.assign(minute=minute).pivot_table(index="minute", columns="container_ip", values="value", aggfunc="max")
    return wide.reindex(range(int(wide.index.max()) + 1)).sort_index(axis=1)


def busy_matrix(duty: pd.DataFrame, *, busy_util_pct: float = BUSY_UTIL_PCT,
                hold_minutes: int = HOLD_MINUTES) -> np.ndarray:
    """Bool [minutes, pods]: the busy rule applied to a `duty_matrix`."""
    return hold(busy_samples(duty.to_numpy(), busy_util_pct=busy_util_pct), minutes=hold_minutes, axis=0)
