"""Durations in reasons: rounded up to the unit shown."""

from __future__ import annotations

import math

import pytest

from offpeak_core.humanize import duration


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.2, "1s"), (45, "45s"), (60, "1m"), (61, "2m"), (41 * 60, "41m"), (3600, "1h"),
    (4320, "1h12m"), (4290.5, "1h12m"), (47 * 3600 + 1, "47h01m"), (48 * 3600, "2d"), (51 * 3600, "2d3h"),
    (math.inf, "open-ended"), (-5, "0s"),
])
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text
