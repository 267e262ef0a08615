"""Per-GPU-type calibration from rows `offpeak collect` measured on that GPU type (pure: no I/O, no model).

A GPU the model never trained on is predicted from its catalogue specs alone, so its predictions share one bias
(clocks, kernels, software the specs do not show). Each collected whole-step row gives one observation of it,
`x = log(measured / predicted)`. The calibration of a GPU type is their median (robust to one odd workload),
shrunk toward no change with weight n / (n + k) (`prior_rows`: few rows move a prediction little) and bounded to
a factor of `max_factor` either way (a broken collection cannot make the predictor absurd):

    log factor c = clip(n / (n + k) * median(x), -log(max_factor), +log(max_factor))

A row further than `implausible_ratio` (5x, the quarantine of a job sample) from the model's own answer is not
used: it says more about the measurement (a wrong graph, a unit slip, a forged post) than about the GPU, and one
such row alone would otherwise pull the factor to its bound. It is counted (`implausible_rows`) and logged.

The rows must also agree with each other: each row in turn is left out, the factor of the others predicts it, and
the calibration is used only when those held-out predictions are closer than the model's own (mean |x - c_-i| <
mean |x|). Rows that disagree more than they share a bias (on a real H200, the new-gpu plan's 8 small steps ranged
from 0.7x to 2.6x of the model's answer, and their factor made the 21 real models' predictions 5 points worse)
leave the GPU type at the model's answer (c = 0). One row cannot be checked and is used, shrunk as above.

It is the root of the online correction (`correction.py`): a prediction for that GPU type starts from the model's
answer times exp(c); a model family or graph with measured job samples then refines from there. GPU types with no
collected rows are unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from offpeak_predictor.correction import QUARANTINE_RATIO


@dataclass(frozen=True, slots=True)
class CalibrationSettings:
    """How far collected rows move a GPU type's predictions. Units: rows; a factor."""

    prior_rows: float = 2.0  # rows that weigh as much as the model's own answer (8 rows: 80 % of their median)
    max_factor: float = 4.0  # the calibration multiplies a prediction by at most this, or divides by it
    implausible_ratio: float = QUARANTINE_RATIO  # a row further than this from the model's answer is not used


@dataclass(frozen=True, slots=True)
class GpuCalibration:
    """One GPU type's calibration: multiply the model's step time by exp(log_factor)."""

    gpu_type: str
    log_factor: float
    rows: int
    median_log_ratio: float  # before shrinking and bounds (what the rows alone say)
    held_out_gain: float | None = None  # mean |x| - mean |x - c_-i| (left-out rows); <= 0: not used; None: one row
    implausible_rows: int = 0  # rows left out, further than `implausible_ratio` from the model's answer

    @property
    def factor(self) -> float:
        return math.exp(self.log_factor)


def calibrate(log_ratios: Mapping[str, Iterable[float]], *,
              settings: CalibrationSettings = CalibrationSettings()) -> dict[str, GpuCalibration]:  # fmt: skip
    """A calibration per GPU type with at least one finite log ratio (measured / predicted) in `log_ratios`; a GPU
    type whose rows are all implausible gets factor 1 (and says how many it left out)."""
    out: dict[str, GpuCalibration] = {}
    bound = math.log(settings.implausible_ratio)
    for gpu_type, values in log_ratios.items():
        finite = [float(x) for x in values if math.isfinite(x)]
        xs = [x for x in finite if abs(x) <= bound]
        if not finite:
            continue
        median = statistics.median(xs) if xs else 0.0
        gain = _held_out_gain(xs, settings)
        log_factor = _factor(median, rows=len(xs), settings=settings) if xs and (gain is None or gain > 0) else 0.0
        out[gpu_type] = GpuCalibration(gpu_type=gpu_type, log_factor=log_factor, rows=len(xs), median_log_ratio=median,
                                       held_out_gain=gain, implausible_rows=len(finite) - len(xs))  # fmt: skip
    return out


def _factor(median: float, *, rows: int, settings: CalibrationSettings) -> float:
    """The log factor of `rows` rows whose median log ratio is `median`: shrunk toward 0, bounded."""
    bound = math.log(settings.max_factor)
    return max(-bound, min(bound, rows / (rows + settings.prior_rows) * median))


def _held_out_gain(xs: list[float], settings: CalibrationSettings) -> float | None:
    """How much closer each row is to the factor of the other rows than to no factor (log space, mean). The
    median of the others is read off the sorted rows (O(n log n): a DB may hold thousands of collected rows)."""
    n = len(xs)
    if n < 2:
        return None
    ordered = sorted(xs)
    m = n - 1  # rows left when one is out

    def other(k: int, out: int) -> float:  # the k-th smallest of the rows without the `out`-th smallest
        return ordered[k] if k < out else ordered[k + 1]

    gains = []
    for j, x in enumerate(ordered):
        median = other(m // 2, j) if m % 2 else (other(m // 2 - 1, j) + other(m // 2, j)) / 2
        gains.append(abs(x) - abs(x - _factor(median, rows=m, settings=settings)))
    return statistics.fmean(gains)
