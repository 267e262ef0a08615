"""Names shared with the rest of offpeak (see docs/contracts.md) and the operator's deterministic object names.

Deterministic names make every create idempotent: a restarted operator finds what it made before.
"""

from __future__ import annotations

GROUP = "offpeak.io"
VERSION = "v1alpha1"
PLURAL = "trainingjobs"
KIND = "TrainingJob"
API_VERSION = f"{GROUP}/{VERSION}"

LABEL_WORKLOAD = "offpeak.io/workload"
LABEL_JOB = "offpeak.io/trainingjob"
LABEL_ROLE = "offpeak.io/role"  # "training" | "analysis" | "graph"
LABEL_ATTEMPT = "offpeak.io/attempt"
LABEL_WORKER = "offpeak.io/worker"
LABEL_GPU_TYPE = "offpeak.io/gpu-type"  # on nodes
LABEL_GANG = "offpeak.io/gang"  # an opted-in PyTorchJob's replicas: the extender's gang key (with the namespace)
# on the analysis pod and graph ConfigMap of an opted-in workload (batch/v1 Job, PyTorchJob): whose they are
LABEL_WORKLOAD_KIND = "offpeak.io/workload-kind"
LABEL_WORKLOAD_NAME = "offpeak.io/workload-name"

ANN_PREDICTED = "offpeak.io/predicted-job-seconds"
ANN_CHECKPOINTING = "offpeak.io/checkpointing"
ANN_PREEMPTIBLE = "offpeak.io/preemptible"
ANN_EVICTION_REASON = "offpeak.io/eviction-reason"
ANN_GRAPH_HASH = "offpeak.io/graph-hash"
ANN_GRAPH_REDUCED = "offpeak.io/graph-reduced"
ANN_GANG_SIZE = "offpeak.io/gang-size"  # workers of the attempt, placed all or none (the extender's gang key:
#                                         namespace, offpeak.io/trainingjob, offpeak.io/attempt)
ANN_GANG_MIN_SIZE = "offpeak.io/gang-min-size"  # elastic: the fewest workers the attempt may start or run on
ANN_CHECKPOINT_INTERVAL = "offpeak.io/checkpoint-interval-seconds"  # how much work an eviction may lose
ANN_TRAIN_CONTAINER = "offpeak.io/train-container"  # a template's training container not named `train`
# the pod saves on SIGTERM within this many seconds (spec.checkpoint's gracePeriodSeconds): a planned stop then
# comes that long before its window ends, with the pod's own grace period, not at its last periodic checkpoint
ANN_SAVE_ON_STOP = "offpeak.io/save-on-stop-seconds"
# the live progress channel (livereports.py): the attempt's token and the status server's CA, projected into files
ANN_STATUS_TOKEN = "offpeak.io/status-token"
ANN_STATUS_CA = "offpeak.io/status-ca"

RESERVED_POD_ANNOTATIONS = frozenset({ANN_PREDICTED, ANN_CHECKPOINTING, ANN_PREEMPTIBLE, ANN_GANG_SIZE,
                                      ANN_GANG_MIN_SIZE, ANN_CHECKPOINT_INTERVAL, ANN_TRAIN_CONTAINER,
                                      ANN_SAVE_ON_STOP, ANN_STATUS_TOKEN, ANN_STATUS_CA})
RESERVED_POD_LABELS = frozenset({LABEL_WORKLOAD, LABEL_JOB, LABEL_ROLE, LABEL_ATTEMPT, LABEL_WORKER, LABEL_GANG})

SCHEDULER_NAME = "offpeak-scheduler"
GPU_RESOURCE = "nvidia.com/gpu"
GRAPH_KEY = "graph.json.gz"
EXTRACT_CONTAINER = "extract"  # the analysis pod's init container that runs `offpeak extract` in the user's image
TRAIN_CONTAINER = "train"  # the training pod's container (its termination message carries offpeak.progress)
TERMINATION_LOG = "/dev/termination-log"  # where offpeak.progress writes (OFFPEAK_PROGRESS_FILE)

# `<job>-a<attempt>-w<worker>` must stay a valid label value (<= 63 chars) for the job-name label.
MAX_JOB_NAME = 50


def training_pod_name(job: str, *, attempt: int, worker: int) -> str:
    return f"{job}-a{attempt}-w{worker}"


def worker_hostname(job: str, *, worker: int) -> str:
    """The stable hostname of a worker across attempts (`<hostname>.<service>` resolves in the namespace)."""
    return f"{job}-w{worker}"


def worker_service_name(job: str) -> str:
    """The headless Service a multi-worker job rendezvouses through."""
    return f"{job}-workers"


def checkpoint_claim_name(job: str) -> str:
    """The claim the operator makes from spec.checkpoint.claimTemplate, once per job, for every attempt."""
    return f"{job}-checkpoint"


def analysis_pod_name(job: str) -> str:
    return f"{job}-analysis"


def graph_configmap_name(job: str) -> str:
    return f"{job}-graph"
