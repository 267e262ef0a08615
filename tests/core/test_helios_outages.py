"""The Helios replay's outages (no VC running a GPU for hours) are left out, not read as an idle cluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from offpeak_core.traces import helios

MINUTES = 1440


def _write(folder: Path, running: pd.DataFrame) -> None:
    running.rename_axis("time").to_csv(folder / helios.RUNNING_FILE)
    pd.DataFrame(8, index=running.index, columns=running.columns).rename_axis("time").to_csv(
        folder / helios.TOTAL_FILE)


def _busy_days(days: int) -> pd.DataFrame:
    index = pd.date_range("2020-05-01", periods=days * MINUTES, freq="min")
    rng = np.random.default_rng(0)
    return pd.DataFrame({"vcA": rng.integers(1, 8, index.size), "vcB": rng.integers(1, 8, index.size)}, index=index)


def test_a_day_mostly_in_outage_is_dropped_and_the_next_day_follows(tmp_path: Path) -> None:
    running = _busy_days(4)
    running.loc["2020-05-02 23:50":"2020-05-04 00:00"] = 0  # day 2 all in outage, a few minutes either side
    _write(tmp_path, running)
    got, total = helios.read_vc_gpus(tmp_path)
    days = sorted(set(got.index.floor("D").day))
    assert days == [1, 2, 4]
    assert got.shape == (3 * MINUTES, 2) and total.shape == got.shape
    assert (got.sum(axis=1) > 0).all()
    # the outage minutes kept (day 2's last ten, day 4's first) hold the last minute recorded before them
    before = running.loc["2020-05-02 23:49"]
    assert (got.loc["2020-05-02 23:50":"2020-05-04 00:00"] == before).all().all()
    assert (got.loc["2020-05-04 00:01":] == running.loc["2020-05-04 00:01":]).all().all()


def test_a_short_outage_holds_the_last_minute_and_a_one_minute_lull_is_kept(tmp_path: Path) -> None:
    running = _busy_days(2)
    running.loc["2020-05-01 14:00":"2020-05-01 15:59"] = 0  # two hours: an outage
    running.loc["2020-05-02 03:00"] = 0  # one minute with nothing running: could be real
    _write(tmp_path, running)
    got, _ = helios.read_vc_gpus(tmp_path)
    assert got.shape == running.shape
    assert (got.loc["2020-05-01 14:00":"2020-05-01 15:59"] == running.loc["2020-05-01 13:59"]).all().all()
    assert (got.loc["2020-05-02 03:00"] == 0).all()
    assert int(helios.outage_minutes(running).sum()) == 120


@pytest.mark.parametrize("vc_b", [0, 3])
def test_one_idle_vc_is_not_an_outage(tmp_path: Path, vc_b: int) -> None:
    running = _busy_days(1)
    running["vcA"] = 0  # one VC idle all day: real idle GPUs
    running.loc["2020-05-01 10:00":"2020-05-01 11:00", "vcB"] = vc_b
    got = helios.without_outages(running)
    assert (got["vcA"] == 0).all()
    assert int(helios.outage_minutes(running).sum()) == (61 if vc_b == 0 else 0)
