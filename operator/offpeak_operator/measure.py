"""What an attempt's pods measured: the actual step time on their GPU type, against the prediction. Pure.

Training code that uses `offpeak.progress` reports its steady-state step time (first step and start-up left
out) in the pod's termination message; otherwise the step time is (wall - start-up) / steps, where start-up is
`spec.startupSeconds`, else what the predictor assumed (its job time minus steps x step time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from offpeak.progress import Progress

from offpeak_operator.predictions import Prediction

Source = Literal["progress", "wall", "live"]  # live: while the attempt runs (liveprogress.py)
MAX_MEASUREMENTS = 20  # status.measurements keeps the latest ones


@dataclass(frozen=True, slots=True)
class Measurement:
    attempt: int
    gpu_type: str
    source: Source
    steps: int  # steps the attempt did
    step_seconds: float  # measured seconds per step
    wall_seconds: float
    startup_seconds: float  # wall time that was not training steps
    predicted_step_seconds: float | None = None  # what the job was predicted on that GPU type (p50)

    @property
    def error(self) -> float | None:
        """Relative error of the prediction: actual / predicted - 1 (0.4 = took 40 % longer)."""
        if not self.predicted_step_seconds:
            return None
        return self.step_seconds / self.predicted_step_seconds - 1

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attempt": self.attempt, "gpuType": self.gpu_type, "source": self.source, "steps": self.steps,
            "stepSeconds": round(self.step_seconds, 9), "wallSeconds": round(self.wall_seconds, 3),
            "startupSeconds": round(self.startup_seconds, 3),
        }  # fmt: skip
        if self.predicted_step_seconds is not None:
            out["predictedStepSeconds"] = round(self.predicted_step_seconds, 9)
        if self.error is not None:
            out["error"] = round(self.error, 6)
        return out


def assumed_startup(prediction: Prediction | None, gpu_type: str, *, spec_startup: float | None) -> float:
    """Start-up seconds the prediction assumed: the spec's, else the predictor's (job - steps x step), else 0."""
    if spec_startup is not None:
        return spec_startup
    gp = prediction.for_gpu(gpu_type) if prediction is not None else None
    if gp is None or prediction is None or prediction.source != "predictor":
        return 0.0
    return max(0.0, gp.job_seconds - prediction.steps * gp.step_seconds)


def _slowest(reports: Sequence[Progress | None]) -> Progress | None:
    """The slowest worker's report with a step time (data-parallel workers wait for each other)."""
    timed = [r for r in reports if r is not None and r.step_seconds is not None]
    return max(timed, key=lambda r: r.step_seconds or 0.0, default=None)


def measure_attempt(*, gpu_type: str, wall_seconds: float | None, reports: Sequence[Progress | None],
                    attempt: int, steps: int, completed: bool, prediction: Prediction | None,
                    spec_startup: float | None) -> Measurement | None:  # fmt: skip
    """The attempt's measured step time on `gpu_type`, or None when it cannot be told.

    `wall_seconds`: the attempt's first container start -> last finish; `reports`: the workers' progress
    reports; `steps`: the steps the attempt had to do; `completed`: it did them all. An interrupted attempt is
    measured only from a progress report; a completed one falls back to its wall time less its start-up.
    """
    gp = prediction.for_gpu(gpu_type) if prediction is not None and prediction.source == "predictor" else None
    predicted_step = gp.step_seconds if gp is not None else None
    wall = wall_seconds or 0.0
    report = _slowest(reports)
    if report is not None and report.step_seconds is not None:
        step, done = report.step_seconds, report.attempt_steps
        startup = report.startup_seconds if report.startup_seconds is not None else max(0.0, wall - done * step)
        return Measurement(attempt=attempt, gpu_type=gpu_type, source="progress", steps=done, step_seconds=step,
                           wall_seconds=wall, startup_seconds=startup, predicted_step_seconds=predicted_step)
    if not completed or steps <= 0 or wall_seconds is None:
        return None
    startup = assumed_startup(prediction, gpu_type, spec_startup=spec_startup)
    if wall <= startup:
        return None  # shorter than its own start-up: the step time cannot be told apart
    return Measurement(attempt=attempt, gpu_type=gpu_type, source="wall", steps=steps,
                       step_seconds=(wall - startup) / steps, wall_seconds=wall, startup_seconds=startup,
                       predicted_step_seconds=predicted_step)  # fmt: skip


def with_measurement(existing: Sequence[dict[str, Any]] | None, m: Measurement) -> list[dict[str, Any]]:
    """status.measurements with `m` in place of an earlier entry for its attempt, latest MAX_MEASUREMENTS."""
    kept = [dict(e) for e in existing or [] if e.get("attempt") != m.attempt]
    return [*kept, m.to_status()][-MAX_MEASUREMENTS:]


def checkpointed_steps(reports: Sequence[Progress | None]) -> int | None:
    """The step the attempt's last checkpoint covers (where a restart resumes): the lowest any worker reported."""
    marks = [r.checkpoint_steps for r in reports if r is not None and r.checkpoint_steps is not None]
    return min(marks, default=None)
