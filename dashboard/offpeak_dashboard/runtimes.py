"""Predicted vs actual job runtimes: records, parsing, joining (pure) — the figure lives in `plot.py`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from offpeak.errors import UserError

# Keys accepted in JSON records, in order of preference (snake_case and the CRD status' camelCase).
_JOB_KEYS = ("job", "name", "trainingjob")
_GPU_KEYS = ("gpu_type", "gpuType", "gpu")
_PREDICTED_KEYS = ("predicted_seconds", "predictedSeconds", "predicted")
_ACTUAL_KEYS = ("actual_seconds", "actualSeconds", "actual")


@dataclass(frozen=True)
class JobRuntime:
    """One finished job: predicted (p50) and actual seconds on the GPU type it ran on."""

    job: str
    gpu_type: str
    predicted_seconds: float
    actual_seconds: float

    @property
    def ratio(self) -> float:
        """actual / predicted; > 1 means the job ran longer than predicted."""
        return self.actual_seconds / self.predicted_seconds


def _first(record: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in record and record[key] is not None:
            return record[key]
    return None


def _seconds(value: Any, *, what: str, where: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError) as e:
        raise UserError(f"{where}: {what} must be a number of seconds, got {value!r}") from e
    if not math.isfinite(seconds) or seconds <= 0:
        raise UserError(f"{where}: {what} must be a positive number of seconds, got {value!r}")
    return seconds


def record_from_mapping(record: Mapping[str, Any], *, where: str) -> JobRuntime:
    """Validate one JSON record: {"job", "gpu_type", "predicted_seconds", "actual_seconds"}."""
    if not isinstance(record, Mapping):
        raise UserError(f"{where}: expected an object, got {type(record).__name__}")
    job = _first(record, _JOB_KEYS)
    namespace = record.get("namespace")
    if job is None:
        raise UserError(f"{where}: missing the job name (one of {', '.join(_JOB_KEYS)})")
    if namespace and "/" not in str(job):
        job = f"{namespace}/{job}"
    gpu = _first(record, _GPU_KEYS)
    if gpu is None:
        raise UserError(f"{where}: missing the GPU type (one of {', '.join(_GPU_KEYS)})")
    predicted = _first(record, _PREDICTED_KEYS)
    actual = _first(record, _ACTUAL_KEYS)
    if predicted is None or actual is None:
        raise UserError(
            f"{where}: needs both predicted_seconds and actual_seconds (finished jobs only), got keys {sorted(record)}"
        )
    return JobRuntime(
        job=str(job),
        gpu_type=str(gpu),
        predicted_seconds=_seconds(predicted, what="predicted_seconds", where=where),
        actual_seconds=_seconds(actual, what="actual_seconds", where=where),
    )


def records_from_trainingjobs(items: Sequence[Mapping[str, Any]]) -> list[JobRuntime]:
    """Finished TrainingJobs (`kubectl get tj -A -o json`): status.predictedSeconds/actualSeconds/gpuType."""
    records: list[JobRuntime] = []
    for item in items:
        status = item.get("status") or {}
        meta = item.get("metadata") or {}
        if not status.get("predictedSeconds") or not status.get("actualSeconds"):
            continue  # not finished (or never predicted): nothing to compare yet
        records.append(
            record_from_mapping(
                {
                    "job": meta.get("name"),
                    "namespace": meta.get("namespace"),
                    "gpu_type": status.get("gpuType") or "unknown",
                    "predicted_seconds": status["predictedSeconds"],
                    "actual_seconds": status["actualSeconds"],
                },
                where=f"TrainingJob {meta.get('namespace')}/{meta.get('name')}",
            )
        )
    return records


def records_from_json(document: Any, *, source: str = "input") -> list[JobRuntime]:
    """Accept a list of records, an object with a "jobs" list, or `kubectl get trainingjobs -o json` output."""
    if isinstance(document, Mapping) and isinstance(document.get("items"), list):
        return records_from_trainingjobs(document["items"])
    items = document.get("jobs") if isinstance(document, Mapping) else document
    if not isinstance(items, list):
        raise UserError(f"{source}: expected a JSON list of jobs or an object with a \"jobs\" list")
    return [record_from_mapping(item, where=f"{source}: jobs[{i}]") for i, item in enumerate(items)]


# The operator's per-job gauge labels (offpeak_operator.metrics.JOB_LABELS); whatever else the scrape adds
# (job, instance, pod, ...) differs per target, so join on exactly these.
_KEY_LABELS = ("job_namespace", "trainingjob", "gpu_type", "model_family")


def _job_name(labels: Mapping[str, str]) -> str:
    name = labels.get("trainingjob") or "?"
    namespace = labels.get("job_namespace")
    return f"{namespace}/{name}" if namespace else name


def join_prometheus_vectors(
    *, predicted: Iterable[Mapping[str, Any]], actual: Iterable[Mapping[str, Any]]
) -> list[JobRuntime]:
    """Join two instant vectors (Prometheus API `result` items) on the operator's per-job labels."""

    def key(item: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        labels = item.get("metric", {})
        return tuple((k, labels[k]) for k in _KEY_LABELS if k in labels)

    def value(item: Mapping[str, Any]) -> float:
        return float(item["value"][1])

    predicted_by_key = {key(item): value(item) for item in predicted}
    joined: list[JobRuntime] = []
    for item in actual:
        k = key(item)
        if k not in predicted_by_key:
            continue
        p, a = predicted_by_key[k], value(item)
        if not (math.isfinite(p) and math.isfinite(a) and p > 0 and a > 0):
            continue
        labels = dict(k)
        joined.append(
            JobRuntime(
                job=_job_name(labels), gpu_type=labels.get("gpu_type", "unknown"), predicted_seconds=p, actual_seconds=a
            )
        )
    return sorted(joined, key=lambda r: (r.gpu_type, r.job))


@dataclass(frozen=True)
class Summary:
    """What the plot title says: how many jobs and how far off the predictions were."""

    jobs: int
    median_abs_log2_error: float  # 1.0 = typically off by 2x
    within_25_percent: float  # fraction of jobs with 0.8 <= ratio <= 1.25


def summarise(records: Sequence[JobRuntime]) -> Summary:
    """Scale-free error summary of the given jobs."""
    if not records:
        return Summary(jobs=0, median_abs_log2_error=float("nan"), within_25_percent=float("nan"))
    errors = sorted(abs(math.log2(r.ratio)) for r in records)
    mid = len(errors) // 2
    median = errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2
    within = sum(1 for r in records if 0.8 <= r.ratio <= 1.25) / len(records)
    return Summary(jobs=len(records), median_abs_log2_error=median, within_25_percent=within)
