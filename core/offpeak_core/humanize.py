"""Short human durations for the reasons shown to users (`kubectl describe pod`, events)."""

from __future__ import annotations

import math
from functools import lru_cache


def duration(seconds: float) -> str:
    """Format seconds as `41m`, `1h12m`, `2d3h`, `45s` (rounded up to the unit shown, so reasons never undersell)."""
    if math.isinf(seconds):
        return "open-ended"
    return _whole_seconds(max(0, math.ceil(seconds)))


@lru_cache(maxsize=8192)  # filter replies format thousands of reasons over few distinct durations
def _whole_seconds(s: int) -> str:
    if s < 60:
        return f"{s}s"
    m = math.ceil(s / 60)
    if m < 60:
        return f"{m}m"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    d, h = divmod(h, 24)
    return f"{d}d{h}h" if h else f"{d}d"
