"""Operator settings, one dataclass per concern, built once by the CLI and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field

from offpeak_core.decisions import DEFAULT_MARGIN
from offpeak_core.livepace import MIN_STEADY_STEPS

from offpeak_operator.predictions import FallbackSettings


@dataclass(frozen=True, slots=True)
class AnalysisSettings:
    """The analysis pod (graph extraction in the user's image, or in the extract image) and in-process extraction."""

    image: str = "ghcr.io/offpeak/offpeak:0.1.0"  # offpeak image: holds the bundle and runs the emit step
    # offpeak's extract image (torch, torchvision, transformers): torchvision/HF sources are extracted in an analysis
    # pod running it; empty: in the operator's own process, which then needs the [extract] extra
    extract_image: str = ""
    bundle_path: str = "/opt/offpeak/offpeak.pyz"  # the zipapp inside the offpeak image
    python: str = "python"  # interpreter in the user's image
    timeout_seconds: int = 600  # activeDeadlineSeconds of the pod; also the operator's wait before falling back
    grace_seconds: int = 30  # beyond the deadline, for the kubelet to enforce it, before the operator gives up
    in_process_timeout_seconds: int = 180  # torchvision/hfConfig extraction in the operator's own process
    cpu_request: str = "500m"
    cpu_limit: str = "2"
    memory_request: str = "2Gi"
    memory_limit: str = "6Gi"
    configmap_limit_bytes: int = 700_000


@dataclass(frozen=True, slots=True)
class RequeueSettings:
    """Backoff between attempts after an eviction or failure: base * 2**(attempt-1), capped."""

    base_seconds: float = 10.0
    max_seconds: float = 600.0
    # an evicted checkpointing pod is waited for until its deletionTimestamp (the end of its grace period) plus
    # this slack, so its final progress report (the checkpoint it wrote on SIGTERM) is read before requeueing
    termination_slack_seconds: float = 10.0

    def backoff(self, attempt: int) -> float:
        return min(self.max_seconds, self.base_seconds * 2 ** max(0, attempt - 1))


@dataclass(frozen=True, slots=True)
class PredictRetrySettings:
    """Backoff between re-predictions of a waiting job that got a fallback: base * 2**(try-1), capped."""

    base_seconds: float = 15.0
    max_seconds: float = 300.0

    def backoff(self, tries: int) -> float:
        return min(self.max_seconds, self.base_seconds * 2 ** max(0, tries - 1))


@dataclass(frozen=True, slots=True)
class PredictorSettings:
    url: str = "http://offpeak-predictor:8080"
    timeout_seconds: float = 10.0
    token_file: str | None = None  # shared secret sent as a bearer token with samples (None: samples are refused)


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """What the operator makes of a running job's live progress reports (liveprogress.py)."""

    steady_steps: int = MIN_STEADY_STEPS  # steps at a measured pace before the pace and ETA are recorded
    # steady steps before the pace goes to the predictor as a sample (the final sample replaces it at the end)
    sample_steps: int = 50
    margin: float = DEFAULT_MARGIN  # an Event says so when the pace is further than this from the prediction


@dataclass(frozen=True, slots=True)
class StatusServerSettings:
    """The HTTPS endpoint training pods report their progress to (statusserver.py, livereports.py)."""

    port: int = 8443
    host: str = "0.0.0.0"
    # the base URL pods reach it at (the chart: its Service); empty: https://127.0.0.1:<port> (a local operator)
    url: str = ""
    # tls.crt, tls.key and ca.crt (the chart's Secret); None: a self-signed CA and certificate made at start-up,
    # for the URL's host (a restarted or second operator has another: mount one for HA)
    tls_dir: str | None = None
    # the key tokens are derived with; None: a random one per process (tokens of running pods die with it)
    key_file: str | None = None
    min_interval_seconds: float = 1.0  # reports of one attempt closer together than this get 429

    @property
    def base_url(self) -> str:
        return self.url_for(self.port)

    def url_for(self, port: int) -> str:
        """The base URL pods get when the server listens on `port` (`url` when given, whatever the port)."""
        return (self.url or f"https://127.0.0.1:{port}").rstrip("/")


@dataclass(frozen=True, slots=True)
class PeeringSettings:
    """kopf peering (HA): this operator's identity and priority on the peering object `name`."""
    identity: str
    priority: int
    clusterwide: bool
    name: str = "offpeak-operator"


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    predictor: PredictorSettings = field(default_factory=PredictorSettings)
    analysis: AnalysisSettings = field(default_factory=AnalysisSettings)
    requeue: RequeueSettings = field(default_factory=RequeueSettings)
    fallback: FallbackSettings = field(default_factory=FallbackSettings)
    predict_retry: PredictRetrySettings = field(default_factory=PredictRetrySettings)
    live: LiveSettings = field(default_factory=LiveSettings)
    resync_seconds: float = 5.0  # level-triggered re-check of every TrainingJob
    peering: PeeringSettings | None = None  # None: standalone (or kopf's own choice); the resync loop never pauses
    watch_server_timeout_seconds: int = 300
    watch_client_timeout_seconds: int = 330
    # also predict and admit batch/v1 Jobs whose pod template carries offpeak.io/offline: "true" (needs RBAC on
    # jobs: list/watch/get/patch)
    watch_batch_jobs: bool = True
    # TrainingJobs labelled kueue.x-k8s.io/queue-name start only while Kueue admits the Workload the operator makes
    # for them (offpeak_operator.admission; RBAC on Kueue's workloads, workloads/status and resourceflavors)
    kueue: bool = False
    # and Kubeflow PyTorchJobs opted in the same way (RBAC on pytorchjobs.kubeflow.org: list/watch/get/patch); off
    # where training-operator's CRD is not installed
    watch_pytorch_jobs: bool = False
    # the live progress channel (statusserver.py); None: training pods get no status URL and report only in their
    # termination message (tests and in-process operators; `offpeak operator` starts it unless --status-port 0)
    status: StatusServerSettings | None = None
