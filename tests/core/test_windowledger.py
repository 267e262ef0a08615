"""The live window ledger: entries close when online work takes their GPUs back, outlast the horizon otherwise,
and the survival it gives admits short windows by goodput only once they have proved themselves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from offpeak_core.goodput import GoodputSettings, min_window
from offpeak_core.windowledger import LedgerSettings, WindowLedger

CAP = np.array([8, 8])
NAMES = ["a", "b"]


def _note(ledger: WindowLedger, now: float, online: list[int], left: float) -> int:
    lefts = {level: np.full(2, left) for level in range(1, 9)}
    return ledger.note(now=now, names=NAMES, capacity=CAP, online=np.array(online), left_by_level=lefts)


def test_entries_open_per_free_level_and_close_when_online_takes_the_gpus_back() -> None:
    ledger = WindowLedger(LedgerSettings(note_seconds=60, bin_seconds=60, horizon_seconds=3600))
    assert _note(ledger, 0.0, [6, 8], 1800.0) == 2  # node a: levels 1 and 2 free; node b: none
    assert _note(ledger, 30.0, [6, 8], 1800.0) == 0  # noted less than note_seconds ago
    ledger.observe(now=600.0, names=NAMES, capacity=CAP, online=np.array([7, 8]))  # level 2 taken back
    assert len(ledger) == 1 and ledger.observed() == 1
    ledger.observe(now=3600.0, names=NAMES, capacity=CAP, online=np.array([0, 0]))  # level 1 outlasts the horizon
    assert len(ledger) == 0 and ledger.observed() == 2
    sv = ledger.survival(now=3600.0)
    assert sv.closed[:, 10].sum() == 1  # closed after 600 s = 10 bins
    assert sv.closed[:, -1].sum() == 1  # outlasted


def test_open_entries_are_censored_not_dropped_and_gone_nodes_are_forgotten() -> None:
    ledger = WindowLedger(LedgerSettings(note_seconds=60, bin_seconds=60, horizon_seconds=3600))
    _note(ledger, 0.0, [0, 0], math.inf)
    sv = ledger.survival(now=120.0)
    assert sv.open_at is not None and sv.open_at.sum() == 16 and sv.closed.sum() == 0
    ledger.observe(now=180.0, names=["b"], capacity=CAP[1:], online=np.array([0]))  # node a left the cluster
    assert len(ledger) == 8 and ledger.observed() == 0  # its windows are dropped, not counted as outlasting


@pytest.mark.parametrize("closes_after, admits", [(7200.0, True), (600.0, False)])
def test_goodput_admits_short_windows_only_where_they_really_lasted(closes_after: float, admits: bool) -> None:
    """Forecast says 1 h left every time; the windows really last `closes_after`. A 4-hour job checkpointing every
    10 min may take a 1-hour window only when such windows last long enough for its work to be kept."""
    ledger = WindowLedger(LedgerSettings(note_seconds=60, bin_seconds=300, horizon_seconds=4 * 3600, min_at_risk=5))
    t = 0.0
    for _ in range(40):
        _note(ledger, t, [0, 0], 3600.0)
        ledger.observe(now=t + closes_after, names=NAMES, capacity=CAP, online=np.array([8, 8]))
        t += closes_after + 60.0
    sv = ledger.survival(now=t)
    need = min_window(survival=sv, runtime=4 * 3600.0, checkpoint_interval=600.0,
                      settings=GoodputSettings(min_efficiency=0.8, startup_seconds=60.0, min_samples=20))
    assert (need <= 3600.0) is admits
