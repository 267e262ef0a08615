"""Helios Earth per-VC GPU occupancy (``traces/helios-earth-vc-2020-05``): GPUs running and GPUs in total, per
virtual cluster, per minute. Demand = running GPUs, capacity = the VC's GPUs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from offpeak_core.errors import UserError

TRACE = "helios-earth-vc-2020-05"
RUNNING_FILE = "earth_vc_running_gpu_num.csv"
TOTAL_FILE = "earth_vc_total_gpu_num.csv"


def read_vc_gpus(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(running, total): indexed by minute (datetime64, the cluster's own clock), one column per VC present in
    both files, in the running file's order."""
    frames = []
    for name in (RUNNING_FILE, TOTAL_FILE):
        try:
            frames.append(pd.read_csv(folder / name, parse_dates=["time"]).set_index("time"))
        except (OSError, ValueError, pd.errors.ParserError) as e:
            raise UserError(f"cannot read {folder / name}: {e}") from e
    running, total = frames
    vcs = [c for c in running.columns if c in total.columns]
    if not vcs or running.empty:
        raise UserError(f"{folder}: no VC columns or no rows in {RUNNING_FILE}")
    return running[vcs], total[vcs].reindex(running.index).ffill()
