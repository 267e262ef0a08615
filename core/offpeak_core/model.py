"""Data types shared by the idle-window forecaster, the scheduling decisions, the simulator and the adapters.

Pure values only (frozen dataclasses, no Kubernetes objects) so the simulator can build them from traces and the
extender from its informer cache. Times are POSIX seconds (floats); durations are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted remaining job seconds on one GPU type (median and 90th percentile), and whether a step's peak
    memory fits that GPU type (None: not known, e.g. an older predictor or a fallback prediction)."""

    p50: float
    p90: float
    peak_memory_gib: float | None = None
    gpu_memory_gib: float | None = None
    fits_memory: bool | None = None

    def __post_init__(self) -> None:
        if not (self.p50 >= 0 and self.p90 >= 0):
            raise ValueError(f"prediction seconds must be >= 0, got p50={self.p50} p90={self.p90}")


@dataclass(frozen=True, slots=True)
class PodRequest:
    """An offline pod asking for GPUs; `predicted=None` makes the decisions runtime-blind (fits-now only)."""

    name: str
    namespace: str = "default"
    gpus: int = 1
    predicted: Mapping[str, Prediction] | None = None
    checkpointing: bool = False
    uid: str = ""
    checkpoint_interval_seconds: float | None = None  # for the optional checkpoint-aware filter rule

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class IdleWindow:
    """A stretch of time in which at least `free_gpus` GPUs of a node are forecast to be free of online work.

    `end_certain`: online work is known to take the GPUs back by `end` (its owners announced it, or declared busy
    hours begin), so the window cannot outlast `end`; it may still end sooner, as any forecast window may.
    """

    start: float
    end: float | None  # None: free beyond the forecast horizon
    free_gpus: int
    confidence: float = 1.0
    end_certain: bool = False

    def length(self, now: float) -> float:
        """Seconds of this window left after `now` (inf for an open-ended window)."""
        if self.end is None:
            return float("inf")
        return max(0.0, self.end - max(now, self.start))


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the decisions know about one GPU node at one instant.

    `window_end`/`window_free_gpus` describe the current idle window (the one containing `now`): until
    `window_end` at least `window_free_gpus` GPUs stay free of online work. `windows` may carry nested windows
    for every free-GPU level (as produced by `windows.idle_windows`); when given (not None), the decisions pick
    the window that matches the pod's GPU count and ignore `window_end`/`window_free_gpus` — an empty tuple then
    means "no idle window at all". `data_stale=True` means the forecast cannot be trusted: decisions then
    degrade to "fits now".
    """

    name: str
    gpu_type: str
    gpus_total: int
    gpus_free_now: int
    window_end: float | None = None
    window_free_gpus: int | None = None  # None: same as gpus_free_now
    data_stale: bool = False
    windows: tuple[IdleWindow, ...] | None = None
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class FilterResult:
    """Nodes that may run the pod, and a human reason for every node that may not."""

    passed: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OfflinePod:
    """A running offline (training) pod as the eviction choice sees it.

    `elapsed_seconds` is the work done since the pod started; `seconds_since_checkpoint` (for checkpointing pods,
    when known) is the work that an eviction would actually lose.
    """

    name: str
    namespace: str = "default"
    gpus: int = 1
    checkpointing: bool = False
    elapsed_seconds: float = 0.0
    seconds_since_checkpoint: float | None = None
    trainingjob: str | None = None
    uid: str = ""
    # GPUs of all the workers of the pod's gang together (0: not in a gang). A gang runs all or none, so evicting
    # one worker stops every worker: the work it throws away is on all of their GPUs, not only this pod's.
    gang_gpus: int = 0
    # Seconds between the pod's checkpoints (`offpeak.io/checkpoint-interval-seconds`; None: unknown or none), and
    # when it is expected to finish (start + its predicted p90 on this node's GPU type; None: no prediction): what
    # a planned stop at a checkpoint before the window ends needs (`offpeak_core.yielding`).
    checkpoint_interval_seconds: float | None = None
    finish_by: float | None = None
    # Seconds the pod needs to save when told to stop (`offpeak.io/save-on-stop-seconds`; None: it keeps only its
    # periodic checkpoints): a planned stop then comes that long before the window ends, whatever its checkpoints.
    save_on_stop_seconds: float | None = None
    # When its last checkpoint was taken, as its live report tells (`offpeak_core.livepace.LiveProgress`; None:
    # not reported, and checkpoints are taken to fall every interval from its start).
    last_checkpoint_at: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def work_at_risk_seconds(self) -> float:
        """GPU-seconds an eviction now would throw away (a gang worker's: its whole gang's)."""
        if self.checkpointing and self.seconds_since_checkpoint is not None:
            lost = min(self.seconds_since_checkpoint, self.elapsed_seconds)
        else:
            lost = self.elapsed_seconds
        return max(0.0, lost) * max(self.gpus, self.gang_gpus)
