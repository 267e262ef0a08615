"""The online correction (pure): shrinkage toward the model, then toward the measurements; p90 narrowing."""

from __future__ import annotations

import math
import random

import pytest

from offpeak_predictor.correction import (
    Z90, CorrectionSettings, CorrectionTable, Evidence, implausible, keys_for, log_ratio, model_prior, refine,
)  # fmt: skip

MARGIN = math.log(2.13)  # the shipped model's p90 margin


def keys(graph_hash: str = "sha256:g", family: str = "resnet", gpu: str = "T4"):
    return keys_for(graph_hash=graph_hash, family=family, gpu_type=gpu, precision="fp32", mode="train",
                    batch_size=32, num_gpus=1)


def test_no_samples_is_exactly_the_model() -> None:
    c = CorrectionTable().lookup(keys(), p90_log_margin=MARGIN)
    assert c.samples == 0 and c.level == "model" and c.factor == 1.0
    assert c.apply(0.2) == pytest.approx((0.2, 0.2 * 2.13))


def test_one_sample_moves_half_way_with_k_1_and_many_samples_follow_the_measurements() -> None:
    table = CorrectionTable(CorrectionSettings(prior_strength=1.0))
    x = math.log(1.4)  # every run is 40 % slower than predicted
    table.add(keys(), x)
    one = table.lookup(keys(), p90_log_margin=MARGIN)
    assert one.level == "graph" and one.samples == 1
    # family: half way (w = 1/2); graph: half way from the family's correction toward 1.4
    family = 0.5 * x
    assert one.log_factor == pytest.approx(family + 0.5 * (x - family))
    for _ in range(19):
        table.add(keys(), x)
    many = table.lookup(keys(), p90_log_margin=MARGIN)
    assert many.samples == 20 and many.factor == pytest.approx(1.4, rel=0.01)
    assert abs(many.log_factor - x) < abs(one.log_factor - x)


def test_prior_strength_sets_how_much_one_sample_counts() -> None:
    x = math.log(2.0)
    weak, strong = CorrectionTable(CorrectionSettings(prior_strength=0.25)), CorrectionTable(
        CorrectionSettings(prior_strength=4.0))
    for t in (weak, strong):
        t.add(keys(family=""), x)  # graph level only
    assert weak.lookup(keys(family=""), p90_log_margin=MARGIN).log_factor == pytest.approx(x * 1 / 1.25)
    assert strong.lookup(keys(family=""), p90_log_margin=MARGIN).log_factor == pytest.approx(x * 1 / 5)


def test_p90_narrows_with_consistent_evidence_and_never_starts_wider_than_the_model() -> None:
    table = CorrectionTable()
    widths = [table.lookup(keys(), p90_log_margin=MARGIN).p90_factor]
    rng = random.Random(1)
    for _ in range(30):
        table.add(keys(), math.log(1.3) + rng.gauss(0, 0.03))
        widths.append(table.lookup(keys(), p90_log_margin=MARGIN).p90_factor)
    assert widths[0] == pytest.approx(2.13)
    assert widths[1] < 1.6 and widths[5] < widths[1]
    assert max(b - a for a, b in zip(widths, widths[1:])) < 0.01  # only noise can widen it, and barely
    assert widths[-1] < 1.25  # close to the run-to-run noise, far below the model's x2.13


def test_scattered_measurements_keep_the_p90_wide() -> None:
    tight, loose = CorrectionTable(), CorrectionTable()
    for i in range(10):
        tight.add(keys(), 0.3)
        loose.add(keys(), 0.3 + (0.8 if i % 2 else -0.8))  # same mean, wildly scattered
    t = tight.lookup(keys(), p90_log_margin=MARGIN)
    lo = loose.lookup(keys(), p90_log_margin=MARGIN)
    assert t.log_factor == pytest.approx(lo.log_factor, abs=1e-9)
    assert lo.p90_factor > 2 * t.p90_factor


def test_family_evidence_corrects_an_unseen_graph_of_the_same_family_only() -> None:
    table = CorrectionTable()
    for i in range(6):
        table.add(keys(graph_hash=f"sha256:{i}"), math.log(0.5))
    new_member = table.lookup(keys(graph_hash="sha256:new"), p90_log_margin=MARGIN)
    assert new_member.level == "family" and new_member.samples == 6 and new_member.factor < 0.6
    other_gpu = table.lookup(keys(graph_hash="sha256:new", gpu="A100-SXM4-40GB"), p90_log_margin=MARGIN)
    other_family = table.lookup(keys(graph_hash="sha256:new", family="bert"), p90_log_margin=MARGIN)
    assert other_gpu.samples == 0 and other_family.samples == 0 and other_gpu.factor == 1.0


def test_removing_a_sample_is_the_exact_inverse_of_adding_it() -> None:
    xs = [0.1, -0.3, 0.25, 0.7]
    ev = Evidence()
    for x in xs:
        ev = ev.add(x)
    reduced = ev.remove(xs[-1])
    direct = Evidence()
    for x in xs[:-1]:
        direct = direct.add(x)
    assert reduced.n == direct.n and reduced.mean == pytest.approx(direct.mean) and reduced.m2 == pytest.approx(direct.m2)
    table = CorrectionTable()
    table.add(keys(), 0.4)
    table.remove(keys(), 0.4)
    assert len(table) == 0 and table.lookup(keys(), p90_log_margin=MARGIN).samples == 0


def test_refine_without_evidence_returns_the_parent() -> None:
    parent = model_prior(MARGIN)
    assert refine(parent, Evidence(), level="graph", settings=CorrectionSettings()) is parent
    assert parent.log_sd * Z90 == pytest.approx(MARGIN)


def test_quarantine_threshold_is_five_times_either_way() -> None:
    s = CorrectionSettings()
    assert implausible(log_ratio(actual=4.9, predicted=1.0), s) is None
    assert implausible(log_ratio(actual=1.0, predicted=4.9), s) is None
    over = implausible(log_ratio(actual=5.1, predicted=1.0), s)
    under = implausible(log_ratio(actual=1.0, predicted=6.0), s)
    assert over and "5.1x" in over and "over" in over
    assert under and "under" in under
    with pytest.raises(ValueError):
        log_ratio(actual=0.0, predicted=1.0)


def test_key_counts_by_level() -> None:
    table = CorrectionTable()
    table.add(keys(graph_hash="sha256:a"), 0.1)
    table.add(keys(graph_hash="sha256:b"), 0.1)
    assert table.key_counts() == {"family": 1, "graph": 2} and len(table) == 3
