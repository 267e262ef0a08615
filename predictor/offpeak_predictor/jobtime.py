"""Whole-job runtime arithmetic (pure): steps from epochs, job time from step time."""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_STARTUP_SECONDS = 60.0  # pod start, CUDA/framework init, data-loader warm-up, first-step compile
STARTUP_P90_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class JobEstimate:
    job_seconds: float
    job_seconds_p90: float


def steps_for_epochs(*, epochs: float, dataset_size: int, batch_size: int, num_gpus: int = 1) -> int:
    """Optimizer steps of a data-parallel job: epochs x ceil(samples / global batch)."""
    if epochs <= 0 or dataset_size <= 0 or batch_size <= 0 or num_gpus <= 0:
        raise ValueError("epochs, dataset_size, batch_size and num_gpus must be positive")
    return int(math.ceil(epochs * math.ceil(dataset_size / (batch_size * num_gpus))))


def job_estimate(
    *, step_seconds: float, step_seconds_p90: float, steps: int,
    startup_seconds: float = DEFAULT_STARTUP_SECONDS,
) -> JobEstimate:  # fmt: skip
    """Job time = steps x step time + start-up; the p90 also assumes a slower start-up."""
    if steps < 0:
        raise ValueError("steps must be >= 0")
    return JobEstimate(
        job_seconds=steps * step_seconds + startup_seconds,
        job_seconds_p90=steps * step_seconds_p90 + startup_seconds * STARTUP_P90_FACTOR,
    )
