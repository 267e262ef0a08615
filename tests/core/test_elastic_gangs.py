"""Elastic gangs in the core: the widest width that fits, runtimes scaled to the width, lowest indexes first."""

from __future__ import annotations

import pytest

import offpeak_core.gangplans as gangplans
from offpeak_core.gangplans import plan_gang
from offpeak_core.gangs import (
    COMPLETE,
    MIN_WORK_LEFT,
    GangKey,
    GangReservations,
    admitted_workers,
    at_width,
    width_scale,
    with_work_left,
    work_left,
)
from offpeak_core.model import NodeView, PodRequest, Prediction

NOW = 1_000_000.0
H = 3600.0
A100 = "A100-SXM4-40GB"
KEY = GangKey("ml", "bert", "0")


def node(name: str, *, free: int = 8, end: float | None = NOW + 10 * H) -> NodeView:
    return NodeView(name=name, gpu_type=A100, gpus_total=8, gpus_free_now=free, window_end=end)


def worker(gpus: int = 8, p90: float = H) -> PodRequest:
    """A worker whose job takes `p90` at full width (needs p90 x 1.15 of window with the default margin)."""
    return PodRequest(name="bert-0", namespace="ml", gpus=gpus, predicted={A100: Prediction(p50=p90 * 0.8, p90=p90)},
                      uid="w0")


def test_the_widest_width_that_fits_is_chosen() -> None:
    nodes = [node("a"), node("b"), node("c")]  # three 8-GPU nodes: room for 3 of the 4 workers
    plan = plan_gang(pod=worker(), workers=4, nodes=nodes, now=NOW, min_workers=1)
    assert plan.fits and sorted(plan.places) == ["a", "b", "c"] and plan.width == 3
    assert plan_gang(pod=worker(), workers=4, nodes=[*nodes, node("d")], now=NOW, min_workers=1).width == 4


def test_a_narrower_width_runs_longer_so_it_needs_a_longer_window() -> None:
    # 4 workers, 1 h at full width: at 2 workers 2 h (needs 2.3 h of window), at 1 worker 4 h (needs 4.6 h).
    two = [node("a", end=NOW + 3 * H), node("b", end=NOW + 3 * H)]
    plan = plan_gang(pod=worker(), workers=4, nodes=two, now=NOW, min_workers=1)
    assert sorted(plan.places) == ["a", "b"] and plan.width == 2
    too_short = plan_gang(pod=worker(), workers=4, nodes=[node("a", end=NOW + 3 * H)], now=NOW, min_workers=1)
    assert not too_short.fits and too_short.width == 0  # 1 worker would need 4.6 h; unscaled it would fit
    assert too_short.reason == ("gang of 4 worker(s) x 8 GPU(s) needs 1 to 4 place(s) in fitting windows (elastic: "
                                "fewer workers run longer); 0 found on 0 node(s) at the runtime of 1 worker(s)")
    assert too_short.failed["a"].startswith("window ends within 3h")
    long_enough = plan_gang(pod=worker(), workers=4, nodes=[node("a", end=NOW + 5 * H)], now=NOW, min_workers=1)
    assert long_enough.places == ("a",) and long_enough.width == 1


def test_no_width_at_or_above_the_minimum_fits() -> None:
    nodes = [node("a"), node("b", free=0)]
    plan = plan_gang(pod=worker(), workers=4, nodes=nodes, now=NOW, min_workers=2)
    assert not plan.fits
    assert plan.reason.startswith("gang of 4 worker(s) x 8 GPU(s) needs 2 to 4 place(s)")
    assert plan.failed["a"] == plan.reason  # a would take one worker, but the job needs two at least
    assert plan.failed["b"].startswith("needs 8 GPU(s), 0 of 8 free now")


def test_workers_already_bound_count_in_the_width_the_runtime_is_scaled_to() -> None:
    # 2 of 4 bound, one more joins: the job runs at 3 workers, 4/3 h (needs 1.53 h). At 1 worker it would need 4.6 h.
    plan = plan_gang(pod=worker(), workers=2, full_width=4, nodes=[node("a", end=NOW + 1.6 * H)], now=NOW,
                     min_workers=1)
    assert plan.places == ("a",) and plan.width == 3
    assert not plan_gang(pod=worker(), workers=2, full_width=4, nodes=[node("a", end=NOW + 1.5 * H)], now=NOW,
                         min_workers=1).fits


def test_a_rigid_gang_is_planned_as_before() -> None:
    cases = [
        ([node("a"), node("b")], 2),
        ([node("a"), node("b", end=NOW + 0.5 * H)], 2),  # does not fit
        ([node("a", free=4), node("b")], 3),
    ]
    for nodes, workers in cases:
        rigid = plan_gang(pod=worker(gpus=4), workers=workers, nodes=nodes, now=NOW)
        assert plan_gang(pod=worker(gpus=4), workers=workers, nodes=nodes, now=NOW, min_workers=workers) == rigid
        # Bound workers of a rigid gang: the rest run at full width, so no runtime is scaled.
        after = plan_gang(pod=worker(gpus=4), workers=workers, nodes=nodes, now=NOW, full_width=workers + 2)
        assert (after.places, after.failed, after.reason) == (rigid.places, rigid.failed, rigid.reason)
        assert after.width == (workers + 2 if rigid.fits else 0)
    assert plan_gang(pod=worker(), workers=2, nodes=[node("a"), node("b")], now=NOW).width == 2


def test_min_workers_and_full_width_are_checked() -> None:
    for bad in (0, -1, 3):
        with pytest.raises(ValueError, match="min_workers must be in 1..2"):
            plan_gang(pod=worker(), workers=2, nodes=[node("a")], now=NOW, min_workers=bad)
    with pytest.raises(ValueError, match="full_width must be >= workers"):
        plan_gang(pod=worker(), workers=3, nodes=[node("a")], now=NOW, min_workers=1, full_width=2)


def test_narrower_widths_without_room_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = gangplans._plan_rigid

    def counting(**kwargs: object) -> gangplans.GangPlan:
        calls.append(kwargs["workers"])  # type: ignore[arg-type]
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gangplans, "_plan_rigid", counting)
    plan = plan_gang(pod=worker(), workers=8, nodes=[node("a"), node("b")], now=NOW, min_workers=1)
    assert plan.width == 2 and calls == [8, 2]  # room for 2 at width 8: widths 7..3 cannot have more
    calls.clear()
    plan_gang(pod=worker(), workers=8, nodes=[node("a"), node("b")], now=NOW)
    assert calls == [8]  # a rigid gang plans once


def test_at_width_scales_every_gpu_types_p50_and_p90() -> None:
    pod = PodRequest(name="w", predicted={A100: Prediction(80.0, 100.0, peak_memory_gib=10.0), "T4": Prediction(
        300.0, 400.0)})
    half = at_width(pod, width=2, full_width=4)
    assert half.predicted == {A100: Prediction(160.0, 200.0, peak_memory_gib=10.0), "T4": Prediction(600.0, 800.0)}
    assert pod.predicted is not None and pod.predicted[A100].p90 == 100.0  # the original is untouched
    assert at_width(pod, width=4, full_width=4) is pod
    blind = PodRequest(name="w")
    assert at_width(blind, width=1, full_width=4) is blind


def test_work_left_counts_progress_at_the_narrowest_width_up_to_the_last_checkpoint() -> None:
    # 2 workers, at least 1: 120 s at full width is 240 s at one worker. 160 s run, 40 s since a checkpoint at most:
    # 120 s saved of 240 s at the narrowest width, so half the work is left.
    assert work_left(elapsed_seconds=160, p90_seconds=120, min_workers=1, full_width=2,
                     checkpoint_interval_seconds=40) == pytest.approx(0.5)
    # a gang that never runs below 2 of 4 has done as much in 160 s as one of 2 that never runs below 1
    assert work_left(elapsed_seconds=160, p90_seconds=120, min_workers=2, full_width=4,
                     checkpoint_interval_seconds=40) == pytest.approx(0.5)
    # ... and one that never runs below 3 of 4, more
    assert work_left(elapsed_seconds=160, p90_seconds=120, min_workers=3, full_width=4,
                     checkpoint_interval_seconds=40) == pytest.approx(0.25)


@pytest.mark.parametrize("elapsed, interval", [(160.0, None), (30.0, 40.0), (0.0, 40.0), (-5.0, 40.0)])
def test_no_progress_is_claimed_without_a_checkpoint_interval_or_before_the_first_checkpoint(
        elapsed: float, interval: float | None) -> None:
    assert work_left(elapsed_seconds=elapsed, p90_seconds=120, min_workers=1, full_width=2,
                     checkpoint_interval_seconds=interval) == 1.0


def test_work_left_falls_with_time_and_stops_at_its_floor() -> None:
    shares = [work_left(elapsed_seconds=t, p90_seconds=120, min_workers=1, full_width=2,
                        checkpoint_interval_seconds=40) for t in range(0, 1000, 10)]
    assert all(a >= b for a, b in zip(shares, shares[1:]))
    assert shares[0] == 1.0 and shares[-1] == MIN_WORK_LEFT  # a job past its p90 still has some left
    assert work_left(elapsed_seconds=100, p90_seconds=0, min_workers=1, full_width=2,
                     checkpoint_interval_seconds=40) == 1.0


def test_with_work_left_scales_every_gpu_types_p50_and_p90() -> None:
    pod = PodRequest(name="w", predicted={A100: Prediction(80.0, 100.0, peak_memory_gib=10.0), "T4": Prediction(
        300.0, 400.0)})
    quarter = with_work_left(pod, 0.25)
    assert quarter.predicted == {A100: Prediction(20.0, 25.0, peak_memory_gib=10.0), "T4": Prediction(75.0, 100.0)}
    assert pod.predicted is not None and pod.predicted[A100].p90 == 100.0  # the original is untouched
    assert with_work_left(pod, 1.0) is pod
    blind = PodRequest(name="w")
    assert with_work_left(blind, 0.5) is blind
    with pytest.raises(ValueError, match="share must be > 0"):
        with_work_left(pod, 0.0)


def test_the_lowest_waiting_indexes_get_the_places() -> None:
    assert admitted_workers(size=4, joining=2, bound=()) == {0, 1}
    assert admitted_workers(size=4, joining=1, bound={0, 1}) == {2}
    assert admitted_workers(size=4, joining=3, bound={1}) == {0, 2, 3}
    assert admitted_workers(size=2, joining=1, bound={0, 1}) == frozenset()


def test_a_reservation_names_its_workers_and_ignores_those_bound_before_it() -> None:
    table = GangReservations()
    with pytest.raises(ValueError):
        table.reserve(KEY, places=["a"], gpus=4, now=NOW, workers=[1, 2])
    # Worker 0 runs on a; a has room for one more 4-GPU worker, reserved for worker 1.
    res = table.reserve(KEY, places=["a"], gpus=4, now=NOW, workers=[1], earlier=["w0"])
    assert res.width == 2 and res.admits(1) and not res.admits(2) and not res.admits(None)
    assert table.observe(KEY, {"w0": "a", "w1": None, "w2": None}) is None  # w0's binding takes no place of it
    assert table.withheld() == {"a": 4}
    assert table.admit(KEY, "w1", candidates={"a"}) == "a"
    assert table.observe(KEY, {"w0": "a", "w1": "a", "w2": None}) == COMPLETE
    rigid = GangReservations().reserve(KEY, places=["a", "b"], gpus=4, now=NOW)
    assert rigid.admits(None) and rigid.admits(7) and rigid.width == 2


def test_width_scale_is_full_width_over_width() -> None:
    assert width_scale(width=2, full_width=4) == 2.0 and width_scale(width=3, full_width=3) == 1.0
    for bad in (0, 5):
        with pytest.raises(ValueError, match="width must be in 1..4"):
            width_scale(width=bad, full_width=4)
