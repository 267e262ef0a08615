"""What each policy believes about a job's runtime: the predictor's error profile and a noisy user estimate.

Predictor profile, from the predictor's evaluation report (`reports/predictor/*.json`), in this order:
1. per-sample (prediction, truth) records anywhere in the JSON: bootstrap their log ratios;
2. `offpeak eval-predictor`'s aggregate form (`schemes.<scheme>.overall.offpeak.rmse_log`, preferring
   leave-one-model-family-out, the case of a new model on a known GPU type): log-normal with sigma = rmse_log;
3. otherwise a documented default: log-normal sigma 0.35 (median absolute error ~24 %).
The p90 the extender sees is prediction × the profile's p90 ratio, i.e. the 90th percentile of truth/prediction,
so p90 covers the truth 90 % of the time.

User estimate: users ask for generous round wall times; estimate = truth × exp(N(ln 2, 0.8)) on the reference GPU,
rounded up to a whole hour, scaled to each GPU type (the user is assumed to know relative GPU speeds).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_SIGMA = 0.35
Z90 = 1.2815515655446004
PRED_KEYS = ("predicted", "prediction", "pred", "y_pred", "predicted_seconds", "job_seconds", "step_seconds")
TRUE_KEYS = ("actual", "true", "y_true", "measured", "actual_seconds", "measured_seconds", "target")


@dataclass(frozen=True)
class ErrorProfile:
    """Samples of log(prediction / truth) and the p90 ratio (truth/prediction quantile) used for p90."""

    log_ratios: np.ndarray
    p90_ratio: float
    source: str

    def sample_ratio(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        """Draw prediction/truth ratios from the profile (bootstrap of the samples)."""
        return np.exp(rng.choice(self.log_ratios, size=size))

    def describe(self) -> dict[str, float | str]:
        err = np.abs(np.expm1(self.log_ratios))
        return {
            "source": self.source,
            "samples": int(self.log_ratios.size),
            "median_abs_rel_error": float(np.median(err)),
            "p90_ratio": float(self.p90_ratio),
        }


def default_profile(*, sigma: float = DEFAULT_SIGMA, seed: int = 0) -> ErrorProfile:
    """Log-normal errors with `sigma` (0: a perfect predictor); p90 ratio exp(z90 · sigma)."""
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    rng = np.random.default_rng(seed)
    return ErrorProfile(rng.normal(0.0, sigma, 20_000), math.exp(Z90 * sigma), f"log-normal sigma={sigma}")


def _pairs(obj: Any) -> Iterator[tuple[float, float]]:
    """Yield (prediction, truth) from any list of records in a JSON document that carries both."""
    if isinstance(obj, dict):
        p = next((k for k in PRED_KEYS if isinstance(obj.get(k), (int, float))), None)
        t = next((k for k in TRUE_KEYS if isinstance(obj.get(k), (int, float))), None)
        if p and t:
            yield float(obj[p]), float(obj[t])
        for v in obj.values():
            yield from _pairs(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _pairs(v)


SCHEMES = ("leave_one_family_out", "leave_one_gpu_out")


def _aggregate_sigma(doc: Any) -> tuple[float, str] | None:
    """sigma (rmse of log error) of the offpeak method from an `offpeak eval-predictor` report, if present."""
    schemes = doc.get("schemes") if isinstance(doc, dict) else None
    if not isinstance(schemes, dict):
        return None
    for name in SCHEMES:
        try:
            sigma = float(schemes[name]["overall"]["offpeak"]["rmse_log"])
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(sigma) and sigma > 0:
            return sigma, name
    return None


def profile_from_reports(folder: Path, *, min_samples: int = 30, seed: int = 0) -> ErrorProfile | None:
    """Build a profile from the predictor's JSON reports, or None when none is usable."""
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pairs = np.array([(p, t) for p, t in _pairs(doc) if p > 0 and t > 0 and math.isfinite(p * t)])
        if len(pairs) >= min_samples:
            log_ratios = np.log(pairs[:, 0] / pairs[:, 1])
            p90 = float(np.quantile(np.exp(-log_ratios), 0.9))
            return ErrorProfile(log_ratios, max(1.0, p90), f"{path.name} ({len(pairs)} samples)")
        agg = _aggregate_sigma(doc)
        if agg is not None:
            sigma, scheme = agg
            prof = default_profile(sigma=sigma, seed=seed)
            return ErrorProfile(prof.log_ratios, prof.p90_ratio, f"{path.name} {scheme} rmse_log={sigma:.3f}")
    return None


def user_estimates(
    true_ref_s: np.ndarray, *, rng: np.random.Generator, mu: float = math.log(2.0), sigma: float = 0.8
) -> np.ndarray:
    """Reference-GPU wall-time estimates users would give: noisy, generous, rounded up to whole hours."""
    est = true_ref_s * np.exp(rng.normal(mu, sigma, size=true_ref_s.shape))
    return np.ceil(est / 3600.0) * 3600.0
