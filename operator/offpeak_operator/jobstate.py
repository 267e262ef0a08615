"""The TrainingJob state machine's vocabulary: phases, requeue reasons, what it observes of pods (PodView,
Observed) and the actions it hands the reconciler (Decision). Plain data, shared by the decision
(statemachine.py), the reconciler that carries the actions out, and the views and metrics that read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from offpeak.progress import Progress

from offpeak_operator import admission
from offpeak_operator.measure import Measurement

# Reasons of a requeued attempt (offpeak_job_requeues_total{reason}): evicted, or failed any other way.
REQUEUE_EVICTED = "Evicted"
REQUEUE_POD_FAILED = "PodFailed"
REQUEUE_YIELDED = "Yielded"  # stopped (saving, or at a checkpoint) before its window ended (the evictor's planned stop)
# stopped because the job was suspended or Kueue took its admission back (admission.py): not counted either, and
# tried again as soon as it may run
REQUEUE_SUSPENDED = "Suspended"
REQUEUE_REASONS = (REQUEUE_EVICTED, REQUEUE_POD_FAILED, REQUEUE_YIELDED, REQUEUE_SUSPENDED)
NOT_COUNTED = frozenset({REQUEUE_YIELDED, REQUEUE_SUSPENDED})  # requeues that are not attempts against maxAttempts
# The extractor's exit status for a UserError (offpeak.cli): the model source itself cannot be built (entry point
# not importable or raising, not an nn.Module, unknown torchvision name, bad HF config, impossible input shape).
# Classified by exit status, never by message text; every other failure is not the user's and falls back.
USER_ERROR_EXIT = 2
INVALID_MODEL_SOURCE = "InvalidModelSource"
EVICTION_REASONS = frozenset({"Evicted", "Preempted", "Preempting", "Terminated", "NodeLost", "Shutdown",
                              "NodeShutdown", "DeletionByTaintManager", "DeletionByPodGC"})


class Phase(StrEnum):
    PENDING = "Pending"
    ANALYZING = "Analyzing"
    PREDICTED = "Predicted"
    WAITING = "Waiting"
    RUNNING = "Running"
    REQUEUED = "Requeued"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})
# phases whose decision reads a queued job's Kueue Workload: from the prediction on (the Workload's pod set carries
# it), and after the end (the Workload is marked Finished)
QUEUED_PHASES = frozenset({Phase.PREDICTED, Phase.WAITING, Phase.RUNNING, Phase.REQUEUED, *TERMINAL})


@dataclass(frozen=True, slots=True)
class PodView:
    """What the state machine needs to know about one pod."""

    name: str
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    node: str = ""
    gpu_type: str = ""  # the node's offpeak.io/gpu-type label
    reason: str = ""  # pod status reason (Evicted, DeadlineExceeded, ...)
    message: str = ""
    eviction_reason: str = ""  # offpeak.io/eviction-reason annotation
    planned_stop: bool = False  # offpeak.io/planned-stop: stopped at a checkpoint, not evicted for online work
    deleting: bool = False  # deletionTimestamp set
    started_at: datetime | None = None
    finished_at: datetime | None = None
    extract_exit_code: int | None = None  # analysis pod: the `extract` init container's exit status, once ended
    extract_message: str = ""  # its termination message (last line of its log)
    progress: Progress | None = None  # training pod: the offpeak.progress report in its termination message
    unschedulable: str = ""  # PodScheduled=False/Unschedulable: the scheduler's (and extender's) words why
    deletion_deadline: datetime | None = None  # deletionTimestamp: when the kubelet kills it (request + grace)
    terminated: bool = False  # the training container has ended (its report, if any, is in `progress`)

    @property
    def evicted(self) -> bool:
        if self.phase == "Succeeded":
            return False
        return bool(self.eviction_reason) or self.reason in EVICTION_REASONS or self.deleting


@dataclass(frozen=True, slots=True)
class Observed:
    training_pods: Mapping[str, PodView] = field(default_factory=dict)
    analysis_pod: PodView | None = None
    workload: admission.WorkloadView | None = None  # a queued job's Kueue Workload (None: not queued, or not read)


# ---- actions: what the reconciler must do (I/O), in order ------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateAnalysisPod:
    pass


@dataclass(frozen=True, slots=True)
class DeleteAnalysisPod:
    pass


@dataclass(frozen=True, slots=True)
class CollectGraph:
    """Read the graph from the finished analysis pod's log into the `<job>-graph` ConfigMap."""


@dataclass(frozen=True, slots=True)
class LoadUserGraph:
    """Check the user's graphConfigMap and record it as the job's graph."""


@dataclass(frozen=True, slots=True)
class ExtractInProcess:
    """Extract a torchvision/hfConfig graph in the operator (subprocess with a timeout)."""


@dataclass(frozen=True, slots=True)
class Predict:
    """Ask the predictor for every allowed GPU type (graph from status.graph if any); fall back on failure."""


@dataclass(frozen=True, slots=True)
class Repredict:
    """Ask the predictor again for a waiting job that holds a fallback; on success replace the prediction in the
    status and in the waiting pods' annotations, else schedule the next try (backoff)."""


@dataclass(frozen=True, slots=True)
class CreateTrainingPods:
    attempt: int
    completed_steps: int
    placement: admission.Placement = admission.Placement()  # where Kueue's admission puts them


@dataclass(frozen=True, slots=True)
class DeletePods:
    pod_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StopPods:
    """Mark pods stopped for `reason` (their eviction-reason annotation): the attempt is requeued without counting,
    a checkpointing pod saving as it goes (admission.py: a suspension, or Kueue's eviction)."""

    pod_names: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class AnnotatePods:
    """Set `annotations` on pods (the attempt's live progress, which the extender and the evictor read)."""

    pod_names: tuple[str, ...]
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class CreateWorkload:
    """Create the Kueue Workload of a queued job (its pod set: the next attempt's training pods)."""


@dataclass(frozen=True, slots=True)
class ReleaseWorkload:
    """Give an evicted Workload's quota back now that its pods are gone (it queues again)."""


@dataclass(frozen=True, slots=True)
class FinishWorkload:
    """Mark an ended job's Workload Finished, which releases its quota."""

    succeeded: bool
    message: str


@dataclass(frozen=True, slots=True)
class ReportSample:
    """Post an attempt's measured step time to the predictor (it corrects the next prediction). `live`: measured
    while the attempt runs (its steady pace so far); the predictor replaces it with the job's next sample."""

    gpu_type: str
    step_seconds: float
    job_seconds: float  # the attempt's wall time (so far, when live)
    steps: int  # steps the attempt did (at the measured pace, when live)
    startup_seconds: float
    live: bool = False

    @classmethod
    def of(cls, m: Measurement, *, live: bool = False) -> ReportSample:
        return cls(gpu_type=m.gpu_type, step_seconds=m.step_seconds, job_seconds=m.wall_seconds, steps=m.steps,
                   startup_seconds=m.startup_seconds, live=live)


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Metrics at the end of a successful job: predicted vs actual seconds on the GPU type it ran on, and the
    seconds its first ETA from a steady measured pace expected (None: it never reported one)."""

    gpu_type: str
    predicted_seconds: float
    actual_seconds: float
    pace_eta_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class RecordRequeue:
    reason: str


@dataclass(frozen=True, slots=True)
class EmitEvent:
    type: str  # Normal | Warning
    reason: str
    message: str


Action = (CreateAnalysisPod | DeleteAnalysisPod | CollectGraph | LoadUserGraph | ExtractInProcess | Predict
          | Repredict | CreateTrainingPods | DeletePods | StopPods | AnnotatePods | CreateWorkload | ReleaseWorkload
          | FinishWorkload | ReportSample | RecordOutcome | RecordRequeue | EmitEvent)


@dataclass(slots=True)
class Decision:
    status: dict[str, Any] = field(default_factory=dict)  # fields to set in .status (top-level merge)
    actions: list[Action] = field(default_factory=list)

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
