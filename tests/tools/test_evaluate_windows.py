"""Window-evaluation math on synthetic series (the real-trace run is `python tools/evaluate_windows.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from evaluate_windows import (
    Forecaster,
    Series,
    actual_end,
    evaluate_series,
    load_helios,
    resample_max,
)
from offpeak_core.datapaths import data_root
from offpeak_core.forecast import ForecastSettings

DAY = 86400.0


def test_actual_end_and_resample() -> None:
    t = np.arange(10) * 60.0
    free = np.array([4, 4, 3, 1, 4, 4, 4, 4, 4, 4])
    assert actual_end(free=free, times=t, i=0, k=2, horizon_end=600.0) == 180.0
    assert actual_end(free=free, times=t, i=4, k=2, horizon_end=600.0) is None
    rt, rv = resample_max(t, np.array([1, np.nan, 3, 0, np.nan, np.nan, 2, 2, 2, 2.0]), 300.0)
    assert rt.tolist() == [0.0, 300.0] and rv.tolist() == [3.0, 2.0]


def periodic(days: int, *, shift_last_day: float = 0.0) -> Series:
    t = np.arange(0, days * DAY, 60.0)
    frac = (t % DAY) / DAY
    busy = (frac >= 0.5) & (frac < 0.75)
    if shift_last_day:
        last = t >= (days - 1) * DAY
        busy = np.where(last, (frac >= 0.5 - shift_last_day) & (frac < 0.75), busy)
    return Series("n", t, np.where(busy, 8.0, 0.0), np.full(t.size, 8.0))


SETTINGS = ForecastSettings(step_seconds=300.0, horizon_seconds=DAY, history_seconds=14 * DAY)
FORECASTERS = [Forecaster("persistence", persistence=True), Forecaster("seasonal p90")]


def test_seasonal_never_cut_short_on_a_repeating_day_but_persistence_is() -> None:
    st = evaluate_series(series=periodic(9), forecasters=FORECASTERS, settings=SETTINGS, levels=[4],
                         eval_every=3600.0, warmup=7 * DAY, margin=0.15)
    seasonal, naive = st["seasonal p90"][4], st["persistence"][4]
    assert seasonal.windows > 0 and seasonal.cut_short == 0
    assert naive.cut_short > 0  # "free now stays free" runs into the daily busy hours


def test_online_arriving_early_cuts_seasonal_windows_short_by_the_shift() -> None:
    st = evaluate_series(series=periodic(9, shift_last_day=2 / 24), forecasters=FORECASTERS, settings=SETTINGS,
                         levels=[4], eval_every=3600.0, warmup=8 * DAY, margin=0.15)
    s = st["seasonal p90"][4]
    assert s.cut_short > 0
    assert max(s.shortfall_minutes) == pytest.approx(120.0, abs=5.0)


@pytest.mark.slow
def test_helios_loader_reads_real_trace() -> None:
    folder = data_root() / "traces" / "helios-earth-vc-2020-05"
    header = (folder / "earth_vc_running_gpu_num.csv").open().readline().strip().split(",")
    series = list(load_helios(data_root()))
    assert 0 < len(series) <= len(header) - 1  # one series per VC that has GPUs at all
    assert {s.name for s in series} <= {f"helios/{vc}" for vc in header[1:]}
    s = series[0]
    # a week or more, minute by minute but for the replay's outage days, which the reader drops whole
    assert s.times.size >= 7 * 1440 and set(np.unique(np.diff(s.times))) <= {60.0, DAY + 60.0}
    assert np.all(s.online <= s.capacity)
