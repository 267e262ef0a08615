"""`ClusterStore.node_arrays` keeps the columns of a node-name list until the store changes: the same list again is
served the same columns, any change the views can see (pods, nodes, forecasts, staleness) is served fresh (a change
to a few nodes by rewriting their rows only), and a different list never gets another list's rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from offpeak_core.forecast import ForecastSettings
from offpeak_core.nodearrays import NodeArrays
from offpeak_extender import viewcache
from offpeak_extender.store import ClusterStore
from offpeak_extender.viewcache import ARRAYS_CACHE_ENTRIES
from offpeak_extender.wire import list_key

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
    assert "a" in store.cache.ready  # rebuilt in the informer's thread, not left to the next request
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


def columns(arrays: NodeArrays, now: float) -> dict[str, Any]:
    """Everything the decisions read of `arrays`, comparable (window columns through `window_left`)."""
    return {"views": arrays.views, "names": arrays.names.tolist(), "json": arrays.json_names.tolist(),
            "types": [arrays.type_names[c] for c in arrays.type_code.tolist()],
            **{c: getattr(arrays, c).tolist() for c in ("free_now", "total", "stale", "has_windows", "flat_free",
                                                        "flat_end")},
            **{f"left{g}": arrays.window_left(gpus=g, now=now + dt).tolist() for g in (1, 2, 4) for dt in (0, 70)}}


def assert_served_fresh(store: ClusterStore, names: list[str], now: float) -> NodeArrays:
    """`node_arrays` serves what gathering the store's views afresh gives."""
    arrays, unknown = store.node_arrays(names)
    views, want_unknown = store.views(names)
    assert unknown == want_unknown
    assert columns(arrays, now) == columns(NodeArrays.from_views(views), now)
    return arrays


def test_a_pod_event_rewrites_its_nodes_rows_only_and_lists_without_it_keep_their_columns() -> None:
    store = make_store(Clock(NOW))
    both, _ = store.node_arrays(["a", "b", "c"])
    without, _ = store.node_arrays(["a", "c"])
    store.upsert_pod(gpu_pod("train-0", gpus=3, node="b"))
    assert store.node_arrays(["a", "c"])[0] is without  # b is not listed: nothing to rewrite
    patched = assert_served_fresh(store, ["a", "b", "c"], NOW)
    assert patched is not both and patched.free_now.tolist() == [2, 5, 8] and both.free_now.tolist() == [2, 8, 8]
    assert patched.total is both.total and patched.names is both.names  # unchanged columns are shared
    assert store.node_arrays(["a", "b", "c"])[0] is patched  # and kept for the next request
    store.delete_pod(gpu_pod("train-0", gpus=3, node="b"))
    assert assert_served_fresh(store, ["a", "b", "c"], NOW).free_now.tolist() == [2, 8, 8]


def test_node_changes_in_a_kept_list_are_served_fresh() -> None:
    store = make_store(Clock(NOW))
    store.node_arrays(["a", "b", "c"])
    store.upsert_node(gpu_node("b", gpus=8, gpu_type="H100-SXM5-80GB"))  # relabelled: a GPU type new to the rows
    arrays = assert_served_fresh(store, ["a", "b", "c"], NOW)
    assert arrays.type_names[int(arrays.type_code[1])] == "H100-SXM5-80GB"
    store.delete_node(gpu_node("c"))
    assert served(store, ["a", "b", "c"]) == (["a", "b"], [2, 8], ["c"])
    store.upsert_node(gpu_node("c", gpus=2, gpu_type="T4"))  # back, and no longer unknown
    assert served(store, ["a", "b", "c"]) == (["a", "b", "c"], [2, 8, 2], [])


def test_kept_columns_always_match_columns_gathered_afresh() -> None:
    """Random pod, node, forecast and clock changes, each followed by requests for a few lists: a patched row that
    kept an old value, or a list served rows it should not have, fails here."""
    rng = np.random.default_rng(1)
    clock = Clock(NOW)
    names = [f"n{i}" for i in range(8)]
    store = ClusterStore(settings=S, clock=clock, stale_after_seconds=30.0)
    store.replace_all(nodes=[gpu_node(n, gpus=8) for n in names], pods=[])
    store.set_history(history(names), now=NOW)
    lists = [names, names[::2], names[3:], names[:2] + ["gone"], names[1:3] + names[1:2]]
    for step in range(300):
        node, gpus = names[int(rng.integers(len(names)))], int(rng.integers(1, 4))
        kind = rng.choice(["pod", "pod", "pod", "unpod", "node", "delete", "refit", "tick"])
        pod = gpu_pod(f"p{int(rng.integers(6))}", gpus=gpus, node=node, workload=str(rng.choice(["online", "x"])))
        if kind == "pod":
            store.upsert_pod(pod)
        elif kind == "unpod":
            store.delete_pod(pod)
        elif kind == "node":
            store.upsert_node(gpu_node(node, gpus=int(rng.choice([4, 8])), gpu_type=str(rng.choice(["T4", "L4"]))))
        elif kind == "delete":
            store.delete_node(gpu_node(node))
        elif kind == "refit" and step % 5 == 0:
            store.set_history(history(names, online=float(rng.uniform(0, 6)), end=clock.t), now=clock.t)
        elif kind == "tick":
            clock.t += float(rng.choice([1.0, 20.0]))
        for names_asked in [lists[int(i)] for i in rng.permutation(len(lists))[:3]]:
            assert_served_fresh(store, names_asked, clock.t)


def test_columns_older_than_the_change_log_are_gathered_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewcache, "CHANGE_LOG_ENTRIES", 4)
    store = make_store(Clock(NOW))
    kept, _ = store.node_arrays(["a", "b"])
    for i in range(3):  # six changes: more than the log holds
        store.upsert_pod(gpu_pod(f"train-{i}", gpus=1, node="c"))
    again = assert_served_fresh(store, ["a", "b"], NOW)
    assert again is not kept and again.total is not kept.total  # gathered, not patched from what it kept


def test_list_keys_tell_every_list_apart() -> None:
    lists = [[], [""], ["", ""], ["a"], ["a", "b"], ["a\0b"], ["a", "\0b"], ["a\0", "b"], ["ab"], ["b", "a"]]
    keys = [list_key(n) for n in lists]
    assert len(set(keys)) == len(lists)
    assert list_key(("a", "b")) == list_key(["a", "b"]) and isinstance(list_key(["a", "b"]), str)
