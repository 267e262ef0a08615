"""Runtime beliefs: the predictor's error profile (per-sample or aggregate report) and user estimates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from offpeak_sim import estimates


def test_default_profile_p90_covers_ninety_percent() -> None:
    prof = estimates.default_profile(sigma=0.4, seed=1)
    rng = np.random.default_rng(2)
    ratio = prof.sample_ratio(rng, 50_000)  # prediction / truth
    covered = (1.0 / ratio) <= prof.p90_ratio  # truth <= prediction * p90 ratio
    assert covered.mean() == pytest.approx(0.9, abs=0.01)


def test_per_sample_records_are_used_when_present(tmp_path: Path) -> None:
    rows = [{"predicted": 100.0 * f, "actual": 100.0} for f in np.linspace(0.5, 2.0, 60)]
    (tmp_path / "eval.json").write_text(json.dumps({"samples": rows}))
    prof = estimates.profile_from_reports(tmp_path)
    assert prof is not None and "60 samples" in prof.source
    assert prof.p90_ratio == pytest.approx(np.quantile(1 / np.linspace(0.5, 2.0, 60), 0.9))


def test_eval_predictor_aggregate_report_gives_lognormal_sigma(tmp_path: Path) -> None:
    doc = {"schemes": {"leave_one_gpu_out": {"overall": {"offpeak": {"rmse_log": 0.6}}},
                       "leave_one_family_out": {"overall": {"offpeak": {"rmse_log": 0.25}}}}}
    (tmp_path / "predictor_eval.json").write_text(json.dumps(doc))
    prof = estimates.profile_from_reports(tmp_path)
    assert prof is not None and "leave_one_family_out" in prof.source
    assert prof.p90_ratio == pytest.approx(math.exp(estimates.Z90 * 0.25))


def test_no_usable_report_means_none(tmp_path: Path) -> None:
    assert estimates.profile_from_reports(tmp_path / "absent") is None
    (tmp_path / "x.json").write_text("{not json")
    (tmp_path / "y.json").write_text(json.dumps({"mape": 12}))
    assert estimates.profile_from_reports(tmp_path) is None


def test_user_estimates_are_whole_hours_and_mostly_generous() -> None:
    true = np.full(5000, 5000.0)
    est = estimates.user_estimates(true, rng=np.random.default_rng(0))
    assert np.all(est % 3600 == 0) and np.all(est >= 3600)
    assert (est >= true).mean() > 0.75


def test_zero_sigma_is_a_perfect_predictor() -> None:
    prof = estimates.default_profile(sigma=0.0)
    assert prof.p90_ratio == 1.0
    assert np.all(prof.sample_ratio(np.random.default_rng(0), 100) == 1.0)
    with pytest.raises(ValueError):
        estimates.default_profile(sigma=-1)
