"""Gang placement in the core: places for all workers or none, GPUs counted per window, reservations over time."""

from __future__ import annotations

from collections import Counter

import pytest

from offpeak_core.gangplans import plan_gang
from offpeak_core.gangs import (
    COMPLETE,
    GONE,
    GangKey,
    GangReservations,
    withhold,
)
from offpeak_core.model import IdleWindow, NodeView, PodRequest, Prediction

NOW = 1_000_000.0
H = 3600.0
A100 = "A100-SXM4-40GB"
KEY = GangKey("ml", "bert", "0")
OTHER = GangKey("ml", "gpt", "1")


def node(name: str, *, free: int = 8, total: int = 8, end: float | None = NOW + 10 * H, gpu: str = A100,
         windows: tuple[IdleWindow, ...] | None = None) -> NodeView:
    return NodeView(name=name, gpu_type=gpu, gpus_total=total, gpus_free_now=free, window_end=end, windows=windows)


def worker(gpus: int = 4, p90: float = H) -> PodRequest:
    return PodRequest(name="bert-0", namespace="ml", gpus=gpus, predicted={A100: Prediction(p50=p90 * 0.8, p90=p90)},
                      uid="w0")


def test_one_fitting_node_for_two_workers_of_a_full_node_each_places_none() -> None:
    nodes = [node("a"), node("b", end=NOW + 0.5 * H)]  # b's window is too short for the job
    plan = plan_gang(pod=worker(gpus=8), workers=2, nodes=nodes, now=NOW)
    assert not plan.fits and plan.places == ()
    assert plan.reason == "gang of 2 worker(s) x 8 GPU(s) needs 2 place(s) in fitting windows; 1 found on 1 node(s)"
    assert plan.failed["a"] == plan.reason  # a fits one worker, but the gang is all or none
    assert plan.failed["b"].startswith("window ends within 30m")  # b keeps its own reason


def test_two_fitting_nodes_take_one_worker_each() -> None:
    plan = plan_gang(pod=worker(gpus=8), workers=2, nodes=[node("a"), node("b")], now=NOW)
    assert sorted(plan.places) == ["a", "b"]


def test_gpus_are_counted_not_nodes_one_node_with_room_takes_both() -> None:
    nodes = [node("a", free=8), node("b", free=2)]
    three = plan_gang(pod=worker(gpus=4), workers=3, nodes=nodes, now=NOW)
    assert (three.room, three.room_nodes) == (2, 1)  # b has 2 free GPUs: not even one 4-GPU worker
    plan = plan_gang(pod=worker(gpus=4), workers=2, nodes=nodes, now=NOW)
    assert plan.places == ("a", "a")
    assert not plan_gang(pod=worker(gpus=4), workers=3, nodes=nodes, now=NOW).fits


def test_the_window_for_all_workers_on_a_node_must_fit_not_just_one() -> None:
    # 8 GPUs free for 10 h, but only 4 of them beyond 30 min: one 4-GPU worker fits, a second would be cut short.
    windows = (IdleWindow(NOW - H, NOW + 10 * H, 4), IdleWindow(NOW - H, NOW + 0.5 * H, 8))
    nodes = [node("a", windows=windows)]
    assert plan_gang(pod=worker(gpus=4), workers=2, nodes=nodes, now=NOW).room == 1
    assert not plan_gang(pod=worker(gpus=4), workers=2, nodes=nodes, now=NOW).fits
    assert plan_gang(pod=worker(gpus=4), workers=2, nodes=[*nodes, node("b")], now=NOW).fits


def test_plan_prefers_the_best_scored_node_first() -> None:
    # The tighter window that still fits scores higher (best fit): it gets the first place.
    nodes = [node("loose", end=None), node("tight", end=NOW + 1.2 * H)]
    plan = plan_gang(pod=worker(gpus=8), workers=2, nodes=nodes, now=NOW)
    assert plan.places == ("tight", "loose")


def test_a_gang_the_most_nodes_cannot_hold_is_not_judged_again_as_a_larger_gang() -> None:
    # ten nodes with one GPU free each: nine workers need nine nodes, and the gang may span four
    nodes = [node(f"n{i}", free=1) for i in range(10)]
    asked: list[int] = []

    def goodput(members: int) -> None:  # the rule on, with nothing learnt: the strict need at every gang size
        asked.append(members)

    plan = plan_gang(pod=worker(gpus=1), workers=9, nodes=nodes, now=NOW, goodput=goodput, max_nodes=4, min_nodes=2)
    assert not plan.fits and (plan.room, plan.room_nodes) == (10, 10)
    assert asked == [2]  # larger gangs only lose room: four nodes of one GPU can never hold nine
    assert plan_gang(pod=worker(gpus=1), workers=4, nodes=nodes, now=NOW, goodput=goodput, max_nodes=4).fits


def test_zero_workers_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        plan_gang(pod=worker(), workers=0, nodes=[node("a")], now=NOW)


def test_withhold_takes_reserved_gpus_out_of_now_and_every_window() -> None:
    windows = (IdleWindow(NOW - H, None, 6), IdleWindow(NOW - H, NOW + H, 8))
    view = withhold(node("a", free=8, windows=windows), 4)
    assert view.gpus_free_now == 4
    assert [w.free_gpus for w in view.windows or ()] == [2, 4]
    assert withhold(view, 0) is view
    assert withhold(node("a", free=2), 4).gpus_free_now == 0


def test_admit_gives_each_worker_its_own_place_and_the_same_one_again() -> None:
    table = GangReservations(timeout_seconds=60)
    table.reserve(KEY, places=["a", "b"], gpus=8, now=NOW)
    assert table.admit(KEY, "w0", candidates={"a", "b"}) == "a"
    assert table.admit(KEY, "w1", candidates={"a", "b"}) == "b"
    assert table.admit(KEY, "w0", candidates={"a", "b"}) == "a"  # a retried worker keeps its place
    assert table.admit(KEY, "w2", candidates={"a", "b"}) is None  # every place is claimed
    assert table.admit(OTHER, "x", candidates={"a"}) is None  # no reservation for that gang


def test_admit_moves_a_worker_when_the_scheduler_does_not_offer_its_place() -> None:
    table = GangReservations()
    table.reserve(KEY, places=["a", "a", "b"], gpus=2, now=NOW)
    assert table.admit(KEY, "w0", candidates={"b"}) == "b"
    assert table.admit(KEY, "w1", candidates={"b"}) is None  # b's one place is w0's
    assert table.admit(KEY, "w1", candidates={"a", "b"}) == "a"
    assert table.admit(KEY, "w2", candidates={"a", "b"}) == "a"


def test_reserved_gpus_are_held_back_from_others_until_each_worker_is_bound() -> None:
    table = GangReservations()
    table.reserve(KEY, places=["a", "a", "b"], gpus=2, now=NOW)
    assert table.withheld() == {"a": 4, "b": 2}
    assert table.withheld(exclude=KEY) == {}  # the gang's own workers see their places as free
    assert table.observe(KEY, {"w0": "a", "w1": None, "w2": None}) is None
    assert table.withheld() == {"a": 2, "b": 2}  # the bound worker is counted by the cluster state now
    assert table.observe(KEY, {"w0": "a", "w1": "a", "w2": "b"}) == COMPLETE
    assert table.get(KEY) is None and table.withheld() == {}


def test_reservation_ends_when_the_gangs_pods_are_gone_but_not_before_they_were_seen() -> None:
    table = GangReservations()
    table.reserve(KEY, places=["a", "b"], gpus=1, now=NOW)
    assert table.observe(KEY, {}) is None  # the informer may not have seen the pods yet
    assert table.observe(KEY, {"w0": None, "w1": None}) is None
    assert table.observe(KEY, {}) == GONE
    assert len(table) == 0


def test_partial_reservation_expires_after_the_timeout() -> None:
    table = GangReservations(timeout_seconds=60)
    table.reserve(KEY, places=["a", "b"], gpus=1, now=NOW)
    table.reserve(OTHER, places=["c"], gpus=1, now=NOW + 30)
    table.observe(KEY, {"w0": "a", "w1": None})
    assert table.expire(now=NOW + 60) == []
    assert table.expire(now=NOW + 61) == [KEY]
    assert table.keys() == [OTHER]
    assert table.withheld() == {"c": 1}


def test_every_change_of_the_held_gpus_bumps_the_version() -> None:
    table = GangReservations()
    v0 = table.version
    table.reserve(KEY, places=["a"], gpus=1, now=NOW)
    v1 = table.version
    table.observe(KEY, {"w0": None})
    assert table.version == v1  # nothing bound: the same GPUs held
    assert table.release(KEY) and not table.release(KEY)
    assert v0 < v1 < table.version


def test_reservation_places_are_kept_per_node() -> None:
    table = GangReservations()
    res = table.reserve(KEY, places=["b", "a", "b"], gpus=1, now=NOW)
    assert res.places == Counter({"b": 2, "a": 1}) and res.order == ("b", "a") and res.size == 3
    with pytest.raises(ValueError):
        table.reserve(KEY, places=[], gpus=1, now=NOW)
    with pytest.raises(ValueError):
        GangReservations(timeout_seconds=0)
