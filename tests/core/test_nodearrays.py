"""The extender's column decisions (`filter_arrays`, `prioritize_arrays`) give the per-node loop's answers, node for
node, reason for reason; `NodeRows` rewrites a row only when its view changes and reuses forgotten rows."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from offpeak_core.decisions import (filter_arrays, filter_columns, filter_nodes, prioritize_arrays, prioritize_nodes,
                                    window_left, window_left_certain)
from offpeak_core.goodput import GoodputAdmission, GoodputSettings, survival_from_observations
from offpeak_core.model import IdleWindow, NodeView, PodRequest, Prediction
from offpeak_core.nodearrays import NodeArrays, NodeRows, withhold

NOW = 1_000_000.0
TYPES = ("A100-SXM4-40GB", "H100-80GB", "T4", "L4", "A10")


def _view(rng: np.random.Generator, i: int) -> NodeView:
    total = int(rng.choice([1, 4, 8]))
    free = int(rng.integers(0, total + 1))
    gpu_type = str(rng.choice([*TYPES, "MI300X"]))
    stale = bool(rng.random() < 0.15)
    if rng.random() < 0.3:  # the current window only
        end = None if rng.random() < 0.2 else NOW + float(rng.uniform(-100, 20_000))
        wfree = None if rng.random() < 0.5 else int(rng.integers(0, total + 1))
        return NodeView(f"n{i}", gpu_type, total, free, end, wfree, stale)
    windows = []
    for _ in range(int(rng.integers(0, 12))):
        start = NOW + float(rng.uniform(-5_000, 3_000))
        end = None if rng.random() < 0.1 else start + float(rng.uniform(0, 30_000))
        certain = end is not None and rng.random() < 0.4  # ends by an announcement
        windows.append(IdleWindow(start, end, int(rng.integers(0, total + 1)), end_certain=certain))
    return NodeView(f"n{i}", gpu_type, total, free, None, None, stale, tuple(windows))


def _pod(rng: np.random.Generator) -> PodRequest:
    predicted = None
    if rng.random() > 0.15:
        predicted = {}
        for t in rng.choice(["A100", "H100", "T4", "L4-24GB", "a10"], size=int(rng.integers(1, 5)), replace=False):
            p50 = float(rng.choice([0.0, *rng.uniform(10, 20_000, 3)]))
            predicted[str(t)] = Prediction(p50, p50 * float(rng.uniform(1.0, 2.0)),
                                           fits_memory=[None, True, False][int(rng.integers(0, 3))])
    interval = float(rng.choice([0.0, 300.0, 900.0])) if rng.random() < 0.5 else None
    return PodRequest(f"p{rng.integers(1e6)}", gpus=int(rng.integers(1, 5)), predicted=predicted,
                      checkpointing=bool(rng.random() < 0.5), checkpoint_interval_seconds=interval)


def _goodput(rng: np.random.Generator) -> GoodputAdmission | None:
    if rng.random() < 0.5:
        return None
    lasted = (rng.integers(0, 60, 300) * 300.0).tolist()
    forecast_left = rng.choice([900.0, 1_800.0, 3_600.0, 7_200.0], size=len(lasted)).tolist()
    survival = survival_from_observations(forecast_left=forecast_left, lasted=lasted, outlasted=[False] * len(lasted))
    return GoodputAdmission(survival, GoodputSettings(startup_seconds=60.0))


@pytest.mark.parametrize("seed", range(40))
def test_columns_decide_exactly_as_the_per_node_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    views = [_view(rng, i) for i in range(int(rng.integers(1, 60)))]
    arrays = NodeArrays.from_views(views)
    for _ in range(5):
        pod, goodput = _pod(rng), _goodput(rng)
        kw = {"pod": pod, "now": NOW + float(rng.uniform(0, 500)), "margin": float(rng.choice([0.0, 0.15])),
              "checkpoint_intervals": int(rng.choice([0, 3])), "goodput": goodput}
        looped, columns = filter_nodes(nodes=views, **kw), filter_arrays(nodes=arrays, **kw)
        assert columns.passed == looped.passed
        assert columns.failed == looped.failed
        assert list(columns.failed) == list(looped.failed)  # same order as the request
        assert prioritize_arrays(nodes=arrays, **kw) == prioritize_nodes(nodes=views, **kw)


@pytest.mark.parametrize("seed", range(20))
def test_gpus_withheld_for_gangs_on_columns_decide_as_on_withheld_views(seed: int) -> None:
    """`NodeArrays.withhold` takes reserved GPUs out of the rows that hold them, exactly as `withhold` does to
    each view: the same nodes pass, for the same reasons, with the same scores; the original columns are unchanged."""
    rng = np.random.default_rng(1000 + seed)
    views = [_view(rng, i) for i in range(int(rng.integers(1, 60)))]
    arrays = NodeArrays.from_views(views)
    before = arrays.free_now.copy(), arrays.win_free.copy(), arrays.flat_free.copy()
    held = {v.name: int(rng.integers(0, 9)) for v in views if rng.random() < 0.4}
    held["not-in-this-request"] = 3
    withheld_views = [withhold(v, held.get(v.name, 0)) for v in views]
    columns = arrays.withhold(held)
    for _ in range(5):
        kw = {"pod": _pod(rng), "now": NOW + float(rng.uniform(0, 500)), "margin": 0.15, "goodput": _goodput(rng)}
        looped, on_columns = filter_nodes(nodes=withheld_views, **kw), filter_arrays(nodes=columns, **kw)
        assert on_columns.passed == looped.passed and on_columns.failed == looped.failed
        assert prioritize_arrays(nodes=columns, **kw) == prioritize_nodes(nodes=withheld_views, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(before, (arrays.free_now, arrays.win_free, arrays.flat_free)))
    assert arrays.withhold({}) is arrays


def test_window_left_columns_match_the_scalar_rule() -> None:
    rng = np.random.default_rng(7)
    views = [_view(rng, i) for i in range(200)]
    arrays = NodeArrays.from_views(views)
    for gpus in (1, 2, 8):
        got = arrays.window_left(gpus=gpus, now=NOW)
        want = [window_left(node=v, gpus=gpus, now=NOW) for v in views]
        assert got.tolist() == want
        left, certain = arrays.window_left_certain(gpus=gpus, now=NOW)
        scalar = [window_left_certain(node=v, gpus=gpus, now=NOW) for v in views]
        assert left.tolist() == [x for x, _ in scalar]
        assert [bool(c) and x > 0 for x, c in zip(left.tolist(), certain.tolist())] == [c for _, c in scalar]
        assert any(c for _, c in scalar)  # the rule is exercised


def test_a_node_that_cannot_take_the_pod_fails_with_its_reason_and_scores_zero() -> None:
    views = [NodeView("busy", "T4", 8, 1, NOW + 10_000), NodeView("short", "T4", 8, 8, NOW + 60),
             NodeView("long", "T4", 8, 8, NOW + 10_000)]
    pod = PodRequest("p", gpus=2, predicted={"T4": Prediction(600.0, 900.0)})
    arrays = NodeArrays.from_views(views)
    result = filter_arrays(pod=pod, nodes=arrays, now=NOW)
    assert result.passed == ("long",)
    assert "2 GPU(s), 1 of 8 free now" in result.failed["busy"]
    assert result.failed["short"].startswith("window ends within 1m")
    scores = prioritize_arrays(pod=pod, nodes=arrays, now=NOW)
    assert scores["busy"] == scores["short"] == 0 and scores["long"] >= 1


def test_rows_are_rewritten_only_for_changed_views_and_forgotten_rows_are_reused() -> None:
    rows = NodeRows(width=1)
    a, b = NodeView("a", "T4", 8, 8, NOW + 100), NodeView("b", "L4", 8, 2, None)
    first = rows.gather([a, b])
    assert first.free_now.tolist() == [8, 2] and math.isinf(first.flat_end[1])
    wide = NodeView("a", "T4", 8, 3, None, None, False,
                    tuple(IdleWindow(NOW - 10, NOW + 100 * k, k) for k in range(1, 6)))  # grows the window columns
    second = rows.gather([b, wide])
    assert second.free_now.tolist() == [2, 3]
    assert second.window_left(gpus=4, now=NOW).tolist() == [0.0, 500.0]  # the 5-GPU window outlasts the 4-GPU one
    assert first.free_now.tolist() == [8, 2]  # an earlier request's columns are its own copy
    rows.forget("b")
    assert len(rows) == 1
    c = NodeView("c", "H100", 4, 4, None)
    third = rows.gather([c, wide])
    assert len(rows) == 2 and third.type_names[int(third.type_code[0])] == "H100"
    assert third.free_now.tolist() == [4, 3]


def test_gathered_columns_name_their_nodes_and_are_read_only() -> None:
    rng = np.random.default_rng(3)
    views = [_view(rng, i) for i in range(30)]
    rows = NodeRows(width=2)
    arrays = rows.gather(views[::-1])
    assert arrays.names.tolist() == [v.name for v in views[::-1]]
    assert arrays.total.tolist() == [v.gpus_total for v in views[::-1]]
    for column in (arrays.names, arrays.free_now, arrays.total, arrays.win_start, arrays.win_free):
        assert not column.flags.writeable
        assert column.flags.c_contiguous  # the window columns are (width, nodes): reductions run over nodes
    with pytest.raises(ValueError):
        arrays.win_free[0, 0] = 1
    rows.forget(views[0].name)
    again = rows.gather([NodeView("new", "T4", 2, 1, None), views[1]])  # takes the forgotten row
    assert again.names.tolist() == ["new", views[1].name] and again.total.tolist() == [2, views[1].gpus_total]


def test_window_left_kept_per_gpu_count_follows_now_across_window_starts() -> None:
    rng = np.random.default_rng(11)
    views = [_view(rng, i) for i in range(200)]
    arrays = NodeArrays.from_views(views)
    starts = sorted({w.start for v in views for w in v.windows or ()})
    # forwards and back again, over window starts and exactly onto them: each time as the scalar rule says
    nows = [NOW, NOW + 1.0, starts[len(starts) // 2], starts[len(starts) // 2] - 1e-6, starts[-1] + 5.0, NOW - 6_000.0,
            starts[0], NOW, NOW + 40_000.0, NOW]
    for now in nows:
        for gpus in (0, 1, 2, 8):
            got = arrays.window_left(gpus=gpus, now=now)
            assert got.tolist() == [window_left(node=v, gpus=gpus, now=now) for v in views], (now, gpus)
    assert set(arrays._ends) == {0, 1, 2, 8}
    got[:] = -1.0  # a caller's copy: what is kept is not changed
    assert arrays.window_left(gpus=8, now=NOW).tolist() == [window_left(node=v, gpus=8, now=NOW) for v in views]


def test_patched_rows_give_what_gathering_the_list_gives() -> None:
    rng = np.random.default_rng(5)
    views = [_view(rng, i) for i in range(60)]
    rows = NodeRows()
    arrays = rows.gather(views)
    arrays.window_left(gpus=2, now=NOW)  # kept with these columns, not with the patched ones
    width = arrays.win_start.shape[0]
    at = [3, 17, 40]
    changed = [dataclasses.replace(_view(rng, i), name=views[i].name, gpu_type="B200") for i in at]
    changed = [v if len(v.windows or ()) <= width else dataclasses.replace(v, windows=v.windows[:width])
               for v in changed]
    patched = rows.patch(arrays, at, changed)
    assert patched is not None
    now_views = list(views)
    for i, v in zip(at, changed):
        now_views[i] = v
    fresh = NodeArrays.from_views(now_views)
    assert patched.views == tuple(now_views) and arrays.views == tuple(views)  # the old columns are left alone
    assert patched.names.tolist() == fresh.names.tolist() and patched.distinct
    assert [patched.type_names[c] for c in patched.type_code] == [v.gpu_type for v in now_views]
    for col in ("free_now", "total", "stale", "has_windows", "flat_free", "flat_end"):
        assert getattr(patched, col).tolist() == getattr(fresh, col).tolist(), col
        assert not getattr(patched, col).flags.writeable
    assert patched.win_free.tolist() == np.pad(fresh.win_free, ((0, width - fresh.win_free.shape[0]), (0, 0)),
                                               constant_values=-1).tolist()
    for gpus in (1, 2, 4):
        assert patched.window_left(gpus=gpus, now=NOW).tolist() == fresh.window_left(gpus=gpus, now=NOW).tolist()
        assert patched.window_left(gpus=gpus, now=NOW + 900).tolist() == [
            window_left(node=v, gpus=gpus, now=NOW + 900) for v in now_views]
    pod = PodRequest("p", gpus=2, predicted={"T4": Prediction(600.0, 900.0), "B200": Prediction(60.0, 90.0)})
    assert filter_arrays(pod=pod, nodes=patched, now=NOW) == filter_nodes(pod=pod, nodes=now_views, now=NOW)
    same = rows.patch(arrays, [5], [views[5]])  # nothing changed in the row: every column is shared
    assert same is not None and same.free_now is arrays.free_now and same.win_free is arrays.win_free


def test_a_patch_with_more_windows_than_the_columns_hold_is_refused() -> None:
    rows = NodeRows(width=1)
    arrays = rows.gather([NodeView("a", "T4", 8, 8, None, None, False, (IdleWindow(NOW, NOW + 10, 8),))])
    wide = NodeView("a", "T4", 8, 8, None, None, False, (IdleWindow(NOW, NOW + 10, 8), IdleWindow(NOW, NOW + 20, 4)))
    assert rows.patch(arrays, [0], [wide]) is None
    assert rows.gather([wide]).window_left(gpus=4, now=NOW).tolist() == [20.0]


def test_a_gpu_types_windows_too_short_share_one_reason_naming_the_longest() -> None:
    """Windows of 61 s, 119 s and 59 s on T4s all read "window ends within 2m" (the longest, rounded up), once for
    the three nodes; a T4 with no window and the L4s get their own reasons, and the per-node loop says the same."""
    views = [NodeView(f"n{i}", "T4", 8, 8, NOW + left, 8) for i, left in enumerate((61.0, 119.0, 59.0, 0.0))]
    views += [NodeView(f"l{i}", "L4", 8, 8, NOW + left, 8) for i, left in enumerate((600.0, 30.0))]
    pod = PodRequest("p", gpus=1, predicted={"T4": Prediction(3_600.0, 3_600.0), "L4": Prediction(900.0, 1_000.0)})
    columns = filter_columns(pod=pod, nodes=NodeArrays.from_views(views), now=NOW)
    by_node = filter_nodes(pod=pod, nodes=views, now=NOW).failed
    assert sorted(columns.reasons) == sorted(set(by_node.values()))
    assert by_node["n0"] == by_node["n1"] == by_node["n2"]
    assert by_node["n0"] == "window ends within 2m, job needs ~1h09m (p90 x1.15) on T4"
    assert by_node["n3"] == "no idle window for 1 GPU(s) now, job needs ~1h09m (p90 x1.15) on T4"
    assert by_node["l0"] == by_node["l1"] == "window ends within 10m, job needs ~20m (p90 x1.15) on L4"
    assert len(columns.reasons) == 3
    assert columns.reason_of[0] == columns.reason_of[1] == columns.reason_of[2] != columns.reason_of[3]


@pytest.mark.parametrize("case", ["huge window", "huge node"])
def test_numbers_too_large_to_pack_group_as_exactly(case: str) -> None:
    """Reason groups are one packed integer per node; where a GPU count is too large for that (no real node), the
    nodes are grouped by sorting their fields instead, with the same reasons as the per-node loop (and windows
    too long for a float's integers are no trouble: they are grouped by type)."""
    if case == "huge window":
        views = [NodeView(f"n{i}", "T4", 8, 8, NOW + 1e25 * (i + 1), 8) for i in range(3)]
        pod = PodRequest("p", gpus=1, predicted={"T4": Prediction(1e30, 1e30)})
    else:
        views = [NodeView("n0", "T4", 2**63 - 1, 0, None, None), NodeView("n1", "T4", 1, 0, None, None),
                 NodeView("n2", "T4", 1, 0, None, None)]
        pod = PodRequest("p", gpus=1, predicted={"T4": Prediction(60.0, 60.0)})
    arrays = NodeArrays.from_views(views)
    result = filter_arrays(pod=pod, nodes=arrays, now=NOW)
    assert result == filter_nodes(pod=pod, nodes=views, now=NOW)
    assert len(result.failed) == 3
    assert len(filter_columns(pod=pod, nodes=arrays, now=NOW).reasons) == (1 if case == "huge window" else 2)
