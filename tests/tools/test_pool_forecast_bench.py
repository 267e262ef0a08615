"""bench/pool_forecast.py scores the pool forecast against the truth: checked on series whose answer is known."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location(
    "pool_forecast", Path(__file__).resolve().parents[2] / "bench" / "pool_forecast.py")
assert _spec is not None and _spec.loader is not None
pool_forecast = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pool_forecast)

DAY = pool_forecast.STEPS_PER_DAY


def _score(series: np.ndarray, capacity: int) -> dict[int, np.ndarray]:
    return pool_forecast.score(series[None, :].astype(float), np.array([capacity]), history_days=2, from_day=2,
                               days=1, quantile=0.9, look_back_steps=72)


def test_a_pool_as_busy_as_its_history_is_vouched_for_in_full() -> None:
    out = _score(np.full(4 * DAY, 10.0), 16)
    for true, promised, vouched, over, n_over, n in out.values():
        assert n == DAY // pool_forecast.EVERY_STEPS
        assert true == promised == vouched == 6 * n
        assert over == 0 and n_over == 0


def test_a_pool_that_fills_beyond_its_history_is_over_promised_and_long_windows_most() -> None:
    series = np.full(4 * DAY, 2.0)
    series[2 * DAY + DAY // 2 :] = 16.0  # full from noon of the scored day on: never seen in its history
    out = _score(series, 16)
    # at the scored day's start a 24-h window promised 14 GPUs that were gone by noon; a 1-h one is right then
    assert out[24][3] > 0 and out[24][4] > 0
    assert out[24][3] / out[24][1] > out[1][3] / out[1][1]
    assert all(a[2] <= min(a[0], a[1]) for a in out.values())
