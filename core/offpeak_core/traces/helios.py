"""Helios Earth per-VC GPU occupancy (``traces/helios-earth-vc-2020-05``): GPUs running and GPUs in total, per
virtual cluster, per minute. Demand = running GPUs, capacity = the VC's GPUs.

The replay has outages: minutes when no VC runs a single GPU, in runs of hours (2020-05-09 23:56 to 05-11 00:00
and 05-12 14:01 to 16:01), between minutes where the 856-GPU cluster is 60-100 % busy. Either the job log
recorded nothing then or the cluster was down; neither is idle GPUs an offline job could have used, so
`read_vc_gpus` leaves them out: a trace day that is mostly outage is dropped (the next day follows, so the time of
day stays aligned and the index keeps its real timestamps), and a shorter outage holds the last minute recorded
before it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from offpeak_core.errors import UserError

TRACE = "helios-earth-vc-2020-05"
RUNNING_FILE = "earth_vc_running_gpu_num.csv"
TOTAL_FILE = "earth_vc_total_gpu_num.csv"
OUTAGE_MIN_MINUTES = 10  # an all-zero stretch at least this long is an outage (one minute may be a real lull)
OUTAGE_DAY_SHARE = 0.5  # a day with more of its minutes in outages than this is dropped


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
    running = without_outages(running[vcs])
    return running, total[vcs].reindex(running.index).ffill()


def outage_minutes(running: pd.DataFrame) -> pd.Series:
    """True for the minutes of every stretch of at least `OUTAGE_MIN_MINUTES` in which no VC runs a GPU."""
    empty = (running.fillna(0) == 0).all(axis=1)
    stretch = (empty != empty.shift()).cumsum()
    length = empty.groupby(stretch).transform("size")
    return empty & (length >= OUTAGE_MIN_MINUTES)


def without_outages(running: pd.DataFrame) -> pd.DataFrame:
    """`running` without its outages: days mostly in outage dropped, the other outage minutes holding the last
    minute recorded before them (the first recorded one after, at the very start)."""
    out = outage_minutes(running)
    day = pd.DatetimeIndex(running.index).floor("D")
    keep = ~day.isin(out.groupby(day).mean().loc[lambda share: share > OUTAGE_DAY_SHARE].index)
    kept = running[keep].mask(out[keep])
    return kept.ffill().bfill()
