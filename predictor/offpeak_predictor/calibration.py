"""Per-GPU-type calibration from rows `offpeak collect` measured on that GPU type (pure: no I/O, no model).

A GPU the model never trained on is predicted from its catalogue specs alone, so its predictions share one bias
(clocks, kernels, software the specs do not show). Each collected whole-step row gives one observation of it,
`x = log(measured / predicted)`. The calibration of a GPU type is their median (robust to one odd workload),
shrunk toward no change with weight n / (n + k) (`prior_rows`: few rows move a prediction little) and bounded to
a factor of `max_factor` either way (a broken collection cannot make the predictor absurd):

    log factor c = clip(n / (n + k) * median(x), -log(max_factor), +log(max_factor))

It is the root of the online correction (`correction.py`): a prediction for that GPU type starts from the model's
answer times exp(c); a model family or graph with measured job samples then refines from there. GPU types with no
collected rows are unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CalibrationSettings:
    """How far collected rows move a GPU type's predictions. Units: rows; a factor."""

    prior_rows: float = 2.0  # rows that weigh as much as the model's own answer (8 rows: 80 % of their median)
    max_factor: float = 4.0  # the calibration multiplies a prediction by at most this, or divides by it


@dataclass(frozen=True, slots=True)
class GpuCalibration:
    """One GPU type's calibration: multiply the model's step time by exp(log_factor)."""

    gpu_type: str
    log_factor: float
    rows: int
    median_log_ratio: float  # before shrinking and bounds (what the rows alone say)

    @property
    def factor(self) -> float:
        return math.exp(self.log_factor)


def calibrate(log_ratios: Mapping[str, Iterable[float]], *,
              settings: CalibrationSettings = CalibrationSettings()) -> dict[str, GpuCalibration]:  # fmt: skip
    """A calibration per GPU type with at least one finite log ratio (measured / predicted) in `log_ratios`."""
    out: dict[str, GpuCalibration] = {}
    bound = math.log(settings.max_factor)
    for gpu_type, values in log_ratios.items():
        xs = [float(x) for x in values if math.isfinite(x)]
        if not xs:
            continue
        median = statistics.median(xs)
        shrunk = len(xs) / (len(xs) + settings.prior_rows) * median
        out[gpu_type] = GpuCalibration(gpu_type=gpu_type, log_factor=max(-bound, min(bound, shrunk)), rows=len(xs),
                                       median_log_ratio=median)  # fmt: skip
    return out
