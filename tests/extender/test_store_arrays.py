"""`ClusterStore.node_arrays` keeps the columns of a node-name list until the store changes: the same list again is
served the same columns, any change the views can see (pods, nodes, forecasts, staleness) is served fresh, and a
different list never gets another list's rows."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_core.forecast import ForecastSettings
from offpeak_extender.store import ARRAYS_CACHE_ENTRIES, ClusterStore

from support.clock import Clock

from .k8s_objects import gpu_node, gpu_pod

DAY = 600.0
S = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=3 * DAY)
NOW = 100 * DAY


def history(names: list[str], online: float = 1.0, end: float = NOW) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    t = np.arange(end - 3 * DAY, end, S.step_seconds)
    return {n: (t, np.full(t.size, online)) for n in names}


def make_store(clock: Clock) -> ClusterStore:
    store = ClusterStore(settings=S, clock=clock, stale_after_seconds=30.0)
    store.replace_all(nodes=[gpu_node("a", gpus=4), gpu_node("b", gpus=8), gpu_node("c", gpus=8, gpu_type="T4")],
                      pods=[gpu_pod("web-0", gpus=2, node="a", workload="online")])
    store.set_history(history(["a", "b", "c"]), now=NOW)
    return store


def served(store: ClusterStore, names: list[str]) -> tuple[list[str], list[int], list[str]]:
    arrays, unknown = store.node_arrays(names)
    return arrays.names.tolist(), arrays.free_now.tolist(), unknown


def test_the_same_list_again_is_served_the_same_columns() -> None:
    store = make_store(Clock(NOW))
    first, _ = store.node_arrays(("a", "b"))
    again, _ = store.node_arrays(["a", "b"])  # a list or a tuple: the names are the key
    assert again is first
    assert first.names.tolist() == ["a", "b"] and first.free_now.tolist() == [2, 8]


def test_a_pod_change_is_served_fresh_columns() -> None:
    store = make_store(Clock(NOW))
    before, _ = store.node_arrays(["a", "b"])
    store.upsert_pod(gpu_pod("train-0", gpus=3, node="b"))
    after, _ = store.node_arrays(["a", "b"])
    assert after is not before
    assert after.free_now.tolist() == [2, 5] and before.free_now.tolist() == [2, 8]
    store.delete_pod(gpu_pod("train-0", gpus=3, node="b"))
    assert served(store, ["a", "b"])[1] == [2, 8]


def test_node_changes_are_served_fresh_columns_and_unknown_names() -> None:
    store = make_store(Clock(NOW))
    assert served(store, ["a", "d"]) == (["a"], [2], ["d"])
    store.upsert_node(gpu_node("d", gpus=2))
    assert served(store, ["a", "d"]) == (["a", "d"], [2, 2], [])
    store.upsert_node(gpu_node("d", gpus=4))  # more GPUs on the same node
    assert served(store, ["a", "d"]) == (["a", "d"], [2, 4], [])
    store.delete_node(gpu_node("d"))
    assert served(store, ["a", "d"]) == (["a"], [2], ["d"])
    store.replace_all(nodes=[gpu_node("a", gpus=4), gpu_node("b", gpus=6), gpu_node("c", gpus=8, gpu_type="T4")])
    assert served(store, ["a", "b", "c"]) == (["a", "b", "c"], [2, 6, 8], [])  # a re-list: b has fewer GPUs


def test_a_different_list_is_never_served_another_lists_rows() -> None:
    store = make_store(Clock(NOW))
    lists = [["a", "b", "c"], ["c", "b", "a"], ["a", "b"], ["b"], ["c", "a"], ["a", "a"]]
    for _ in range(2):  # the second time round, each from the cache (or rebuilt after an eviction)
        for names in lists:
            got, free, unknown = served(store, names)
            assert got == names and not unknown
            assert free == [{"a": 2, "b": 8, "c": 8}[n] for n in names]


def test_new_forecasts_and_staleness_are_served_fresh_columns() -> None:
    clock = Clock(NOW)
    store = make_store(clock)
    fresh, _ = store.node_arrays(["b"])
    assert not fresh.stale[0]
    clock.t = NOW + 31.0  # past stale_after_seconds: fits-now only
    stale, _ = store.node_arrays(["b"])
    assert stale.stale[0] and stale is not fresh
    store.set_history(history(["a", "b", "c"], online=7.0, end=clock.t), now=clock.t)  # a refit: fresh, new windows
    refit, _ = store.node_arrays(["b"])
    assert not refit.stale[0] and refit is not stale
    assert refit.window_left(gpus=2, now=clock.t)[0] < fresh.window_left(gpus=2, now=NOW)[0]
    store.mark_history_failed("Prometheus down")
    failed, _ = store.node_arrays(["b"])
    assert failed.stale[0]


def test_columns_gathered_while_views_were_rebuilt_are_not_kept() -> None:
    clock = Clock(NOW)
    store = make_store(clock)
    store.node_arrays(["a"])
    clock.t += 60  # the forecasts go stale (after 30 s): the views are dropped and rebuilt by the next request
    first, _ = store.node_arrays(["a"])
    second, _ = store.node_arrays(["a"])
    third, _ = store.node_arrays(["a"])
    assert second is not first  # the rebuild published a new view: the store changed after the first lookup
    assert third is second
    assert first.free_now.tolist() == second.free_now.tolist() == [2] and bool(first.stale[0])


def test_a_pod_event_rebuilds_its_nodes_view_at_once_and_a_heartbeat_changes_nothing() -> None:
    store = make_store(Clock(NOW))
    before, _ = store.node_arrays(["a", "b"])
    store.upsert_pod(gpu_pod("web-0", gpus=2, node="a", workload="online"))  # the same pod again: a heartbeat
    store.upsert_pod(gpu_pod("cpu-0", gpus=0, node="b"))  # holds no GPUs: no view depends on it
    assert store.node_arrays(["a", "b"])[0] is before
    store.upsert_pod(gpu_pod("train-0", gpus=1, node="a"))
    assert "a" in store._ready  # rebuilt in the informer's thread, not left to the next request
    assert served(store, ["a", "b"])[1] == [1, 8]


def test_shared_columns_are_read_only_and_withholding_copies() -> None:
    store = make_store(Clock(NOW))
    arrays, _ = store.node_arrays(["a", "b"])
    with pytest.raises(ValueError):
        arrays.free_now[0] = 8
    held = arrays.withhold({"b": 3})
    assert held.free_now.tolist() == [2, 5] and arrays.free_now.tolist() == [2, 8]
    assert store.node_arrays(["a", "b"])[0].free_now.tolist() == [2, 8]


def test_the_cache_keeps_a_few_lists_only() -> None:
    store = make_store(Clock(NOW))
    lists = [("a",), ("b",), ("c",), ("a", "b"), ("b", "c"), ("a", "c")][:ARRAYS_CACHE_ENTRIES + 1]
    first = {names: store.node_arrays(names)[0] for names in lists}
    assert store.node_arrays(lists[-1])[0] is first[lists[-1]]  # the newest is kept
    assert store.node_arrays(lists[0])[0] is not first[lists[0]]  # the oldest went


def test_a_node_a_relist_no_longer_has_is_unknown_not_served_from_its_old_view() -> None:
    store = make_store(Clock(NOW))
    assert served(store, ["a", "b", "c"])[2] == []
    store.replace_all(nodes=[gpu_node("a", gpus=4), gpu_node("c", gpus=8, gpu_type="T4")])  # b is gone
    names, _, unknown = served(store, ["a", "b", "c"])
    assert names == ["a", "c"] and unknown == ["b"]
    assert [v.name for v in store.views(["a", "b", "c"])[0]] == ["a", "c"]
