from __future__ import annotations

import pytest

from offpeak_core.pace import MEASURED_P90_RATIO, measured_p90_ratio


def test_one_measured_pace_gets_the_floor_spread() -> None:
    assert measured_p90_ratio([0.3]) == MEASURED_P90_RATIO
    assert measured_p90_ratio([]) == MEASURED_P90_RATIO
    assert 1.0 < MEASURED_P90_RATIO < 1.3  # far narrower than a prediction's p90 (about 1.7 x p50)


def test_paces_that_disagree_widen_the_p90_to_their_spread() -> None:
    assert measured_p90_ratio([0.2, 0.3, 0.25]) == pytest.approx(1.5)
    assert measured_p90_ratio([0.30, 0.31]) == MEASURED_P90_RATIO  # within the floor
    assert measured_p90_ratio([0.0, -1.0, 0.4]) == MEASURED_P90_RATIO  # unusable values are ignored
