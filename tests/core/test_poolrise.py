"""A pool's online demand ahead: recent peak plus the rises its history shows (`offpeak_core.poolrise`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offpeak_core.poolrise import fit_pool_rise, pool_free, pooled_free, step_maxima, summed_on_grid


def pulses(steps: int, *, period: int, width: int, base: float = 20.0, high: float = 30.0) -> np.ndarray:
    """`base` demand with a pulse to `high` of `width` steps every `period` steps."""
    x = np.full(steps, base)
    for a in range(period // 2, steps, period):
        x[a : a + width] = high
    return x


def brute_rises(x: np.ndarray, horizon: int, look_back: int, q: float, min_samples: int, cap: float) -> np.ndarray:
    """The definition, one instant at a time."""
    out = []
    for k in range(1, horizon + 1):
        r = [x[s + 1 : s + k + 1].max() - x[s - look_back + 1 : s + 1].max()
             for s in range(look_back - 1, x.size - k)]
        out.append(float(np.quantile(r, q)) if len(r) >= min_samples else cap)
    return np.maximum.accumulate(np.array(out))


def test_a_flat_pool_is_forecast_at_its_level() -> None:
    rise = fit_pool_rise(np.full(200, 12.0), capacity=64, horizon_steps=24, look_back_steps=6)
    assert np.all(rise.rises == 0.0) and rise.samples == 194
    assert np.all(rise.forecast(recent=np.full(6, 12.0), live=12.0) == 12.0)
    assert np.all(rise.forecast(recent=np.full(6, 12.0), live=15.0) == 15.0)  # live demand above the peak


def test_rises_a_look_back_has_not_seen_are_forecast_further_ahead() -> None:
    x = pulses(2000, period=72, width=4)  # a pulse of +10 every 6 h (5-min steps), 20 min long
    short = fit_pool_rise(x, capacity=64, horizon_steps=144, look_back_steps=12)
    # 57 of every 72 instants follow an hour with no pulse: a pulse comes within 7 steps for 7 of them (< 1 in 10
    # of all 72), within 8 steps for 8 (> 1 in 10); within 12 h for all of them
    assert short.rises[0] == 0.0 and short.rises[6] == 0.0
    assert short.rises[8] == 10.0 and short.rises[-1] == 10.0
    assert np.all(np.diff(short.rises) >= 0)
    # a look-back longer than the period always has a pulse in its peak: nothing rises above it (and in the next
    # few steps the pool stays below its peak, as 9 in 10 instants show)
    long = fit_pool_rise(x, capacity=64, horizon_steps=144, look_back_steps=80)
    assert np.all(long.rises <= 0.0) and long.rises[0] == -10.0 and long.rises[-1] == 0.0
    fc = short.forecast(recent=np.full(12, 20.0), live=20.0)
    assert fc[0] == 20.0 and fc[-1] == 30.0


def test_too_little_history_leaves_no_window() -> None:
    rise = fit_pool_rise(np.full(10, 3.0), capacity=40, horizon_steps=5, look_back_steps=6)
    assert rise.samples == 4 and np.all(rise.rises == 40.0)
    # enough for the near steps only: the far ones have nothing to go on
    rise = fit_pool_rise(np.full(30, 3.0), capacity=40, horizon_steps=20, look_back_steps=6, min_samples=12)
    assert np.all(rise.rises[:13] == 0.0) and np.all(rise.rises[13:] == 40.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=20, max_size=80),
    st.integers(1, 10),
    st.integers(1, 8),
    st.sampled_from([0.5, 0.9, 1.0]),
)
def test_rises_match_their_definition(values: list[int], horizon: int, look_back: int, q: float) -> None:
    x = np.array(values, dtype=float)
    rise = fit_pool_rise(x, capacity=99, horizon_steps=horizon, look_back_steps=look_back, quantile=q, min_samples=5)
    np.testing.assert_allclose(rise.rises, brute_rises(x, horizon, look_back, q, 5, 99.0))


def test_step_maxima_keeps_a_partial_last_step() -> None:
    assert list(step_maxima(np.array([1, 5, 2, 2, 7]), 2)) == [5, 2, 7]
    assert list(step_maxima(np.array([1, 5]), 1)) == [1, 5]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="look_back_steps"):
        fit_pool_rise(np.zeros(50), capacity=8, horizon_steps=4, look_back_steps=0)
    with pytest.raises(ValueError, match="quantile"):
        fit_pool_rise(np.zeros(50), capacity=8, horizon_steps=4, look_back_steps=2, quantile=0.0)


def test_series_are_summed_on_the_grid_holding_a_missing_point_at_the_value_before() -> None:
    a = (np.array([100.2, 110.0, 129.6]), np.array([1.0, 2.0, 4.0]))  # no sample near 120: 2 holds there
    b = (np.array([120.0, 130.0, 140.0]), np.array([5.0, np.nan, 6.0]))  # nothing before 120: 0; NaN: 5 holds
    got = summed_on_grid([a, b], start=100.0, step=10.0, count=5)
    assert got.tolist() == [1.0, 2.0, 2.0 + 5.0, 4.0 + 5.0, 4.0 + 6.0]


def test_a_pooled_node_has_no_more_than_its_own_room_nor_its_pools() -> None:
    free = pool_free(np.array([3.2, 10.0, 17.0]), 16)  # a part of a GPU counts as a GPU; never below 0
    assert free.tolist() == [12, 6, 0]
    assert pooled_free(free, held=4, node_free=8).tolist() == [8, 2, 0]
    many = pooled_free(free, held=np.array([[0], [10]]), node_free=np.array([[5], [8]]))
    assert many.tolist() == [[5, 5, 0], [2, 0, 0]]
