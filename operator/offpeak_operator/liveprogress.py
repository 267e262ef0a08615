"""What a running attempt's latest live report means for its TrainingJob: the measured pace on its GPU type, the
ETA, an Event when the pace is further from the prediction than the p90 margin, and an early predictor sample
once the pace is steady. Pure; the state machine turns the result into its status patch and actions.

The status server writes each report, as received, to `status.liveReport` (`livereports.to_status`). This step
reads it and keeps what it derived in `status.livePace` (one attempt's; the next attempt starts afresh), so every
decision here is re-derivable from the status: the Event and the sample go out once per attempt. The steady pace
also goes onto the attempt's pods (`offpeak_core.livepace.LiveProgress`), where the extender and the evictor time
the rest of the attempt by it: when it finishes, its last checkpoint, the work a joining worker finds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from offpeak_core.humanize import duration
from offpeak_core.livepace import LiveProgress, Report, differs, pace, pace_error, remaining, steady

from offpeak_operator.livereports import core_report, timestamp
from offpeak_operator.measure import Measurement, with_measurement
from offpeak_operator.predictions import Prediction
from offpeak_operator.settings import LiveSettings

PACE_DIFFERS = "PaceDiffers"  # the Event's reason


@dataclass(frozen=True, slots=True)
class LiveUpdate:
    status: dict[str, Any]  # fields to set in .status
    event: tuple[str, str, str] | None = None  # (type, reason, message)
    sample: Measurement | None = None  # post this to the predictor now
    progress: LiveProgress | None = None  # write this on the attempt's pods now (`LIVE_PROGRESS_ANNOTATION`)


# The pods' live progress is written again only when what the extender and evictor derive from it moved this much:
# its expected finish by more than this share of the time left (and at least a minute), a new checkpoint, or a
# new width. Each report would otherwise be one pod patch per worker and one informer event in the extender.
REANNOTATE_SHARE = 0.05
REANNOTATE_MIN_SECONDS = 60.0


def annotation_due(progress: LiveProgress, written: Mapping[str, Any] | None) -> bool:
    """Whether `progress` says enough that the pods' copy (`written`: what `status.livePace.annotated` keeps of
    it) must be replaced."""
    if not isinstance(written, Mapping):
        return True
    if written.get("checkpointStep") != progress.checkpoint_step or written.get("workers") != progress.workers:
        return True
    before = written.get("finishBy")
    if not isinstance(before, int | float):
        return True
    moved = abs(progress.finish_by() - float(before))
    return moved > max(REANNOTATE_MIN_SECONDS, REANNOTATE_SHARE * progress.remaining()[1])


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _baseline(seen: Mapping[str, Any]) -> Report | None:
    raw = seen.get("baseline")
    at = _time(raw.get("at")) if isinstance(raw, Mapping) else None
    if at is None or not isinstance(raw, Mapping) or not isinstance(raw.get("steps"), int):
        return None
    return Report(at=at.timestamp(), steps=int(raw["steps"]))


def live_update(*, status: Mapping[str, Any], attempt: int, gpu_type: str, prediction: Prediction | None,
                total_steps: int, attempt_start: datetime, narrowed: bool,
                settings: LiveSettings, workers: int = 1) -> LiveUpdate | None:
    """The status (and Event, sample, the pods' live progress) after the attempt's latest report; None when there
    is nothing new. `workers`: the attempt's running workers."""
    raw = status.get("liveReport")
    if not isinstance(raw, Mapping) or raw.get("attempt") != attempt:
        return None  # no report yet, or one of an earlier attempt
    received = _time(raw.get("receivedAt"))
    if received is None:
        return None
    seen: Mapping[str, Any] = status.get("livePace") or {}
    if seen.get("attempt") != attempt:
        seen = {}
    if seen.get("reportedAt") == raw.get("receivedAt"):
        return None  # read already
    latest = core_report(raw, received_at=received.timestamp(), total_steps=total_steps)
    if latest is None:
        return None
    started_at = int(status.get("completedSteps") or 0)
    # the pace counts from the first report after the attempt's first step: that step carries the warm-up
    baseline = _baseline(seen) or (latest if latest.steps > started_at else None)
    out: dict[str, Any] = {"attempt": attempt, "gpuType": gpu_type or None, "reportedAt": raw["receivedAt"],
                           "steps": latest.steps}
    out.update({k: seen[k] for k in ("announced", "sampled", "sampleId", "annotated", "firstFinishTime")
                if seen.get(k)})
    if baseline is not None:
        out["baseline"] = {"at": timestamp(datetime.fromtimestamp(baseline.at, received.tzinfo)),
                           "steps": baseline.steps}
    p = pace(latest=latest, baseline=baseline)
    if p is None or not steady(p, min_steps=settings.steady_steps):
        return LiveUpdate(status={"livePace": out})
    gp = prediction.for_gpu(gpu_type) if prediction is not None else None
    predicted = gp.step_seconds if gp is not None else 0.0
    error = pace_error(measured=p.step_seconds, predicted=predicted)
    eta, _ = remaining(step_seconds=p.step_seconds, steps_done=latest.steps, total_steps=total_steps)
    out.update(stepSeconds=round(p.step_seconds, 9), steadySteps=p.steady_steps, source=p.source,
               etaSeconds=round(eta, 1), finishTime=timestamp(received + timedelta(seconds=eta)))
    # the first steady ETA is kept: how early the measured pace knew the end is what the dashboard's drift shows
    out.setdefault("firstFinishTime", out["finishTime"])
    if error is not None:
        out.update(predictedStepSeconds=round(predicted, 9), error=round(error, 4))
    wall = max(0.0, (received - attempt_start).total_seconds())
    startup = raw.get("startupSeconds")
    if not isinstance(startup, int | float):
        startup = max(0.0, wall - p.steady_steps * p.step_seconds)
    measured = Measurement(attempt=attempt, gpu_type=gpu_type, source="live", steps=p.steady_steps,
                           step_seconds=p.step_seconds, wall_seconds=wall, startup_seconds=float(startup),
                           predicted_step_seconds=predicted or None)
    patch: dict[str, Any] = {"livePace": out, "etaSeconds": round(eta, 1)}
    if gpu_type:
        patch["measurements"] = with_measurement(status.get("measurements"), measured)
    event = None
    if not narrowed and not seen.get("announced") and differs(error, margin=settings.margin):
        assert error is not None
        out["announced"] = True
        event = ("Warning" if error > 0 else "Normal", PACE_DIFFERS,
                 differs_message(measured=p.step_seconds, predicted=predicted, error=error, gpu_type=gpu_type,
                                 steps=p.steady_steps, margin=settings.margin, eta=eta,
                                 source=prediction.source if prediction is not None else ""))
    sample = None
    if gpu_type and not narrowed and not seen.get("sampled") and steady(p, min_steps=settings.sample_steps):
        out["sampled"] = True
        sample = measured
    checkpoint = raw.get("checkpointSteps")
    progress = LiveProgress(
        at=received.timestamp(), step_seconds=p.step_seconds, steps=latest.steps, total_steps=total_steps,
        attempt_from_step=started_at, workers=max(1, workers),
        checkpoint_step=checkpoint if isinstance(checkpoint, int) and checkpoint > started_at else None)
    if not annotation_due(progress, seen.get("annotated")):
        return LiveUpdate(status=patch, event=event, sample=sample)
    out["annotated"] = {"finishBy": round(progress.finish_by(), 3), "checkpointStep": progress.checkpoint_step,
                        "workers": progress.workers}
    return LiveUpdate(status=patch, event=event, sample=sample, progress=progress)


def differs_message(*, measured: float, predicted: float, error: float, gpu_type: str, steps: int, margin: float,
                    eta: float, source: str) -> str:
    """The Event's words: the measured pace, how far from the prediction and which way, and the new ETA."""
    what = {"predictor": "predicted", "user-estimate": "the user's estimate", "default": "the default guess"}
    way = "slower" if error > 0 else "faster"
    return (f"measured {measured:.4g}s per step on {gpu_type or 'its GPU type'} over {steps} steps: "
            f"{abs(error):.0%} {way} than {what.get(source, 'predicted')} ({predicted:.4g}s), beyond the p90 "
            f"margin of {margin:.0%}; ETA {duration(eta)}")
