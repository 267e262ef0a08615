"""Runtime predictions as the operator stores them: from the predictor, or a stated fallback.

Pure: converts the predictor's answer, builds fallbacks (the user's estimate, else a conservative default), and
scales a prediction to the work that remains after an eviction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from offpeak_core.pace import measured_p90_ratio

PredictionSource = Literal["predictor", "user-estimate", "default"]


@dataclass(frozen=True, slots=True)
class FallbackSettings:
    """How pessimistic a prediction without the predictor is."""

    default_step_seconds: float = 1.0  # per step when nothing else is known: slow on purpose (overestimate)
    p90_factor: float = 1.5  # p90 = p50 * factor for fallbacks


@dataclass(frozen=True, slots=True)
class GpuPrediction:
    gpu_type: str  # canonical name (node label value)
    step_seconds: float
    step_seconds_p90: float
    job_seconds: float
    job_seconds_p90: float
    gpu: str = ""  # as the user wrote it
    model_version: str = ""
    correction_samples: int = 0  # measured samples the predictor corrected this answer with
    correction_factor: float = 1.0  # corrected p50 / the model's own p50
    peak_memory_gib: float | None = None  # a step's predicted peak GPU memory (None: not predicted)
    gpu_memory_gib: float | None = None  # this GPU type's memory
    fits_memory: bool | None = None  # the predictor's verdict: peak within 95 % of the GPU's memory
    interconnect: str = ""  # the links a multi-GPU prediction assumed (in a node, between nodes), in words

    def memory_fields(self) -> dict[str, Any]:
        """The memory verdict, when the predictor gave one (status keys)."""
        if self.fits_memory is None:
            return {}
        return {"peakMemoryGiB": self.peak_memory_gib, "gpuMemoryGiB": self.gpu_memory_gib,
                "fitsMemory": self.fits_memory}

    def to_status(self) -> dict[str, Any]:
        out = {
            "gpu": self.gpu, "gpuType": self.gpu_type, "stepSeconds": self.step_seconds,
            "stepSecondsP90": self.step_seconds_p90, "jobSeconds": self.job_seconds,
            "jobSecondsP90": self.job_seconds_p90, "modelVersion": self.model_version,
        }  # fmt: skip
        if self.correction_samples:
            out.update(correctionSamples=self.correction_samples, correctionFactor=self.correction_factor)
        out.update(self.memory_fields())
        if self.interconnect:
            out["interconnect"] = self.interconnect
        return out

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> GpuPrediction:
        return cls(
            gpu_type=str(raw["gpuType"]), gpu=str(raw.get("gpu", "")),
            step_seconds=float(raw.get("stepSeconds", 0.0)), step_seconds_p90=float(raw.get("stepSecondsP90", 0.0)),
            job_seconds=float(raw.get("jobSeconds", 0.0)), job_seconds_p90=float(raw.get("jobSecondsP90", 0.0)),
            model_version=str(raw.get("modelVersion", "")),
            correction_samples=int(raw.get("correctionSamples", 0)),
            correction_factor=float(raw.get("correctionFactor", 1.0)),
            peak_memory_gib=_optional_float(raw.get("peakMemoryGiB")),
            gpu_memory_gib=_optional_float(raw.get("gpuMemoryGiB")),
            fits_memory=raw["fitsMemory"] if isinstance(raw.get("fitsMemory"), bool) else None,
            interconnect=str(raw.get("interconnect", "")),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Prediction:
    source: PredictionSource
    steps: int  # the steps the job_seconds figures cover (the whole job)
    gpus: tuple[GpuPrediction, ...]
    model_version: str = ""
    graph_hash: str = ""

    def for_gpu(self, gpu_type: str | None) -> GpuPrediction | None:
        for p in self.gpus:
            if p.gpu_type == gpu_type or p.gpu == gpu_type:
                return p
        return None

    def fastest(self) -> GpuPrediction | None:
        return min(self.gpus, key=lambda p: p.job_seconds, default=None)

    def to_status(self) -> dict[str, Any]:
        return {
            "source": self.source, "steps": self.steps, "modelVersion": self.model_version,
            "graphHash": self.graph_hash, "gpus": [p.to_status() for p in self.gpus],
        }  # fmt: skip

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> Prediction | None:
        if not raw or not raw.get("gpus"):
            return None
        return cls(
            source=raw.get("source", "default"), steps=int(raw.get("steps", 0)),
            gpus=tuple(GpuPrediction.from_status(g) for g in raw["gpus"]),
            model_version=str(raw.get("modelVersion", "")), graph_hash=str(raw.get("graphHash", "")),
        )  # fmt: skip


class PredictorResponseError(ValueError):
    """The predictor answered, but not in the documented shape."""


def from_predictor(response: Mapping[str, Any], *, steps: int, asked: Sequence[str],
                   canonical: Sequence[str]) -> Prediction:
    """Convert a `/v1/predict` answer. `asked[i]` is the name sent, `canonical[i]` its node-label name."""
    try:
        rows = response["predictions"]
        by_gpu = {str(r["gpu"]): r for r in rows}
        gpus: list[GpuPrediction] = []
        for name, canon in zip(asked, canonical, strict=True):
            row = by_gpu.get(name)
            if row is None:
                raise PredictorResponseError(f"predictor gave no prediction for GPU {name!r}")
            step = _seconds(row["step_seconds"], "step_seconds", name)
            job = _seconds(row["job_seconds"], "job_seconds", name)
            correction = row.get("correction") or {}
            gpus.append(GpuPrediction(
                gpu=name, gpu_type=str(row.get("gpu_type") or canon),
                step_seconds=step, step_seconds_p90=_seconds(row.get("step_seconds_p90", step), "step_seconds_p90", name),
                job_seconds=job, job_seconds_p90=_seconds(row.get("job_seconds_p90", job), "job_seconds_p90", name),
                model_version=str(row.get("model_version", response.get("model_version", ""))),
                correction_samples=int(correction.get("samples", 0)),
                correction_factor=_seconds(correction.get("factor", 1.0), "correction.factor", name),
                peak_memory_gib=_optional_float(row.get("peak_memory_gib")),
                gpu_memory_gib=_optional_float(row.get("gpu_memory_gib")),
                fits_memory=row["fits_memory"] if isinstance(row.get("fits_memory"), bool) else None,
                interconnect=interconnect_words(row.get("interconnect")),
            ))  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, PredictorResponseError):
            raise
        raise PredictorResponseError(f"unexpected predictor answer: {e!r}") from e
    return Prediction(source="predictor", steps=steps, gpus=tuple(gpus),
                      model_version=str(response.get("model_version", "")),
                      graph_hash=str(response.get("graph_hash", "")))


def interconnect_words(raw: Any) -> str:
    """The predictor's `interconnect` object in one line for the status: layout, then each link it assumed."""
    if not isinstance(raw, Mapping):
        return ""
    layout = f"{raw.get('nodes', 1)} node(s) x {raw.get('gpus_per_node', '?')} GPU(s)"
    links = [f"{where.replace('_', ' ')}: {raw[where]}" for where in ("within_node", "between_nodes") if raw.get(where)]
    return "; ".join([layout, *links])[:500]


def _seconds(value: Any, field_name: str, gpu: str) -> float:
    """A finite, non-negative number from the predictor's answer, else PredictorResponseError (so NaN or
    Infinity never reaches a pod annotation or the job's status: the job falls back instead)."""
    number = float(value)
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise PredictorResponseError(f"predictor answered {field_name}={value!r} for GPU {gpu!r}: not a finite "
                                     "number >= 0")
    return number


def fallback(*, asked: Sequence[str], canonical: Sequence[str], steps: int, estimated_seconds: float | None,
             settings: FallbackSettings, startup_seconds: float | None = None) -> Prediction:
    """The same estimate for every allowed GPU type: the user's, else `default_step_seconds` per step.

    The user's estimate is the whole job already; the per-step default adds the job's own start-up if given.
    """
    if estimated_seconds is not None and estimated_seconds > 0:
        source: PredictionSource = "user-estimate"
        job = float(estimated_seconds)
    else:
        source = "default"
        job = settings.default_step_seconds * max(steps, 1) + (startup_seconds or 0.0)
    step = job / max(steps, 1)
    gpus = tuple(
        GpuPrediction(gpu=name, gpu_type=canon, step_seconds=step, step_seconds_p90=step * settings.p90_factor,
                      job_seconds=job, job_seconds_p90=job * settings.p90_factor)
        for name, canon in zip(asked, canonical, strict=True)
    )
    return Prediction(source=source, steps=steps, gpus=gpus)


def remaining_fraction(*, total_steps: int, completed_steps: int) -> float:
    if total_steps <= 0:
        return 1.0
    return max(0.0, min(1.0, (total_steps - completed_steps) / total_steps))


def remaining_seconds(prediction: Prediction, *, completed_steps: int,
                      measured_step_seconds: Mapping[str, Sequence[float]] | None = None) -> dict[str, dict[str, Any]]:
    """Per GPU type p50/p90 seconds of the work left, and the memory verdict when there is one: the
    `offpeak.io/predicted-job-seconds` annotation the extender places by.

    A resumed job that measured its own step time on a GPU type (its progress reports) is timed by that, not by
    the prediction: start-up plus the steps left at the measured pace (the latest), with the narrow p90 of a
    measured pace (`offpeak_core.pace`: the spread of its measurements there, at least 1.1 × p50) instead of the
    prediction's. Other GPU types keep the prediction. `measured_step_seconds`: per GPU type, the step times its
    attempts measured there, oldest first."""
    frac = remaining_fraction(total_steps=prediction.steps, completed_steps=completed_steps)
    measured = measured_step_seconds or {}
    out: dict[str, dict[str, Any]] = {}
    for p in prediction.gpus:
        p50, p90 = p.job_seconds * frac, p.job_seconds_p90 * frac
        paces = measured.get(p.gpu_type)
        if paces and completed_steps > 0 and prediction.steps > 0 and p.job_seconds > 0:
            startup = max(0.0, p.job_seconds - prediction.steps * p.step_seconds)
            left = max(0, prediction.steps - completed_steps)
            p50 = startup + left * paces[-1]
            p90 = p50 * measured_p90_ratio(paces)
        entry: dict[str, Any] = {"p50": round(p50, 3), "p90": round(p90, 3)}
        if p.fits_memory is not None:
            entry["fits_memory"] = p.fits_memory
            if p.peak_memory_gib is not None:
                entry["peak_memory_gib"] = p.peak_memory_gib
            if p.gpu_memory_gib is not None:
                entry["gpu_memory_gib"] = p.gpu_memory_gib
        out[p.gpu_type] = entry
    return out


def measured_step_seconds(measurements: Any) -> dict[str, list[float]]:
    """The step times the job's own progress reports measured, per GPU type, oldest first (status.measurements:
    later entries are later attempts; `live`: reported while the attempt ran, kept when it left no final report)."""
    out: dict[str, list[float]] = {}
    for m in measurements or []:
        if not isinstance(m, Mapping) or m.get("source") not in ("progress", "live"):
            continue
        step = _optional_float(m.get("stepSeconds"))
        if step and isinstance(m.get("gpuType"), str):
            out.setdefault(m["gpuType"], []).append(step)
    return out


def _optional_float(value: Any) -> float | None:
    """A finite number >= 0, else None (absent, or a value we will not place by)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None
