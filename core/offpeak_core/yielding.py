"""Planned stops: a checkpointing pod yields at its last checkpoint before its idle window is forecast to end.

Why: a pod admitted into a window shorter than its run (the goodput rule does this knowingly) is otherwise evicted
when online work comes back: the work since its last checkpoint is lost and an online pod waits for it to go. If
instead it stops right after a checkpoint whose successor would land past the forecast end of its window, it loses
nothing and is gone before online demand returns; it is requeued with its remaining work, like an evicted pod.

The decision needs only what the extender has: the pod's start time, its checkpoint interval (the
`offpeak.io/checkpoint-interval-seconds` annotation), the start-up time before its first step (the goodput rule's
`startup_seconds`), and the forecast end of the window the node's offline GPUs are in. Checkpoints are taken to
fall at start + startup + k × interval. A pod that cannot checkpoint never yields (it would lose its whole run),
nor does one whose window is open-ended (no forecast end) or that is expected to finish inside its window. Pure:
no clock, no I/O.

A pod that saves when told to stop (the TrainingJob `checkpoint` contract: on SIGTERM, save and exit within
`gracePeriodSeconds`) need not wait for a periodic checkpoint: it is stopped `save_seconds` before the deadline and
keeps all its work, where stopping at its last periodic checkpoint would throw away up to a whole interval of the
window. An eviction when online work returns gives it only the evictor's short grace, so it is not counted on there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

CHECKPOINT_INTERVAL_ANNOTATION = "offpeak.io/checkpoint-interval-seconds"  # as the operator writes it
SAVE_ON_STOP_ANNOTATION = "offpeak.io/save-on-stop-seconds"  # spec.checkpoint.gracePeriodSeconds, as the operator writes it

# One minute: the pod's stop after the decision (the 30-s eviction grace period) plus the decision's own lag (the
# extender's loop, the simulator's minute). Not fitted to any trace.
DEFAULT_MARGIN_SECONDS = 60.0


@dataclass(frozen=True)
class YieldSettings:
    """`margin_seconds`: the next checkpoint must land this long before the window's forecast end, or the pod stops.
    `at_checkpoint_seconds`: how long after a checkpoint a pod still counts as "just checkpointed" (a caller that
    looks periodically passes its period; 0 = only exactly at a checkpoint)."""

    margin_seconds: float = DEFAULT_MARGIN_SECONDS
    at_checkpoint_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.margin_seconds < 0 or self.at_checkpoint_seconds < 0:
            raise ValueError("margin_seconds and at_checkpoint_seconds must be >= 0")


def _positive_seconds(annotations: Mapping[str, str], key: str) -> float | None:
    """The annotation `key` as seconds; None when absent, unreadable or not a finite number > 0."""
    raw = annotations.get(key)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def checkpoint_interval(annotations: Mapping[str, str]) -> float | None:
    """The pod's checkpoint interval in seconds from its annotations; None when absent, unreadable or not > 0."""
    return _positive_seconds(annotations, CHECKPOINT_INTERVAL_ANNOTATION)


def save_on_stop_seconds(annotations: Mapping[str, str]) -> float | None:
    """Seconds the pod needs to save when told to stop, from its annotations; None (it keeps only its periodic
    checkpoints) when absent, unreadable or not > 0."""
    return _positive_seconds(annotations, SAVE_ON_STOP_ANNOTATION)


def checkpoints_done(*, now: float, started_at: float, interval: float | None, startup_seconds: float = 0.0) -> int:
    """How many periodic checkpoints a pod has taken by `now`: they fall at start + startup + k × interval, k >= 1
    (0 for a pod that cannot checkpoint)."""
    if interval is None or interval <= 0 or not math.isfinite(interval):
        return 0
    return max(0, math.floor((now - started_at - startup_seconds) / interval + 1e-9))


def last_checkpoint(*, now: float, started_at: float, interval: float | None, startup_seconds: float = 0.0
                    ) -> float | None:
    """Time of the pod's last checkpoint at or before `now` (start + startup + k × interval, k >= 1); None when it
    has none yet or cannot checkpoint."""
    k = checkpoints_done(now=now, started_at=started_at, interval=interval, startup_seconds=startup_seconds)
    return started_at + startup_seconds + k * interval if k >= 1 and interval is not None else None


def since_checkpoint(*, now: float, started_at: float, interval: float | None, startup_seconds: float = 0.0
                     ) -> float:
    """Seconds of work a pod stopped at `now` throws away: since its last checkpoint, or since its start when it
    has none yet or cannot checkpoint (its start-up goes for nothing then too)."""
    k = checkpoints_done(now=now, started_at=started_at, interval=interval, startup_seconds=startup_seconds)
    saved = k * interval if k >= 1 and interval is not None else 0.0
    return now - started_at - (startup_seconds + saved if saved > 0 else 0.0)


def should_yield(
    *,
    now: float,
    started_at: float,
    interval: float | None,
    window_end: float | None,
    startup_seconds: float = 0.0,
    finish_by: float | None = None,
    save_seconds: float | None = None,
    settings: YieldSettings = YieldSettings(),
) -> bool:
    """Stop the pod now? Yes when it is at a checkpoint (at most `settings.at_checkpoint_seconds` after it) and its
    next checkpoint would land after `window_end - settings.margin_seconds`.

    `window_end`: forecast end of the window the pod's GPUs are in (absolute seconds; None: open-ended, or no
    forecast to trust). `finish_by`: when the pod is expected to finish (e.g. start + startup + p90), if known; a
    pod expected to finish inside the window (less the margin) runs on, unless it has already run past that time
    (the prediction was short, so it says nothing any more). Nothing is lost by stopping at a checkpoint,
    so the only cost is the restart; a pod that cannot checkpoint would lose its whole run and never yields.

    `save_seconds`: the pod saves on SIGTERM within this long (None: it keeps only its periodic checkpoints). Such a
    pod stops once a later look (`settings.at_checkpoint_seconds` on) would leave it less than `save_seconds` before
    the deadline; it loses nothing, whether or not it is at a checkpoint.
    """
    if window_end is None:
        return False
    deadline = window_end - settings.margin_seconds
    if finish_by is not None and now < finish_by <= deadline:
        return False
    if save_seconds is not None and interval is not None and interval > 0:
        return now + settings.at_checkpoint_seconds + save_seconds > deadline
    last = last_checkpoint(now=now, started_at=started_at, interval=interval, startup_seconds=startup_seconds)
    if last is None or interval is None or now - last > settings.at_checkpoint_seconds + 1e-9:
        return False
    return last + interval > deadline
