"""A running job's pace, measured from the progress reports it sends while it runs. Pure.

Training code reports how far it got while it trains (`offpeak.progress`, the HF Transformers Kubeflow callback,
the Kubeflow SDK's `update_runtime_status`; see `offpeak_operator.livereports`). Reports come in two kinds:

* with the training code's own steady-state step time (`offpeak.progress`: the mean of the steps after the first,
  which carries start-up, compilation and warm-up): the pace is that;
* with the step reached only (`current_step`): the pace is the time between two reports over the steps between
  them, counted from the first report after the attempt's first step (so warm-up is left out here too).

From the pace follow the work left (steps left x pace, with the narrow p90 of a measured pace,
`offpeak_core.pace`), the ETA, whether the pace differs from the prediction by more than the p90 margin (the
operator says so in an Event), and whether it is steady enough to teach the predictor before the job ends.

Shared by the operator (status, Events, early samples); the extender and simulator can time running work with
`remaining` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from offpeak_core.pace import MEASURED_P90_RATIO

PaceSource = Literal["reported", "observed"]
# steps at a measured pace before the pace is trusted at all: a mean over fewer is mostly noise
MIN_STEADY_STEPS = 5


@dataclass(frozen=True, slots=True)
class Report:
    """One progress report, as the operator received it."""

    at: float  # when the operator received it (Unix seconds; never the pod's own clock)
    steps: int  # the step the job has reached (absolute: earlier attempts' steps count)
    step_seconds: float | None = None  # the training code's own mean step time after its first step
    attempt_steps: int | None = None  # steps this attempt did (with step_seconds: the steps it is a mean of, + 1)


@dataclass(frozen=True, slots=True)
class Pace:
    """Seconds per step and the steps it was measured over."""

    step_seconds: float
    steady_steps: int
    source: PaceSource


def pace(*, latest: Report, baseline: Report | None = None) -> Pace | None:
    """The pace `latest` shows: its own step time when it carries one, else the steps since `baseline` (the first
    report after the attempt's first step) over the time since; None when neither can be told yet."""
    if latest.step_seconds is not None and latest.step_seconds > 0:
        done = latest.attempt_steps if latest.attempt_steps is not None else latest.steps
        return Pace(step_seconds=latest.step_seconds, steady_steps=max(0, done - 1), source="reported")
    if baseline is None or latest.steps <= baseline.steps or latest.at <= baseline.at:
        return None
    steps = latest.steps - baseline.steps
    return Pace(step_seconds=(latest.at - baseline.at) / steps, steady_steps=steps, source="observed")


def steady(p: Pace | None, *, min_steps: int = MIN_STEADY_STEPS) -> bool:
    """Whether a pace rests on enough steps to be recorded (or, with a larger `min_steps`, to teach the predictor)."""
    return p is not None and p.steady_steps >= max(1, min_steps)


def remaining(*, step_seconds: float, steps_done: int, total_steps: int) -> tuple[float, float]:
    """(p50, p90) seconds of the steps left at a measured pace; the p90 is the narrow one of a measured pace."""
    p50 = max(0, total_steps - steps_done) * step_seconds
    return p50, p50 * MEASURED_P90_RATIO


def pace_error(*, measured: float, predicted: float) -> float | None:
    """measured / predicted - 1 (0.4: 40 % slower than predicted); None without a prediction to compare with."""
    if predicted <= 0:
        return None
    return measured / predicted - 1


def differs(error: float | None, *, margin: float) -> bool:
    """Whether a pace is further from the prediction than the p90 margin (either way)."""
    return error is not None and abs(error) > margin
