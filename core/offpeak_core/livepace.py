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

Shared by the operator (status, Events, early samples) and, through `LiveProgress` (the latest steady report as
the attempt's pods carry it), by the extender and the evictor: the window a running pod needs, when it is done, its
last checkpoint and the work a joining worker finds all follow from its measured pace once it has one.
"""

from __future__ import annotations

import json
import math
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


# ---- the running attempt's pods carry their latest steady report, so every decision about them can use it ----------

LIVE_PROGRESS_ANNOTATION = "offpeak.io/live-progress"  # written by the operator on the attempt's training pods


@dataclass(frozen=True, slots=True)
class LiveProgress:
    """A running attempt's measured pace as its pods carry it (`LIVE_PROGRESS_ANNOTATION`): the facts only, so
    the extender, the evictor and the simulator derive the rest of the attempt with the same functions below.

    Before a pod carries one (no steady report yet, or code that reports nothing) decisions time it by its
    prediction, as they always did."""

    at: float  # when the operator received the report (Unix seconds)
    step_seconds: float  # the measured pace on the pod's GPU type
    steps: int  # the step the job had reached then (absolute)
    total_steps: int
    attempt_from_step: int = 0  # the step the attempt resumed from (its checkpointed steps before it)
    checkpoint_step: int | None = None  # the step the last checkpoint covers (None: not reported)
    workers: int = 1  # the workers the attempt ran on when it was measured (an elastic gang's pace is its width's)

    def remaining(self) -> tuple[float, float]:
        """(p50, p90) seconds of work left as of `at`, at the measured pace (`remaining`)."""
        return remaining(step_seconds=self.step_seconds, steps_done=self.steps, total_steps=self.total_steps)

    def finish_by(self) -> float:
        """When the attempt is expected to be done, at its p90: what a prediction's start + p90 stood for."""
        return self.at + self.remaining()[1]

    def last_checkpoint_at(self) -> float | None:
        """When the last reported checkpoint was taken, at the measured pace (None: no checkpoint reported yet in
        this attempt)."""
        if self.checkpoint_step is None or self.checkpoint_step <= self.attempt_from_step:
            return None
        return self.at - max(0, self.steps - self.checkpoint_step) * self.step_seconds

    def since_checkpoint(self, now: float) -> float | None:
        """Seconds of work a stop at `now` throws away: since the last reported checkpoint (None: none reported)."""
        last = self.last_checkpoint_at()
        return None if last is None else max(0.0, now - last)

    def work_left(self) -> float:
        """Share of the attempt's work (from `attempt_from_step`) that a restart from its last checkpoint still
        has to do, in 0..1: what a worker joining an elastic gang finds, told by the job rather than guessed."""
        span = self.total_steps - self.attempt_from_step
        if span <= 0:
            return 0.0
        resume = self.attempt_from_step if self.checkpoint_step is None else self.checkpoint_step
        return min(1.0, max(0.0, (self.total_steps - max(resume, self.attempt_from_step)) / span))

    def encode(self) -> str:
        """The annotation's value (compact JSON)."""
        body: dict[str, float | int] = {"at": round(self.at, 3), "stepSeconds": self.step_seconds,
                                        "steps": self.steps, "totalSteps": self.total_steps,
                                        "attemptFromStep": self.attempt_from_step, "workers": self.workers}
        if self.checkpoint_step is not None:
            body["checkpointStep"] = self.checkpoint_step
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> LiveProgress:
        """Parse the annotation; ValueError with the reason when it is not what `encode` writes."""
        try:
            raw = json.loads(text)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{LIVE_PROGRESS_ANNOTATION} is not JSON: {e}") from e
        if not isinstance(raw, dict):
            raise ValueError(f"{LIVE_PROGRESS_ANNOTATION} must be a JSON object")
        try:
            at, pace_ = float(raw["at"]), float(raw["stepSeconds"])
            steps, total, start = (_count(raw["steps"]), _count(raw["totalSteps"]),
                                   _count(raw.get("attemptFromStep", 0)))
            ckpt = raw.get("checkpointStep")
            out = cls(at=at, step_seconds=pace_, steps=steps, total_steps=total, attempt_from_step=start,
                      checkpoint_step=None if ckpt is None else _count(ckpt),
                      workers=max(1, _count(raw.get("workers", 1))))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{LIVE_PROGRESS_ANNOTATION} needs at, stepSeconds, steps and totalSteps "
                             f"(whole steps >= 0): {e}") from e
        if not (math.isfinite(at) and math.isfinite(pace_) and pace_ > 0):
            raise ValueError(f"{LIVE_PROGRESS_ANNOTATION}: at and stepSeconds must be finite, stepSeconds > 0")
        return out


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
        raise ValueError(f"not a whole number >= 0: {value!r}")
    return int(value)
