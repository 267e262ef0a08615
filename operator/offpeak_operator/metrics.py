"""Prometheus metrics of the operator, on an injectable registry (a fresh one per test)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from offpeak_operator.statemachine import REQUEUE_REASONS, Phase

RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)
# Labels of the per-job gauges (the dashboard groups by them).
JOB_LABELS = ("trainingjob", "job_namespace", "gpu_type", "model_family")
# The predictor endpoints the operator calls (offpeak_operator.predictor_http).
PREDICTOR_ENDPOINTS = ("/v1/predict", "/v1/samples")
MAX_JOBS_WITH_SERIES = 2000  # finished jobs whose per-job gauges are kept (oldest dropped first)
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class OperatorMetrics:
    """All operator metrics. Per-job gauges carry `trainingjob` so Grafana can plot predicted vs actual per job."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 max_jobs_with_series: int = MAX_JOBS_WITH_SERIES) -> None:  # fmt: skip
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_jobs_with_series = max_jobs_with_series
        self._series: OrderedDict[str, set[tuple[str, ...]]] = OrderedDict()  # "ns/name" -> label values
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
        self.jobs = Gauge("offpeak_jobs", "TrainingJobs known to this operator, by phase", ("phase",),
                          registry=self.registry)
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
        self._phases: dict[str, str] = {}
        self._lock = threading.Lock()
        for phase in Phase:
            self.jobs.labels(phase=phase).set(0)
        # Known label values exported at 0 from the start, so increase()/rate() see the first event.
        for reason in REQUEUE_REASONS:
            self.job_requeues_total.labels(reason=reason)
        for endpoint in PREDICTOR_ENDPOINTS:
            self.predictor_failures_total.labels(endpoint=endpoint)
            self.predictor_request_seconds.labels(endpoint=endpoint)

    def set_phase(self, job: str, phase: str | None) -> None:
        """Record `job`'s phase (None: forget the job) and refresh `offpeak_jobs{phase}`."""
        with self._lock:
            if phase is None:
                self._phases.pop(job, None)
                self._forget_series(job)
            else:
                self._phases[job] = phase
            counts: dict[str, int] = {str(p): 0 for p in Phase}
            for p in self._phases.values():
                counts[p] = counts.get(p, 0) + 1
            for p, n in counts.items():
                self.jobs.labels(phase=p).set(n)

    def job_finished(self, *, job: str, namespace: str, gpu_type: str, model_family: str,
                     predicted_seconds: float, actual_seconds: float) -> None:
        labels = {"trainingjob": job, "job_namespace": namespace, "gpu_type": gpu_type,
                  "model_family": model_family or "unknown"}
        with self._lock:
            key = f"{namespace}/{job}"
            self._series.setdefault(key, set()).add(tuple(labels[name] for name in JOB_LABELS))
            self._series.move_to_end(key)
            while len(self._series) > self.max_jobs_with_series:
                self._forget_series(next(iter(self._series)))
        self.job_predicted_seconds.labels(**labels).set(predicted_seconds)
        self.job_actual_seconds.labels(**labels).set(actual_seconds)
        if predicted_seconds > 0:
            self.prediction_error_ratio.labels(gpu_type=gpu_type, model_family=labels["model_family"]).observe(
                actual_seconds / predicted_seconds)

    def _forget_series(self, job: str) -> None:
        """Remove the per-job gauge series of `job` ("ns/name"); the caller holds the lock."""
        for values in self._series.pop(job, set()):
            for gauge in (self.job_predicted_seconds, self.job_actual_seconds):
                try:
                    gauge.remove(*values)
                except KeyError:
                    pass
