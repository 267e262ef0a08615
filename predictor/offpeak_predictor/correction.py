"""Online correction of predictions from measured samples (pure: no I/O, no model, no HTTP).

A measured step time `a` of a job the model predicted at `p` is one observation `x = log(a / p)` of the
model's bias for that job's key. Evidence is kept per key at two levels, the exact graph (content hash) and its
model family, each with the GPU type, precision, mode, per-GPU batch size and GPU count:

    model   : log factor 0, log spread s0 = p90_log_margin / z90 (the model's own p90)
    family  : m_f = w_f * mean_f                          w = n / (n + k)   (k: prior strength)
    graph   : m_g = m_f + w_g * (mean_g - m_f)            (a graph shrinks toward its family, not the model)
    spread  : s^2 = (1 - w) * s_parent^2 + w * noise^2 * (1 + 1/n)

A level with few samples stays close to its parent (the model's prediction); one with many follows its
measurements. `noise` is the run-to-run log spread of the key, estimated from its own samples with a prior of
`noise_log_sd` worth `noise_prior_weight` samples, so the p90 narrows as consistent evidence accumulates and
stays wide when the measurements scatter. Corrected p50 = model p50 * exp(m); p90 = p50 * exp(z90 * s).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Z90 = 1.2815515655446004  # standard normal 90th percentile
# A measurement further than this factor from the model's own prediction is not learned from: a job sample is
# quarantined, a collected row left out of its GPU type's calibration.
QUARANTINE_RATIO = 5.0
Level = Literal["model", "gpu", "family", "graph"]  # gpu: a calibration from collected rows (calibration.py)


@dataclass(frozen=True, slots=True)
class CorrectionSettings:
    """How quickly samples override the model. Units: log of step-time ratios."""

    # k: samples that weigh as much as the parent's estimate (w = n / (n + k)). 0.5 (one sample counts 2/3) was the
    # best-calibrated choice streaming held-out families (bench/feedback_eval.py): smaller k cut the error a little
    # more but let the p90 cover under 90 %; larger k learned slower.
    prior_strength: float = 0.5
    noise_log_sd: float = 0.10  # assumed run-to-run spread of one key's step time before its samples say
    noise_prior_weight: float = 3.0  # pseudo-samples behind noise_log_sd
    quarantine_ratio: float = QUARANTINE_RATIO  # a sample further than this from the model's prediction is not learned


@dataclass(frozen=True, slots=True)
class CorrectionKey:
    """What one correction applies to. `subject` is `graph:<content hash>` or `family:<model family>`."""

    subject: str
    gpu_type: str
    precision: str
    mode: str
    batch_size: int
    num_gpus: int


def keys_for(*, graph_hash: str, family: str, gpu_type: str, precision: str, mode: str, batch_size: int,
             num_gpus: int) -> tuple[CorrectionKey, ...]:  # fmt: skip
    """The keys of one prediction or sample, least specific first (family, then graph; either may be absent)."""
    subjects = ([f"family:{family}"] if family else []) + ([f"graph:{graph_hash}"] if graph_hash else [])
    return tuple(CorrectionKey(subject=s, gpu_type=gpu_type, precision=precision, mode=mode, batch_size=batch_size,
                               num_gpus=num_gpus) for s in subjects)  # fmt: skip


def level_of(key: CorrectionKey) -> Level:
    return "graph" if key.subject.startswith("graph:") else "family"


@dataclass(frozen=True, slots=True)
class Evidence:
    """Count, mean and sum of squared deviations of one key's log ratios (Welford; removable)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> Evidence:
        n = self.n + 1
        mean = self.mean + (x - self.mean) / n
        return Evidence(n=n, mean=mean, m2=self.m2 + (x - self.mean) * (x - mean))

    def remove(self, x: float) -> Evidence:
        if self.n <= 1:
            return Evidence()
        n = self.n - 1
        mean = (self.n * self.mean - x) / n
        return Evidence(n=n, mean=mean, m2=max(0.0, self.m2 - (x - mean) * (x - self.mean)))


@dataclass(frozen=True, slots=True)
class Correction:
    """The correction one prediction gets: multiply p50 by `factor`; p90 = p50 * exp(z90 * log_sd)."""

    log_factor: float
    log_sd: float
    samples: int  # samples at the most specific level that had any
    level: Level

    @property
    def factor(self) -> float:
        return math.exp(self.log_factor)

    @property
    def p90_factor(self) -> float:
        return math.exp(Z90 * self.log_sd)

    def apply(self, model_step_seconds: float) -> tuple[float, float]:
        """(p50, p90) step seconds from the model's p50."""
        p50 = model_step_seconds * self.factor
        return p50, p50 * self.p90_factor


def model_prior(p90_log_margin: float) -> Correction:
    """No samples: the model's own prediction and p90 margin."""
    return Correction(log_factor=0.0, log_sd=max(0.0, p90_log_margin) / Z90, samples=0, level="model")


def calibrated_prior(p90_log_margin: float, *, log_factor: float, rows: int) -> Correction:
    """The model's prediction moved by a GPU type's calibration (`calibration.py`), its p90 margin kept: the
    parent every family and graph of that GPU type refines."""
    return Correction(log_factor=log_factor, log_sd=max(0.0, p90_log_margin) / Z90, samples=rows, level="gpu")


def noise_variance(evidence: Evidence, settings: CorrectionSettings) -> float:
    """Run-to-run log variance of one key: its samples' spread pooled with the prior."""
    prior = settings.noise_prior_weight
    return (prior * settings.noise_log_sd**2 + evidence.m2) / (prior + max(0, evidence.n - 1))


def refine(parent: Correction, evidence: Evidence, *, level: Level, settings: CorrectionSettings) -> Correction:
    """Shrink a level's mean log ratio toward its parent's correction with weight n / (n + k)."""
    if evidence.n <= 0:
        return parent
    w = evidence.n / (evidence.n + settings.prior_strength)
    log_factor = parent.log_factor + w * (evidence.mean - parent.log_factor)
    variance = (1 - w) * parent.log_sd**2 + w * noise_variance(evidence, settings) * (1 + 1 / evidence.n)
    return Correction(log_factor=log_factor, log_sd=math.sqrt(variance), samples=evidence.n, level=level)


def log_ratio(*, actual: float, predicted: float) -> float:
    if actual <= 0 or predicted <= 0 or not math.isfinite(actual) or not math.isfinite(predicted):
        raise ValueError("actual and predicted must be positive, finite seconds")
    return math.log(actual / predicted)


def implausible(x: float, settings: CorrectionSettings) -> str | None:
    """Why a log ratio must not be learned from (too far from the model's own prediction), or None."""
    if abs(x) <= math.log(settings.quarantine_ratio):
        return None
    ratio = math.exp(x)
    return (f"measured step time is {ratio:.3g}x the model's prediction (more than {settings.quarantine_ratio:g}x "
            f"{'over' if x > 0 else 'under'}); stored in quarantine, not learned from")  # fmt: skip


class CorrectionTable:
    """Evidence per key. Mutated only by its owner (the predictor's event loop); reads are dict lookups."""

    def __init__(self, settings: CorrectionSettings = CorrectionSettings()) -> None:
        self.settings = settings
        self._evidence: dict[CorrectionKey, Evidence] = {}

    def add(self, keys: Iterable[CorrectionKey], x: float) -> None:
        for key in keys:
            self._evidence[key] = self._evidence.get(key, Evidence()).add(x)

    def remove(self, keys: Iterable[CorrectionKey], x: float) -> None:
        """Forget one sample learned earlier (retention dropped its row)."""
        for key in keys:
            current = self._evidence.get(key)
            if current is None:
                continue
            reduced = current.remove(x)
            if reduced.n:
                self._evidence[key] = reduced
            else:
                del self._evidence[key]

    def clear(self) -> None:
        self._evidence.clear()

    def evidence(self, key: CorrectionKey) -> Evidence:
        return self._evidence.get(key, Evidence())

    def lookup(self, keys: Sequence[CorrectionKey], *, p90_log_margin: float,
               prior: Correction | None = None) -> Correction:  # fmt: skip
        """The correction for a prediction with these keys (least specific first), refining `prior` (default: the
        model's own answer; a GPU type's calibration where it has one)."""
        correction = prior if prior is not None else model_prior(p90_log_margin)
        for key in keys:
            correction = refine(correction, self.evidence(key), level=level_of(key), settings=self.settings)
        return correction

    def __len__(self) -> int:
        return len(self._evidence)

    def key_counts(self) -> dict[Level, int]:
        counts: dict[Level, int] = {"family": 0, "graph": 0}
        for key in self._evidence:
            counts[level_of(key)] += 1
        return counts
