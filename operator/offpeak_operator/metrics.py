"""Prometheus metrics of the operator, on an injectable registry (a fresh one per test)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from offpeak_operator.labelbounds import BoundedLabelValues
from offpeak_operator.jobstate import REQUEUE_REASONS, Phase

RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)
# Labels of the per-job gauges (the dashboard groups by them).
JOB_LABELS = ("trainingjob", "job_namespace", "gpu_type", "model_family")
# The predictor endpoints the operator calls (offpeak_operator.predictor_http).
PREDICTOR_ENDPOINTS = ("/v1/predict", "/v1/samples")
# What became of a training pod's progress report at the status server (offpeak_operator.statusserver).
STATUS_REPORT_OUTCOMES = ("accepted", "empty", "missing_token", "bad_token", "invalid", "too_large", "not_found",
                          "stale_attempt", "throttled", "error")
MAX_JOBS_WITH_SERIES = 2000  # finished jobs whose per-job gauges are kept (oldest dropped first)
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Model families (free text from users' graphs) with their own label; the rest are `other` (labelbounds).
MAX_MODEL_FAMILIES = 50
MODEL_FAMILY_STALE_SECONDS = 7 * 24 * 3600.0  # a family no job has finished with for a week gives its place back
# Status reasons of waiting jobs: the operator writes a few dozen, but a restarted operator reads what is there.
MAX_WAITING_REASONS = 32
WAITING_REASON_STALE_SECONDS = 24 * 3600.0
# Phases of a job that does not run yet: offpeak_jobs_waiting{reason} says why.
WAITING_PHASES = frozenset({Phase.PENDING, Phase.ANALYZING, Phase.PREDICTED, Phase.WAITING, Phase.REQUEUED})
UNKNOWN_FAMILY = "unknown"


class OperatorMetrics:
    """All operator metrics. Per-job gauges carry `trainingjob` so Grafana can plot predicted vs actual per job.

    Label sets that grow with user data are bounded: model families (`max_model_families`, then `other`; stale
    ones removed), finished jobs with per-job gauges (`max_jobs_with_series`), and a namespace's job counts exist
    only while it has jobs.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 max_jobs_with_series: int = MAX_JOBS_WITH_SERIES, max_model_families: int = MAX_MODEL_FAMILIES,
                 model_family_stale_seconds: float = MODEL_FAMILY_STALE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_jobs_with_series = max_jobs_with_series
        self._clock = clock
        self._series: OrderedDict[str, set[tuple[str, ...]]] = OrderedDict()  # "ns/name" -> label values
        self._families = BoundedLabelValues(limit=max_model_families, stale_after=model_family_stale_seconds)
        self._family_gpu_types: dict[str, set[str]] = {}  # exported family -> GPU types of its histogram series
        self._reasons = BoundedLabelValues(limit=MAX_WAITING_REASONS, stale_after=WAITING_REASON_STALE_SECONDS)
        # not `job`/`namespace`: Prometheus would rename them `exported_job`/`exported_namespace` on scrape
        job_labels = JOB_LABELS
        self.job_predicted_seconds = Gauge("offpeak_job_predicted_seconds",
                                           "Predicted seconds of a finished job's last attempt (p50)",
                                           job_labels, registry=self.registry)
        self.job_actual_seconds = Gauge("offpeak_job_actual_seconds",
                                        "Measured seconds of a finished job's last attempt",
                                        job_labels, registry=self.registry)
        self.prediction_error_ratio = Histogram("offpeak_prediction_error_ratio", "actual / predicted job seconds",
                                                ("gpu_type", "model_family"), buckets=RATIO_BUCKETS,
                                                registry=self.registry)
        self.eta_error_ratio = Histogram("offpeak_eta_error_ratio",
                                         "actual / expected job seconds, the expectation being the first ETA of a "
                                         "steady measured pace (eta_source=pace) or, for a job that never reported "
                                         "one, the prediction (eta_source=prediction)", ("gpu_type", "eta_source"),
                                         buckets=RATIO_BUCKETS, registry=self.registry)
        self.jobs = Gauge("offpeak_jobs", "TrainingJobs known to this operator, by namespace and phase",
                          ("job_namespace", "phase"), registry=self.registry)
        self.jobs_waiting = Gauge("offpeak_jobs_waiting", "TrainingJobs not running yet, by namespace and the "
                                  "reason in their status", ("job_namespace", "reason"), registry=self.registry)
        self.job_requeues_total = Counter("offpeak_job_requeues_total", "Attempts requeued after eviction or failure",
                                          ("reason",), registry=self.registry)
        self.analysis_duration_seconds = Histogram("offpeak_analysis_duration_seconds",
                                                   "Time to get a model graph, by source and outcome",
                                                   ("source", "outcome"), buckets=SECONDS_BUCKETS,
                                                   registry=self.registry)
        self.predictor_request_seconds = Histogram("offpeak_predictor_request_seconds",
                                                   "Predictor HTTP request latency", ("endpoint",),
                                                   buckets=SECONDS_BUCKETS, registry=self.registry)
        self.predictor_failures_total = Counter("offpeak_predictor_failures_total",
                                                "Predictor requests that failed (fell back or dropped a sample)",
                                                ("endpoint",), registry=self.registry)
        self.status_reports_total = Counter("offpeak_status_reports_total",
                                            "Progress reports of training pods at the status server, by outcome "
                                            "(missing_token: 401, bad_token: 403, ...)", ("outcome",),
                                            registry=self.registry)
        self._jobs: dict[str, dict[str, tuple[str, str]]] = {}  # namespace -> name -> (phase, waiting reason)
        self._waiting_series: dict[str, set[str]] = {}  # namespace -> reasons exported for it
        self._lock = threading.Lock()
        # Known label values exported at 0 from the start, so increase()/rate() see the first event.
        for reason in REQUEUE_REASONS:
            self.job_requeues_total.labels(reason=reason)
        for endpoint in PREDICTOR_ENDPOINTS:
            self.predictor_failures_total.labels(endpoint=endpoint)
            self.predictor_request_seconds.labels(endpoint=endpoint)
        for outcome in STATUS_REPORT_OUTCOMES:
            self.status_reports_total.labels(outcome=outcome)

    def set_phase(self, job: str, phase: str | None, *, reason: str = "") -> None:
        """Record `job`'s ("ns/name") phase and status reason (phase None: forget the job), and refresh its
        namespace's `offpeak_jobs{job_namespace,phase}` and `offpeak_jobs_waiting{job_namespace,reason}`."""
        namespace, _, name = job.partition("/")
        with self._lock:
            jobs = self._jobs.setdefault(namespace, {})
            if phase is None:
                jobs.pop(name, None)
                self._forget_series(job)
            else:
                waiting = ""
                if phase in WAITING_PHASES:
                    waiting = self._reasons.admit(reason or phase, now=self._clock()).value
                jobs[name] = (phase, waiting)
            self._refresh_namespace(namespace)

    def _refresh_namespace(self, namespace: str) -> None:
        """Export `namespace`'s counts: every phase (0 when empty) and every waiting reason it has shown, while
        it has jobs; none once its last job is gone. The caller holds the lock."""
        jobs = self._jobs.get(namespace) or {}
        exported = self._waiting_series.setdefault(namespace, set())
        if not jobs:
            for each in Phase:
                _remove(self.jobs, namespace, each)
            for reason in exported:
                _remove(self.jobs_waiting, namespace, reason)
            self._jobs.pop(namespace, None)
            self._waiting_series.pop(namespace, None)
            return
        phases: dict[str, int] = {str(p): 0 for p in Phase}
        waiting: dict[str, int] = dict.fromkeys(exported, 0)
        for phase, reason in jobs.values():
            phases[phase] = phases.get(phase, 0) + 1
            if reason:
                waiting[reason] = waiting.get(reason, 0) + 1
        for phase, n in phases.items():
            self.jobs.labels(job_namespace=namespace, phase=phase).set(n)
        for reason, n in waiting.items():
            self.jobs_waiting.labels(job_namespace=namespace, reason=reason).set(n)
        exported.update(waiting)

    def job_finished(self, *, job: str, namespace: str, gpu_type: str, model_family: str,
                     predicted_seconds: float, actual_seconds: float, pace_eta_seconds: float | None = None) -> None:
        """Export a finished job's predicted and actual seconds, and observe its error ratio and its ETA's."""
        with self._lock:
            admission = self._families.admit(model_family or UNKNOWN_FAMILY, now=self._clock())
            for family in admission.stale:
                for gpu in self._family_gpu_types.pop(family, set()):
                    _remove(self.prediction_error_ratio, gpu, family)
            labels = {"trainingjob": job, "job_namespace": namespace, "gpu_type": gpu_type,
                      "model_family": admission.value}
            key = f"{namespace}/{job}"
            self._series.setdefault(key, set()).add(tuple(labels[name] for name in JOB_LABELS))
            self._series.move_to_end(key)
            while len(self._series) > self.max_jobs_with_series:
                self._forget_series(next(iter(self._series)))
            self.job_predicted_seconds.labels(**labels).set(predicted_seconds)
            self.job_actual_seconds.labels(**labels).set(actual_seconds)
            if predicted_seconds > 0:
                self._family_gpu_types.setdefault(admission.value, set()).add(gpu_type)
                self.prediction_error_ratio.labels(gpu_type=gpu_type, model_family=admission.value).observe(
                    actual_seconds / predicted_seconds)
            if pace_eta_seconds:
                self.eta_error_ratio.labels(gpu_type=gpu_type, eta_source="pace").observe(
                    actual_seconds / pace_eta_seconds)
            elif predicted_seconds > 0:
                self.eta_error_ratio.labels(gpu_type=gpu_type, eta_source="prediction").observe(
                    actual_seconds / predicted_seconds)

    def _forget_series(self, job: str) -> None:
        """Remove the per-job gauge series of `job` ("ns/name"); the caller holds the lock."""
        for values in self._series.pop(job, set()):
            for gauge in (self.job_predicted_seconds, self.job_actual_seconds):
                _remove(gauge, *values)


def _remove(metric: Gauge | Histogram, *values: str) -> None:
    """Drop one labelled series; one that was never created is fine."""
    try:
        metric.remove(*values)
    except KeyError:
        pass
